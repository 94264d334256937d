"""The FfDL manifest the scheduler benchmarks submit: one learner of the PyTorch CPU image, data and results in
the buckets below of the store ``s3`` names (its ``endpoint_url``, ``access_key``, ``secret_key``)."""

from __future__ import annotations

from typing import Protocol

DATA_BUCKET = "bench-data"
RESULTS_BUCKET = "bench-results"


class Store(Protocol):
    endpoint_url: str
    access_key: str
    secret_key: str


def manifest(s3: Store, command: str, cpus: float, memory: str = "128Mb") -> str:
    return f"""\
name: bench
cpus: {cpus:g}
memory: {memory}
learners: 1
data_stores:
  - id: s3
    type: s3_datastore
    training_data: {{container: {DATA_BUCKET}}}
    training_results: {{container: {RESULTS_BUCKET}}}
    connection: {{auth_url: "{s3.endpoint_url}", user_name: "{s3.access_key}", password: "{s3.secret_key}"}}
framework:
  name: pytorch
  version: "2.13"
  command: "{command}"
"""
