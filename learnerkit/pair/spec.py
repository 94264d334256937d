"""What one learner pair is made of: images, command, where the sidecar finds etcd and S3, limits."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from learnerkit.common.errors import ConfigError

S3_URL = re.compile(r"^s3://(?P<bucket>[a-z0-9][a-z0-9.-]{1,61}[a-z0-9])(?:/(?P<key>.*))?$")


@dataclass(frozen=True)
class Endpoints:
    """Where the sidecar reaches etcd and the object store, and with which credentials."""

    etcd: str
    """Comma-separated ``host:port`` of the etcd members."""
    s3_endpoint_url: str | None = None
    s3_access_key: str | None = field(default=None, repr=False)
    s3_secret_key: str | None = field(default=None, repr=False)
    etcd_username: str | None = None
    etcd_password: str | None = field(default=None, repr=False)

    def sidecar_env(self) -> dict[str, str]:
        """The sidecar's environment: secrets travel here, never in the config document."""
        env = {
            "ETCD_ENDPOINTS": self.etcd,
            "S3_ENDPOINT_URL": self.s3_endpoint_url,
            "AWS_ACCESS_KEY_ID": self.s3_access_key,
            "AWS_SECRET_ACCESS_KEY": self.s3_secret_key,
            "ETCD_USERNAME": self.etcd_username,
            "ETCD_PASSWORD": self.etcd_password,
        }
        return {name: value for name, value in env.items() if value}


@dataclass(frozen=True)
class PairSpec:
    job_id: str
    learner_id: int
    learner_image: str
    sidecar_image: str
    command: tuple[str, ...] | str
    """An argv, or one shell string (an FfDL manifest's ``command``) run by ``bash -c``."""
    sidecar_config: Mapping[str, Any]
    """The sidecar's config document (locations, timing, evaluation metrics); no secrets."""
    endpoints: Endpoints
    num_learners: int = 1
    learner_env: Mapping[str, str] = field(default_factory=dict)
    """Extra variables for the learner (distributed training: MASTER_ADDR, RANK...)."""
    network: str | None = None
    """The learners' network; None gives the learner no network at all (single-learner jobs)."""
    hostname: str | None = None
    network_aliases: tuple[str, ...] = ()
    """Further names the learner answers to on ``network`` (the rendezvous names of distributed jobs)."""
    memory_bytes: int | None = None
    nano_cpus: int | None = None
    gpus: int = 0
    halt_grace_s: float = 30.0
    shutdown_deadline_s: float = 20.0
    labels: Mapping[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """The stem of every object of this pair: ``lk-<job>-<learner>``."""
        return f"lk-{self.job_id}-{self.learner_id}"


def parse_s3_url(text: str, what: str) -> tuple[str, str]:
    """``s3://bucket/key/prefix`` into (bucket, key); the error names the option."""
    match = S3_URL.match(text)
    if not match:
        raise ConfigError(f"{what}: {text!r} is not an s3://BUCKET/PREFIX URL")
    return match["bucket"], match["key"] or ""
