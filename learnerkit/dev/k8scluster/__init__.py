"""A real Kubernetes cluster on this machine, from the binaries ``scripts/k8s-binaries.sh`` built: the tier
``tests/k8s`` and ``bench/k8s_start.py`` run on it (it needs root: the kubelet and containerd do). It starts with
one node; ``add_node`` adds another, with a kubelet of its own in a network namespace of its own
(``learnerkit/dev/k8snode.py``).

etcd, kube-apiserver (token auth, RBAC + Node authorizer, service-account keys from ``openssl``),
kube-scheduler and kube-controller-manager (only its volume binder) listen on 127.0.0.1; a private containerd
(own root, state, socket and runc root) and the kubelet make the node. The node's address is the gateway of a
bridge this code creates (a private /24, no route off the machine, no masquerade): the kubelet refuses a
loopback node IP, and pods reach the host's etcd and S3 through forwarders on that gateway. The kubelet's pods
live under a cgroup root of their own. Multi-learner jobs' ReadWriteMany claims bind to a pool of static
hostPath volumes of the class ``SHARED_CLASS`` (one node: a host folder is shared storage), as a cluster's RWX
storage would serve them.
``stop()`` removes every pod, process, mount, cgroup, namespace, bridge and file the cluster made.

One module per job: ``cluster`` (``LocalCluster``, the order of things), ``controlplane`` (keys, tokens, the
control plane's command lines), ``binaries`` (the cached build), ``api`` (the admin's API calls, kubeconfigs),
``volumes`` (the shared volumes), ``containerd`` (a node's images and tasks), ``cgroups``, ``nodenet`` (an added
node's namespaces), ``forwarder`` and ``poddns`` (what pods reach on the gateway), ``host`` (commands, subnets,
mounts, processes).
"""

from learnerkit.dev.k8scluster.binaries import Binaries, cached_binaries
from learnerkit.dev.k8scluster.cluster import LocalCluster
from learnerkit.dev.k8scluster.controlplane import NODE_NAME
from learnerkit.dev.k8scluster.volumes import SHARED_CLASS

__all__ = ["NODE_NAME", "SHARED_CLASS", "Binaries", "LocalCluster", "cached_binaries"]
