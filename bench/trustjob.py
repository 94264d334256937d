"""A finished job as the platform leaves it in the object store, held in memory for `console_trust.py`: the
constants and stand-ins its provenance writer needs (a benchmark runs without the tests' fixtures)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from controller_sidecar.provenancerecord import SidecarRecord
from controller_sidecar.s3objects import RemoteObject
from controller_sidecar.settings import S3Location
from learnerkit.scheduler.jobs.attempts import Attempt, AttemptEnd
from learnerkit.scheduler.provenance.facts import ImageFact

LEARNER_IMAGE = "learnerkit/pytorch:2.13-cpu-py3.11"
LEARNER_ID = "sha256:" + "1" * 64
SIDECAR_ID = "sha256:" + "2" * 64
JOB = "job-7"
PREFIX = f"{JOB}/"
DATA = {"train/a.bin": b"first data object", "train/b.bin": b"second data object"}
MODEL_ZIP = b"PK\x05\x06" + bytes(18)
METRICS = b'{"step": 1, "values": {"loss": 0.9}}\n{"step": 2, "values": {"loss": 0.4}}\n'
MANIFEST = """\
name: mnist
cpus: 1
gpus: 1
gpu_type: nvidia-a100
memory: 1Gb
learners: 1
data_stores:
  - id: store
    type: s3_datastore
    training_data:
      container: data
    training_results:
      container: results
    connection:
      auth_url: http://127.0.0.1:8333
      user_name: key
      password: secret
framework:
  name: pytorch
  version: "2.13"
  command: python train.py
"""
"""The manifest the signed statement names (the scheduler's own job is submitted with the bench's store)."""


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass
class MemoryStore:
    """The writer's object store, in memory, and the sidecars' records as they put them in etcd."""

    objects: dict[str, bytes] = field(default_factory=dict)
    records: dict[tuple[int, int], SidecarRecord] = field(default_factory=dict)

    def list(self, location: S3Location) -> list[RemoteObject]:
        return [RemoteObject(k, len(v), "e") for k, v in sorted(self.objects.items()) if k.startswith(location.prefix)]

    def get_bytes(self, bucket: str, key: str) -> bytes:
        return self.objects[key]

    def put_bytes(self, bucket: str, key: str, data: bytes) -> None:
        self.objects[key] = data


def describe(image: str) -> ImageFact:
    """The learner's image scanned and passed; any other the sidecar's."""
    if image == LEARNER_ID:
        return ImageFact(LEARNER_IMAGE, LEARNER_ID, {"sbom": "a" * 64, "scan": "b" * 64}, "passed")
    return ImageFact("learnerkit/sidecar:0.1.0", SIDECAR_ID)


def completed_attempt() -> Attempt:
    """The attempts history of a job that ran once and completed."""
    return Attempt(1, ("node-1",), "2026-01-01T01:01:00Z").ended(AttemptEnd.COMPLETED, "", "2026-01-01T01:30:00Z")
