"""The Docker options of a pair's two containers, without an engine."""

from __future__ import annotations

import dataclasses

from controller_sidecar.endpoints import Endpoints
from learnerkit.pair.docker import DockerPlacement, learner_options, sidecar_options
from learnerkit.pair.spec import SIDECAR_CPUS, SIDECAR_MEMORY_BYTES, PairSpec, PidsLimits

SPEC = PairSpec(
    job_id="job-1",
    learner_id=1,
    learner_image="learnerkit/pytorch:2.13-cpu-py3.11",
    sidecar_image="learnerkit/sidecar:0.1.0",
    command=("python", "train.py"),
    sidecar_config={"results": {"bucket": "results", "prefix": "job-1/"}},
    endpoints=Endpoints(etcd_endpoints="127.0.0.1:2379", s3_access_key="key", s3_secret_key="secret"),
    cpus=0.5,
    memory_bytes=256 << 20,
)


def test_the_sidecar_has_cpu_and_memory_limits_whatever_the_learner_asks() -> None:
    options = sidecar_options(SPEC, DockerPlacement(), "vol", {})
    assert options["nano_cpus"] == int(SIDECAR_CPUS * 1e9) == 1_000_000_000
    assert options["mem_limit"] == options["memswap_limit"] == SIDECAR_MEMORY_BYTES == 1 << 30


def test_learner_and_sidecar_are_two_users_of_group_0() -> None:
    learner = learner_options(SPEC, DockerPlacement(), "vol")
    sidecar = sidecar_options(SPEC, DockerPlacement(), "vol", {})
    assert (learner["user"], sidecar["user"]) == ("1000:0", "1001:0")


def test_both_containers_have_a_pids_limit_by_default_and_as_the_spec_says() -> None:
    assert learner_options(SPEC, DockerPlacement(), "vol")["pids_limit"] == 4096
    assert sidecar_options(SPEC, DockerPlacement(), "vol", {})["pids_limit"] == 512
    spec = dataclasses.replace(SPEC, pids=PidsLimits(learner=100, sidecar=50))
    assert learner_options(spec, DockerPlacement(), "vol")["pids_limit"] == 100
    assert sidecar_options(spec, DockerPlacement(), "vol", {})["pids_limit"] == 50


def test_the_platforms_pip_files_reach_the_sidecar_read_only_and_never_the_learner() -> None:
    spec = dataclasses.replace(SPEC, sidecar_mounts={"/etc/learnerkit/pip/ca.pem": "/etc/ssl/proxy-ca.pem"})
    volumes = sidecar_options(spec, DockerPlacement(), "vol", {})["volumes"]
    assert volumes["/etc/ssl/proxy-ca.pem"] == {"bind": "/etc/learnerkit/pip/ca.pem", "mode": "ro"}
    assert volumes["vol"] == {"bind": "/job", "mode": "rw"}
    assert "/etc/ssl/proxy-ca.pem" not in str(learner_options(spec, DockerPlacement(), "vol"))
