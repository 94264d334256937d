"""GPUs reach a learner the same way from `sidecar run-local`, the scheduler's Docker backend and `image test`."""

from __future__ import annotations

from controller_sidecar.endpoints import Endpoints
from learnerkit.common.engine import ALL_GPUS, gpu_request
from learnerkit.pair.docker import DockerPlacement, learner_options
from learnerkit.pair.runlocal import LocalRun, pair_spec
from learnerkit_build.imagetest.containers import LearnerRun


def local_run(gpus: int) -> LocalRun:
    return LocalRun(
        learner_image="learnerkit/pytorch:2.13-cuda-py3.11",
        sidecar_image="learnerkit/sidecar:0.1.0",
        command=("python", "train.py"),
        results="s3://results/runs/",
        endpoints=Endpoints(etcd_endpoints="127.0.0.1:2379"),
        gpus=gpus,
        job_id="local-0123456789",
    )


def test_run_local_asks_the_engine_for_the_gpus_as_the_docker_backend_does() -> None:
    options = learner_options(pair_spec(local_run(2)), DockerPlacement(), "volume")
    assert options["device_requests"] == [gpu_request(2)]
    assert options["device_requests"][0]["Capabilities"] == [["gpu"]]
    assert options["environment"]["GPU_COUNT"] == "2"
    assert "device_requests" not in learner_options(pair_spec(local_run(0)), DockerPlacement(), "volume")


def test_image_test_gpus_ask_for_every_gpu_of_the_engine(tmp_path) -> None:  # type: ignore[no-untyped-def]
    assert LearnerRun("img", tmp_path, gpus=True).options()["device_requests"] == [gpu_request(ALL_GPUS)]
    assert "device_requests" not in LearnerRun("img", tmp_path).options()
