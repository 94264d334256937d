"""A real Kubernetes cluster on this machine, from the binaries ``scripts/k8s-binaries.sh`` built (``cluster``)."""

from learnerkit.dev.k8scluster.cluster import NODE_NAME, SHARED_CLASS, Binaries, LocalCluster, cached_binaries

__all__ = ["NODE_NAME", "SHARED_CLASS", "Binaries", "LocalCluster", "cached_binaries"]
