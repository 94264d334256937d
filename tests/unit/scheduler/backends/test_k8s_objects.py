"""The generated Kubernetes objects: schema-valid, hardened, GPU-aware, credentials only on the sidecar."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import replace
from typing import Any

import pytest

from controller_sidecar.endpoints import Endpoints
from learnerkit.common.errors import ConfigError
from learnerkit.pair.spec import SIDECAR_CPUS, SIDECAR_MEMORY_BYTES, PairSpec
from learnerkit.scheduler.backends import deployment as dep
from learnerkit.scheduler.backends import k8s_objects as ko
from learnerkit.scheduler.errors import InvalidObjectError

ENDPOINTS = Endpoints(
    etcd_endpoints="etcd.platform:2379",
    etcd_username="job-42",
    etcd_password="etcd-pw",
    s3_endpoint_url="http://s3.platform:8333",
    s3_access_key="AKIA-TEST",
    s3_secret_key="s3-secret",
)
SECRET_VALUES = {"etcd-pw", "AKIA-TEST", "s3-secret"}
EGRESS = (dep.Egress("10.20.0.0/24", 2379), dep.Egress("10.30.0.5/32", 8333))


def make_job(
    learners: int = 1,
    *,
    framework: ko.Framework = "pytorch",
    gpus: int = 0,
    gpu_type: str | None = None,
    command: tuple[str, ...] | str = ("python", "/opt/learner/smoke/train.py"),
) -> dep.JobDeployment:
    pods = tuple(
        PairSpec(
            job_id="job-42",
            learner_id=n,
            num_learners=learners,
            learner_image="registry.local/learnerkit/pytorch:2.13-cpu-py3.11",
            sidecar_image="registry.local/learnerkit/sidecar:0.1.0",
            command=command,
            sidecar_config={"data": {"mode": "copy", "bucket": "training-data", "prefix": "mnist/"}},
            endpoints=ENDPOINTS,
            learner_env={"EPOCHS": "3"},
            cpus=1.5,
            memory_bytes=4 << 30,
            gpus=gpus,
            gpu_type=gpu_type,
            namespace="training",
        )
        for n in range(1, learners + 1)
    )
    return dep.JobDeployment(
        "job-42", pods, distributed=learners > 1, framework=framework, platform_egress=EGRESS, namespace="training"
    )


def by_kind(objects: list[ko.KubeObject], kind: str) -> list[ko.KubeObject]:
    return [obj for obj in objects if obj["kind"] == kind]


def containers(pod: ko.KubeObject) -> dict[str, dict[str, Any]]:
    spec = pod["spec"]
    return {item["name"]: item for item in [*spec["initContainers"], *spec["containers"]]}


def env_of(container: dict[str, Any]) -> dict[str, str]:
    """Each variable's value; one from the downward API as ``fieldRef:<path>``, one of a Secret as
    ``secretKeyRef:<secret>/<key>``."""
    return {item["name"]: _value_of(item) for item in container.get("env", [])}


def _value_of(item: dict[str, Any]) -> str:
    if "value" in item:
        return str(item["value"])
    source = item["valueFrom"]
    if "secretKeyRef" in source:
        return f"secretKeyRef:{source['secretKeyRef']['name']}/{source['secretKeyRef']['key']}"
    return f"fieldRef:{source['fieldRef']['fieldPath']}"


@pytest.mark.parametrize("learners", [1, 2, 3])
@pytest.mark.parametrize("framework", ["pytorch", "tensorflow", "mxnet", "caffe"])
@pytest.mark.parametrize("gpus", [0, 2])
def test_every_object_validates_strictly(learners: int, framework: ko.Framework, gpus: int) -> None:
    objects = ko.job_objects(
        make_job(learners, framework=framework, gpus=gpus, gpu_type="NVIDIA-A100-SXM4-80GB" if gpus else None)
    )
    ko.validate_objects(objects)


def test_objects_validate_against_the_newest_schema_too() -> None:
    ko.validate_objects(
        ko.job_objects(make_job(2, framework="tensorflow", gpus=1, gpu_type="NVIDIA-A100-SXM4-80GB")), "1.37"
    )


def test_validation_names_the_object_and_the_field() -> None:
    pod = by_kind(ko.job_objects(make_job()), "Pod")[0]
    broken: ko.KubeObject = {**pod, "spec": {**pod["spec"], "restartPolicy": 7}}
    with pytest.raises(InvalidObjectError, match=r"Pod training/lk-job-42-1: spec\.restartPolicy"):
        ko.validate_objects([broken])


def test_one_learner_job_has_pod_secret_and_policy_but_no_service() -> None:
    objects = ko.job_objects(make_job(1))
    assert [(obj["kind"], obj["metadata"]["name"]) for obj in objects] == [
        ("Secret", "lk-job-42-sidecar"),
        ("NetworkPolicy", "lk-job-42"),
        ("Pod", "lk-job-42-1"),
    ]
    assert all(obj["metadata"]["namespace"] == "training" for obj in objects)
    assert all(obj["metadata"]["labels"][ko.JOB_LABEL] == "job-42" for obj in objects)


def test_pod_has_learner_and_native_sidecar_sharing_job_volume() -> None:
    pod = by_kind(ko.job_objects(make_job()), "Pod")[0]
    spec = pod["spec"]
    assert [c["name"] for c in spec["initContainers"]] == ["job-folders", "sidecar"]
    assert spec["initContainers"][1]["restartPolicy"] == "Always"
    assert [c["name"] for c in spec["containers"]] == ["learner"]
    assert spec["restartPolicy"] == "Never"
    assert spec["shareProcessNamespace"] is True
    assert spec["automountServiceAccountToken"] is False
    assert spec["enableServiceLinks"] is False
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["job"] == {"name": "job", "emptyDir": {}}
    assert volumes["dshm"]["emptyDir"]["medium"] == "Memory"
    for container in containers(pod).values():
        mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        assert mounts["/job"] == "job"
        assert container["name"] == ko.FOLDERS_CONTAINER or mounts["/tmp"].endswith("-tmp")
    assert {m["mountPath"] for m in containers(pod)["learner"]["volumeMounts"]} >= {"/dev/shm"}
    labels = pod["metadata"]["labels"]
    assert labels[ko.LEARNER_LABEL] == "1"
    assert labels["app.kubernetes.io/managed-by"] == ko.MANAGED_BY
    assert labels["app.kubernetes.io/part-of"] == "learnerkit"


def test_sidecar_config_keeps_running_and_names_the_learner() -> None:
    pod = by_kind(ko.job_objects(make_job(2)), "Pod")[1]
    config = json.loads(env_of(containers(pod)["sidecar"])["LEARNERKIT_SIDECAR_CONFIG_JSON"])
    assert config["exit_when_done"] is False
    assert (config["job_id"], config["learner_id"], config["num_learners"]) == ("job-42", 2, 2)
    assert config["data"]["bucket"] == "training-data"
    assert not SECRET_VALUES & set(json.dumps(config).split('"'))


@pytest.mark.parametrize("layout", list(ko.PodLayout))
def test_a_sidecar_that_dies_leaves_its_logs_end_in_its_status(layout: ko.PodLayout) -> None:
    job = make_job()
    sidecar = ko.sidecar_container(job, job.learners[0], layout)
    assert sidecar["terminationMessagePolicy"] == "FallbackToLogsOnError"


def test_every_container_runs_restricted_and_the_sidecar_as_its_own_user() -> None:
    pod = by_kind(ko.job_objects(make_job(gpus=1)), "Pod")[0]
    users = {name: container["securityContext"]["runAsUser"] for name, container in containers(pod).items()}
    assert users == {"learner": 1000, "sidecar": 1001, "job-folders": 1001}
    for container in containers(pod).values():
        context = container["securityContext"]
        assert context["runAsNonRoot"] is True
        assert context["runAsGroup"] == 0
        assert context["allowPrivilegeEscalation"] is False
        assert context["readOnlyRootFilesystem"] is True
        assert context["capabilities"] == {"drop": ["ALL"]}
        assert context["seccompProfile"] == {"type": "RuntimeDefault"}
        assert "privileged" not in context


def test_resources_and_grace_period() -> None:
    job = make_job()
    pod = by_kind(ko.job_objects(job), "Pod")[0]
    learner = containers(pod)["learner"]
    assert learner["resources"] == {
        "requests": {"cpu": "1500m", "memory": str(4 << 30)},
        "limits": {"cpu": "1500m", "memory": str(4 << 30)},
    }
    assert containers(pod)["sidecar"]["resources"] == ko.SIDECAR_RESOURCES
    spec = job.learners[0]
    assert pod["spec"]["terminationGracePeriodSeconds"] > spec.halt_grace_s + spec.shutdown_deadline_s


def test_gpu_limits_affinity_and_toleration() -> None:
    pod = by_kind(ko.job_objects(make_job(gpus=2, gpu_type="Tesla-V100-SXM2-16GB")), "Pod")[0]
    learner = containers(pod)["learner"]
    assert learner["resources"]["limits"][ko.GPU_RESOURCE] == "2"
    assert ko.GPU_RESOURCE not in containers(pod)["sidecar"]["resources"]["limits"]
    assert env_of(learner)["GPU_COUNT"] == "2"
    terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"] == [
        {"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In", "values": ["Tesla-V100-SXM2-16GB"]}]}
    ]
    assert pod["spec"]["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


def test_cpu_pod_asks_for_no_gpu_and_tolerates_no_gpu_taint() -> None:
    pod = by_kind(ko.job_objects(make_job()), "Pod")[0]
    assert ko.GPU_RESOURCE not in containers(pod)["learner"]["resources"]["limits"]
    assert "tolerations" not in pod["spec"]
    assert "affinity" not in pod["spec"]


def test_each_pod_is_pinned_to_the_node_its_learner_was_admitted_to() -> None:
    """kube-scheduler placed pods anywhere: with two real nodes a job the scheduler admitted to one ran on the other,
    and the loss of the node it ran on went unnoticed (issue 21, a second kubelet on the real-cluster tier)."""
    job = replace(make_job(2, gpus=1, gpu_type="NVIDIA-A100-SXM4-80GB"), nodes=("n1", "n2"))
    pods = by_kind(ko.job_objects(job), "Pod")
    ko.validate_objects(pods)
    gpu = {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-A100-SXM4-80GB"]}
    for pod, node in zip(pods, ("n1", "n2"), strict=True):
        terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        name = {"key": "metadata.name", "operator": "In", "values": [node]}
        assert terms["nodeSelectorTerms"] == [{"matchExpressions": [gpu], "matchFields": [name]}], "one term: both hold"


def test_a_job_of_two_learners_with_one_node_is_refused() -> None:
    with pytest.raises(ConfigError, match="1 nodes for 2 learners"):
        replace(make_job(2), nodes=("n1",))


def test_gpu_type_without_gpus_is_refused() -> None:
    with pytest.raises(ConfigError, match="gpu_type"):
        make_job(gpus=0, gpu_type="NVIDIA-A100-SXM4-80GB")


def test_secret_is_referenced_by_the_sidecar_only() -> None:
    job = make_job(2)
    objects = ko.job_objects(job)
    (secret,) = by_kind(objects, "Secret")
    assert secret["stringData"] == ENDPOINTS.env()
    assert set(secret["stringData"].values()) >= SECRET_VALUES
    for pod in by_kind(objects, "Pod"):
        sidecar, learner = containers(pod)["sidecar"], containers(pod)["learner"]
        # Each variable names its key: the Secret also holds files, which must never become variables.
        assert "envFrom" not in sidecar
        assert {name: value for name, value in env_of(sidecar).items() if value.startswith("secretKeyRef:")} == {
            name: f"secretKeyRef:{job.secret_name}/{name}" for name in ENDPOINTS.env()
        }
        learner_text = json.dumps(learner)
        assert job.secret_name not in learner_text
        assert "secretKeyRef" not in learner_text
        assert "envFrom" not in learner
        assert not SECRET_VALUES & set(env_of(learner).values())
        assert all("secret" not in volume for volume in pod["spec"]["volumes"])


def test_single_learner_policy_allows_no_pod_traffic() -> None:
    (policy,) = by_kind(ko.job_objects(make_job(1)), "NetworkPolicy")
    spec = policy["spec"]
    assert spec["podSelector"] == {"matchLabels": {ko.JOB_LABEL: "job-42"}}
    assert spec["policyTypes"] == ["Ingress", "Egress"]
    assert spec["ingress"] == []
    destinations = [peer for rule in spec["egress"] for peer in rule["to"]]
    assert not [peer for peer in destinations if "podSelector" in peer and "namespaceSelector" not in peer]
    blocks = {peer["ipBlock"]["cidr"] for peer in destinations if "ipBlock" in peer}
    assert blocks == {"10.20.0.0/24", "10.30.0.5/32"}
    dns = spec["egress"][0]
    assert {(port["protocol"], port["port"]) for port in dns["ports"]} == {("UDP", 53), ("TCP", 53)}


def test_multi_learner_policy_allows_the_jobs_own_pods() -> None:
    (policy,) = by_kind(ko.job_objects(make_job(3)), "NetworkPolicy")
    peers = [{"podSelector": {"matchLabels": {ko.JOB_LABEL: "job-42"}}}]
    assert policy["spec"]["ingress"] == [{"from": peers}]
    assert {"to": peers} in policy["spec"]["egress"]


def test_headless_service_for_two_or_more_learners() -> None:
    job = make_job(2)
    objects = ko.job_objects(job)
    (service,) = by_kind(objects, "Service")
    assert service["metadata"]["name"] == "lk-job-42"
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["publishNotReadyAddresses"] is True
    assert service["spec"]["selector"][ko.JOB_LABEL] == "job-42"
    for pod in by_kind(objects, "Pod"):
        assert pod["spec"]["subdomain"] == "lk-job-42"
        assert pod["spec"]["hostname"] == pod["metadata"]["name"]
        assert all(pod["metadata"]["labels"][key] == value for key, value in service["spec"]["selector"].items())


def test_distributed_env_generic_and_pytorch() -> None:
    pods = by_kind(ko.job_objects(make_job(3)), "Pod")
    for rank, pod in enumerate(pods):
        env = env_of(containers(pod)["learner"])
        assert env["MASTER_ADDR"] == "lk-job-42-1.lk-job-42"
        assert env["MASTER_PORT"] == str(dep.DEFAULT_MASTER_PORT)
        assert env["WORLD_SIZE"] == "3"
        assert env["RANK"] == str(rank)
        assert env["LEARNER_ID"] == str(rank + 1)
        assert env["NUM_LEARNERS"] == "3"
        assert env["EPOCHS"] == "3"
        assert "TF_CONFIG" not in env
        assert not [name for name in env if name.startswith("DMLC_")]


def test_tf_config_lists_every_worker() -> None:
    pods = by_kind(ko.job_objects(make_job(2, framework="tensorflow")), "Pod")
    configs = [json.loads(env_of(containers(pod)["learner"])["TF_CONFIG"]) for pod in pods]
    workers = ["lk-job-42-1.lk-job-42:29500", "lk-job-42-2.lk-job-42:29500"]
    assert configs == [
        {"cluster": {"worker": workers}, "task": {"type": "worker", "index": 0}},
        {"cluster": {"worker": workers}, "task": {"type": "worker", "index": 1}},
    ]


def test_mxnet_gets_dmlc_variables() -> None:
    pod = by_kind(ko.job_objects(make_job(2, framework="mxnet")), "Pod")[1]
    env = env_of(containers(pod)["learner"])
    assert env["DMLC_PS_ROOT_URI"] == "lk-job-42-1.lk-job-42"
    assert env["DMLC_NUM_WORKER"] == env["DMLC_NUM_SERVER"] == "2"
    assert env["DMLC_ROLE"] == "worker"


def test_single_learner_gets_no_distributed_env() -> None:
    env = env_of(containers(by_kind(ko.job_objects(make_job(1)), "Pod")[0])["learner"])
    assert not {"MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "TF_CONFIG"} & set(env)


def test_argv_becomes_args_and_a_shell_string_becomes_learner_command() -> None:
    argv_pod = by_kind(ko.job_objects(make_job()), "Pod")[0]
    learner = containers(argv_pod)["learner"]
    assert learner["args"] == ["python", "/opt/learner/smoke/train.py"]
    assert "command" not in learner, "the image's learner-run entrypoint must stay"
    shell_pod = by_kind(ko.job_objects(make_job(command="python train.py --epochs 3")), "Pod")[0]
    learner = containers(shell_pod)["learner"]
    assert "args" not in learner
    assert env_of(learner)["LEARNER_COMMAND"] == "python train.py --epochs 3"


@pytest.mark.parametrize("job_id", ["Job_42", "-job", "x" * 51, ""])
def test_job_ids_that_cannot_name_pods_are_refused(job_id: str) -> None:
    learner = make_job().learners[0]
    with pytest.raises(ConfigError, match="job id"):
        replace(learner, job_id=job_id)


def test_distributed_job_with_one_learner_is_refused() -> None:
    job = make_job(1)
    with pytest.raises(ConfigError, match="at least 2"):
        replace(job, distributed=True)


def test_learners_must_share_the_sidecar_credentials() -> None:
    job = make_job(2)
    other = replace(job.learners[1], endpoints=replace(ENDPOINTS, s3_secret_key="other"))
    with pytest.raises(ConfigError, match="credentials"):
        replace(job, learners=(job.learners[0], other))


def test_the_sidecar_limits_are_those_of_the_docker_backend() -> None:
    limits = ko.SIDECAR_RESOURCES["limits"]
    assert limits == {"cpu": "1", "memory": "1024Mi"}
    assert (float(limits["cpu"]), int(limits["memory"].removesuffix("Mi")) << 20) == (
        SIDECAR_CPUS,
        SIDECAR_MEMORY_BYTES,
    )


def test_learners_of_one_job_share_a_read_write_many_claim_and_a_single_learner_an_empty_dir() -> None:
    job = replace(make_job(2), shared_storage_class="nfs-client", shared_size="20Gi")
    objects = ko.job_objects(job)
    ko.validate_objects(objects)
    (claim,) = by_kind(objects, "PersistentVolumeClaim")
    assert claim["metadata"]["name"] == "lk-job-42-shared"
    assert claim["spec"] == {
        "accessModes": ["ReadWriteMany"],
        "resources": {"requests": {"storage": "20Gi"}},
        "storageClassName": "nfs-client",
    }
    for pod in by_kind(objects, "Pod"):
        volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
        assert volumes["shared"] == {"name": "shared", "persistentVolumeClaim": {"claimName": "lk-job-42-shared"}}
        assert {"name": "shared", "mountPath": "/job/shared"} in containers(pod)["learner"]["volumeMounts"]
        assert pod["spec"]["securityContext"]["fsGroup"] == 0
        assert env_of(containers(pod)["learner"])["DOWNWARD_API_POD_NAMESPACE"] == "fieldRef:metadata.namespace"
    assert "storageClassName" not in ko.shared_claim(make_job(2))["spec"]
    single = ko.job_objects(make_job(1))
    assert by_kind(single, "PersistentVolumeClaim") == []
    volumes = {v["name"]: v for v in by_kind(single, "Pod")[0]["spec"]["volumes"]}
    assert volumes["shared"] == {"name": "shared", "emptyDir": {}}


def test_a_host_folder_store_is_a_read_only_host_path() -> None:
    job = make_job(1)
    job = replace(job, learners=(replace(job.learners[0], data_mount="/srv/datasets/mnist"),))
    objects = ko.job_objects(job)
    ko.validate_objects(objects)
    pod = by_kind(objects, "Pod")[0]
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes["host-data"]["hostPath"] == {"path": "/srv/datasets/mnist", "type": "Directory"}
    assert {"name": "host-data", "mountPath": "/job/data", "readOnly": True} in containers(pod)["learner"][
        "volumeMounts"
    ]


def test_the_manifests_storage_bounds_the_job_folder() -> None:
    """Issue 27 D2: ``storage`` was read and not enforced; a learner could fill the node's disk."""
    job = make_job()
    sized = dataclasses.replace(job, learners=(dataclasses.replace(job.learners[0], storage_bytes=2 << 30),))
    volumes = {v["name"]: v for v in by_kind(ko.job_objects(sized), "Pod")[0]["spec"]["volumes"]}
    assert volumes["job"] == {"name": "job", "emptyDir": {"sizeLimit": str(2 << 30)}}
    ko.validate_objects(ko.job_objects(sized))


PEM = "-----BEGIN CERTIFICATE-----\nMIIBproxyCA\n-----END CERTIFICATE-----\n"
CA_PATH = "/etc/learnerkit/pip/ca.pem"


def with_files(job: dep.JobDeployment, files: dict[str, str]) -> dep.JobDeployment:
    return replace(job, learners=tuple(replace(learner, sidecar_files=files) for learner in job.learners))


@pytest.mark.parametrize("layout", list(ko.PodLayout))
def test_the_pip_ca_bundle_travels_in_the_jobs_secret_and_only_the_sidecar_mounts_it(layout: ko.PodLayout) -> None:
    """Issue 40: the scheduler's host files reach no node, so the CA bundle's content goes in the job's Secret and
    the sidecar mounts it read-only at the path its config names, as the Docker backend's bind mount does."""
    job = with_files(make_job(2), {CA_PATH: PEM})
    objects = ko.job_objects(job, layout)
    ko.validate_objects(objects)
    (secret,) = by_kind(objects, "Secret")
    files = {key: value for key, value in secret["stringData"].items() if key not in ENDPOINTS.env()}
    assert list(files.values()) == [PEM]
    (key,) = files
    for pod in by_kind(objects, "Pod"):
        sidecar, learner = containers(pod)["sidecar"], containers(pod)["learner"]
        (mount,) = [m for m in sidecar["volumeMounts"] if m["mountPath"] == CA_PATH]
        assert mount["readOnly"] is True
        (volume,) = [v for v in pod["spec"]["volumes"] if v["name"] == mount["name"]]
        assert volume["secret"]["secretName"] == job.secret_name
        assert {item["key"]: item["path"] for item in volume["secret"]["items"]}[key] == mount["subPath"]
        assert mount["name"] not in {m["name"] for m in learner["volumeMounts"]}
        assert PEM not in json.dumps(learner) and key not in env_of(sidecar)


def test_without_files_the_sidecar_mounts_nothing_of_the_secret() -> None:
    objects = ko.job_objects(make_job())
    (secret,) = by_kind(objects, "Secret")
    assert secret["stringData"] == ENDPOINTS.env()
    assert all("secret" not in volume for volume in by_kind(objects, "Pod")[0]["spec"]["volumes"])


def test_learners_must_share_the_sidecar_files() -> None:
    job = make_job(2)
    first = replace(job.learners[0], sidecar_files={CA_PATH: PEM})
    with pytest.raises(ConfigError, match="sidecar credentials and files"):
        replace(job, learners=(first, job.learners[1]))


@pytest.mark.parametrize("path", ["etc/ca.pem", "/etc/learnerkit/pip/", "/etc/lk/ca pem"])
def test_a_sidecar_file_needs_an_absolute_plain_path(path: str) -> None:
    with pytest.raises(ConfigError, match="sidecar file"):
        replace(make_job().learners[0], sidecar_files={path: PEM})
