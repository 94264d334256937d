"""The sidecar's settings: a mounted config file (YAML or JSON) for the job, the environment for secrets.

Every value is read and checked once, at start; a bad one is a :class:`SidecarConfigError` that names the
variable or the file's field path. Secrets (etcd password, S3 keys) come only from the environment, so the
config file can be shown, logged and stored in etcd without them. The hosts write the document as a
:class:`controller_sidecar.configdoc.SidecarConfigDocument`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from controller_sidecar.endpoints import (
    ETCD_ENDPOINTS,
    ETCD_PASSWORD,
    ETCD_USERNAME,
    S3_ACCESS_KEY,
    S3_ENDPOINT_URL,
    S3_SECRET_KEY,
)
from controller_sidecar.errors import SidecarConfigError
from controller_sidecar.jobdirs import JOB_DIR, JobDirs
from controller_sidecar.keys import JOB_ID_PATTERN
from controller_sidecar.requirements import PackageIndex

CONFIG_ENV = "LEARNERKIT_SIDECAR_CONFIG"
CONFIG_JSON_ENV = "LEARNERKIT_SIDECAR_CONFIG_JSON"
"""The config document itself, for deployers that pass no files (it holds no secrets)."""
DEFAULT_CONFIG_PATH = Path("/etc/learnerkit/sidecar.yaml")
_BUCKET_PATTERN = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


@dataclass(frozen=True)
class EtcdSettings:
    endpoints: tuple[str, ...]
    """``host:port`` of each member; ``$ETCD_ENDPOINTS``, comma-separated (``http://`` prefixes allowed)."""
    username: str | None = None
    password: str | None = None
    lease_ttl_s: int = 10
    """The ``alive`` key's lease: a dead sidecar is seen this long after it died."""
    root: str = "/learnerkit/jobs"
    request_timeout_s: int = 5
    """Each etcd request (and the creation of a watch) fails as transient after this many seconds."""


@dataclass(frozen=True)
class S3Settings:
    endpoint_url: str | None = None
    """``$S3_ENDPOINT_URL``; None means AWS."""
    access_key: str | None = field(default=None, repr=False)
    secret_key: str | None = field(default=None, repr=False)
    region: str = "us-east-1"
    max_concurrency: int = 8
    """Parallel transfers (files at once, and parts of one large file)."""
    multipart_threshold_mb: int = 64
    """Files above this size are transferred in parts."""
    max_attempts: int = 8
    """Attempts per transfer before a transient error becomes the job's failure."""


@dataclass(frozen=True)
class S3Location:
    bucket: str
    prefix: str = ""
    """A key prefix without a leading slash; empty for the whole bucket. Folders end with ``/``."""

    def key(self, relative: str) -> str:
        return self.prefix + relative

    def __str__(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"


@dataclass(frozen=True)
class Locations:
    """Where the job's inputs come from and its outputs go."""

    results: S3Location
    """This learner's results, logs and checkpoints go under ``results/``, ``logs/`` and ``checkpoints/`` here."""
    data: S3Location | None = None
    """Training data to download; None with ``data_mode: mount`` (data already under ``DATA_DIR``)."""
    data_mode: Literal["copy", "mount"] = "copy"
    model: S3Location | None = None
    """The key of the model code archive (FfDL's ``model.zip``); None when the code is baked into the image."""
    resume_from: S3Location | None = None
    """A ``checkpoints/`` prefix to restore the latest checkpoint from before the learner starts."""
    trained_model: S3Location | None = None
    """An evaluation's input: a trained job's ``results/model/`` folder, downloaded (read only) into ``MODEL_DIR``
    in place of a model archive."""

    @property
    def result_files(self) -> S3Location:
        return S3Location(self.results.bucket, self.results.prefix + "results/")

    @property
    def log_files(self) -> S3Location:
        return S3Location(self.results.bucket, self.results.prefix + "logs/")

    @property
    def checkpoint_files(self) -> S3Location:
        return S3Location(self.results.bucket, self.results.prefix + "checkpoints/")


@dataclass(frozen=True)
class Timing:
    halt_grace_s: float = 30.0
    """After writing ``control/halt``, how long to wait for ``learner.exit``."""
    checkpoint_interval_s: float = 300.0
    """Checkpoints are uploaded this often while training: a crash loses at most one interval."""
    log_ship_interval_s: float = 5.0
    """The log is shipped to the store in chunks this often while the job runs."""
    metrics_ship_interval_s: float = 30.0
    """The metric history (``logs/metrics.jsonl``) is stored this often while it grows (``job metrics``)."""
    shutdown_deadline_s: float = 20.0
    """On SIGTERM, everything is flushed and the sidecar exits within this; keep it below the
    container's grace period (Docker's stop timeout, Kubernetes' terminationGracePeriodSeconds)."""
    poll_interval_s: float = 0.1
    """How often the control folder is checked for ``learner.exit`` when no file event arrives."""
    held_back_give_up_s: float = 120.0
    """A write of the outputs held back this long in a row by a lapsed lease is given up, and the sidecar exits
    ``LEASE_LAPSED_EXIT`` so that the scheduler requeues the job (:mod:`controller_sidecar.exits`): keep it well
    below the scheduler's bound on a lease not renewed (``lease_renewal_grace_s``, 300 s), which fails the job,
    and far above an etcd restart or a leader election (seconds)."""


@dataclass(frozen=True)
class Limits:
    max_archive_bytes: int = 2 << 30
    """A model archive that expands to more than this is refused."""
    max_archive_members: int = 100_000


@dataclass(frozen=True)
class SidecarSettings:
    job_id: str
    learner_id: int
    """1-based."""
    locations: Locations
    etcd: EtcdSettings
    s3: S3Settings
    num_learners: int = 1
    dirs: JobDirs = field(default_factory=JobDirs)
    timing: Timing = Timing()
    limits: Limits = Limits()
    evaluation_metrics: Mapping[str, Any] | None = None
    """The manifest's ``evaluation_metrics`` as given (FfDL form); parsed by ``evalmetrics``."""
    requirements: PackageIndex | None = None
    """Where pip finds the model's ``requirements.txt``; None: a requirements.txt is not installed."""
    metrics_port: int = 9102
    """Prometheus ``/metrics``; 0 turns the endpoint off."""
    learner_cgroup_dir: Path | None = None
    """The learner container's cgroup, mounted read-only (see ``learnercgroup``); None where the learner's
    processes are visible instead (a shared PID namespace) or not at all."""
    shares_learner_pid_namespace: bool = False
    """The sidecar sees the learner's processes in ``/proc`` (Kubernetes ``shareProcessNamespace``): where no
    cgroup is mounted, ``learner.exit`` then counts only once they are gone."""
    status_sequence_start: int = 1
    """The first status record's sequence number; the scheduler gives each attempt of a job its own range."""
    held_attempt: int | None = None
    """Deployed held (a preemptor's pair while its victims checkpoint): after its downloads the sidecar starts the
    learner only once the job's release key reads this attempt."""
    exit_when_done: bool = True
    """Exit after the terminal status is stored; False keeps serving metrics until SIGTERM (a Kubernetes
    native sidecar is restarted whenever it exits)."""


def load_settings(environ: Mapping[str, str], config_path: Path | None = None) -> SidecarSettings:
    """Read the config (``$LEARNERKIT_SIDECAR_CONFIG_JSON``, else the file ``$LEARNERKIT_SIDECAR_CONFIG``)
    and the environment into settings."""
    inline = environ.get(CONFIG_JSON_ENV) if config_path is None else None
    path = config_path or Path(environ.get(CONFIG_ENV) or DEFAULT_CONFIG_PATH)
    source = f"${CONFIG_JSON_ENV}" if inline else str(path)
    doc = _parse_config(inline, source) if inline else _read_config(path)
    reader = _Reader(doc, source, environ)
    job_id = reader.text("job_id", env="JOB_ID")
    if not JOB_ID_PATTERN.match(job_id):
        raise SidecarConfigError(f"{source}: job_id {job_id!r} must match {JOB_ID_PATTERN.pattern}")
    learner_id = reader.integer("learner_id", env="LEARNER_ID", minimum=1)
    num_learners = reader.integer("num_learners", env="NUM_LEARNERS", minimum=1, default=1)
    if learner_id > num_learners:
        raise SidecarConfigError(f"{source}: learner_id {learner_id} is above num_learners {num_learners}")
    return SidecarSettings(
        job_id=job_id,
        learner_id=learner_id,
        num_learners=num_learners,
        locations=_locations(reader),
        etcd=EtcdSettings(
            endpoints=_endpoints(environ.get(ETCD_ENDPOINTS) or reader.optional_text("etcd.endpoints") or ""),
            username=environ.get(ETCD_USERNAME) or None,
            password=environ.get(ETCD_PASSWORD) or None,
            lease_ttl_s=reader.integer("etcd.lease_ttl_s", minimum=2, default=10),
            root=reader.optional_text("etcd.root") or EtcdSettings.root,
        ),
        s3=S3Settings(
            endpoint_url=environ.get(S3_ENDPOINT_URL) or reader.optional_text("s3.endpoint_url"),
            access_key=environ.get(S3_ACCESS_KEY) or None,
            secret_key=environ.get(S3_SECRET_KEY) or None,
            region=environ.get("AWS_DEFAULT_REGION") or reader.optional_text("s3.region") or S3Settings.region,
            max_concurrency=reader.integer("s3.max_concurrency", minimum=1, default=S3Settings.max_concurrency),
            multipart_threshold_mb=reader.integer(
                "s3.multipart_threshold_mb", minimum=5, default=S3Settings.multipart_threshold_mb
            ),
            max_attempts=reader.integer("s3.max_attempts", minimum=1, default=S3Settings.max_attempts),
        ),
        # Resolved: the sidecar opens files below it from / without following links (jobfiles).
        dirs=JobDirs(Path(reader.optional_text("job_dir") or JOB_DIR).resolve()),
        timing=Timing(
            halt_grace_s=reader.seconds("timing.halt_grace_s", Timing.halt_grace_s),
            checkpoint_interval_s=reader.seconds("timing.checkpoint_interval_s", Timing.checkpoint_interval_s),
            log_ship_interval_s=reader.seconds("timing.log_ship_interval_s", Timing.log_ship_interval_s),
            metrics_ship_interval_s=reader.seconds("timing.metrics_ship_interval_s", Timing.metrics_ship_interval_s),
            shutdown_deadline_s=reader.seconds("timing.shutdown_deadline_s", Timing.shutdown_deadline_s),
            poll_interval_s=reader.seconds("timing.poll_interval_s", Timing.poll_interval_s),
            held_back_give_up_s=reader.seconds("timing.held_back_give_up_s", Timing.held_back_give_up_s),
        ),
        limits=Limits(
            max_archive_bytes=reader.integer("limits.max_archive_bytes", minimum=1, default=Limits.max_archive_bytes),
            max_archive_members=reader.integer(
                "limits.max_archive_members", minimum=1, default=Limits.max_archive_members
            ),
        ),
        evaluation_metrics=reader.optional_mapping("evaluation_metrics"),
        requirements=_package_index(reader),
        metrics_port=reader.integer("metrics_port", minimum=0, default=9102),
        learner_cgroup_dir=_optional_path(reader.optional_text("learner_cgroup_dir")),
        shares_learner_pid_namespace=reader.boolean("shares_learner_pid_namespace", default=False),
        status_sequence_start=reader.integer("status_sequence_start", minimum=1, default=1),
        held_attempt=reader.integer("held.attempt", minimum=1, default=0) or None,
        exit_when_done=reader.boolean("exit_when_done", default=True),
    )


def _package_index(reader: _Reader) -> PackageIndex | None:
    raw = reader.optional_mapping("requirements")
    return None if raw is None else PackageIndex.from_config(raw)


def _optional_path(text: str | None) -> Path | None:
    return Path(text) if text else None


def _read_config(path: Path) -> Mapping[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise SidecarConfigError(f"cannot read the sidecar config {path} (set ${CONFIG_ENV}): {e.strerror}") from e
    return _parse_config(text, str(path))


def _parse_config(text: str, source: str) -> Mapping[str, Any]:
    """YAML (a superset of JSON) into a mapping."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise SidecarConfigError(f"{source}: not valid YAML or JSON: {e}") from e
    if not isinstance(doc, Mapping):
        raise SidecarConfigError(f"{source}: expected a mapping at the top level")
    return doc


def _locations(reader: _Reader) -> Locations:
    mode = reader.optional_text("data.mode") or "copy"
    if mode not in ("copy", "mount"):
        raise SidecarConfigError(f"{reader.source}: data.mode must be 'copy' or 'mount', got {mode!r}")
    data = reader.location("data") if mode == "copy" else None
    if mode == "copy" and data is None:
        raise SidecarConfigError(f"{reader.source}: data.bucket is required with data.mode 'copy'")
    results = reader.location("results")
    if results is None:
        raise SidecarConfigError(f"{reader.source}: results.bucket is required")
    model = reader.location("model", key_field="key")
    trained_model = _folder_location(reader.location("trained_model"))
    if model is not None and trained_model is not None:
        raise SidecarConfigError(f"{reader.source}: model and trained_model both fill the model folder; give one")
    return Locations(
        results=S3Location(results.bucket, _folder(results.prefix)),
        data=S3Location(data.bucket, _folder(data.prefix)) if data else None,
        data_mode="copy" if mode == "copy" else "mount",
        model=model,
        resume_from=_folder_location(reader.location("resume_from")),
        trained_model=trained_model,
    )


def _folder(prefix: str) -> str:
    return prefix if not prefix or prefix.endswith("/") else prefix + "/"


def _folder_location(location: S3Location | None) -> S3Location | None:
    return None if location is None else S3Location(location.bucket, _folder(location.prefix))


def _endpoints(raw: str) -> tuple[str, ...]:
    endpoints = tuple(part.strip().removeprefix("http://") for part in raw.split(",") if part.strip())
    if not endpoints:
        raise SidecarConfigError("ETCD_ENDPOINTS is not set (comma-separated host:port of the etcd members)")
    for endpoint in endpoints:
        host, _, port = endpoint.rpartition(":")
        if not host or not port.isdigit():
            raise SidecarConfigError(f"ETCD_ENDPOINTS: {endpoint!r} is not host:port")
    return endpoints


class _Reader:
    """Typed access to dotted field paths of the config file, with the environment taking precedence."""

    def __init__(self, doc: Mapping[str, Any], source: str, environ: Mapping[str, str]) -> None:
        self.doc = doc
        self.source = source
        self.environ = environ

    def _get(self, dotted: str) -> Any:
        node: Any = self.doc
        walked: list[str] = []
        for part in dotted.split("."):
            if node is None:
                return None
            if not isinstance(node, Mapping):
                raise SidecarConfigError(f"{self.source}: {'.'.join(walked)} must be a mapping")
            node = node.get(part)
            walked.append(part)
        return node

    def optional_text(self, dotted: str) -> str | None:
        value = self._get(dotted)
        if value is None:
            return None
        if not isinstance(value, str):
            raise SidecarConfigError(f"{self.source}: {dotted} must be a string, got {value!r}")
        return value

    def text(self, dotted: str, *, env: str) -> str:
        value = self.environ.get(env) or self.optional_text(dotted)
        if not value:
            raise SidecarConfigError(f"{self.source}: {dotted} is required (or set ${env})")
        return value

    def integer(self, dotted: str, *, minimum: int, env: str | None = None, default: int | None = None) -> int:
        raw: Any = self.environ.get(env) if env and self.environ.get(env) else self._get(dotted)
        name = f"${env}" if env and self.environ.get(env) else f"{self.source}: {dotted}"
        if raw is None:
            if default is None:
                raise SidecarConfigError(f"{self.source}: {dotted} is required" + (f" (or set ${env})" if env else ""))
            return default
        try:
            value = int(raw) if not isinstance(raw, bool) else None
        except (TypeError, ValueError):
            value = None
        if value is None or value < minimum:
            raise SidecarConfigError(f"{name} must be an integer >= {minimum}, got {raw!r}")
        return value

    def seconds(self, dotted: str, default: float) -> float:
        raw = self._get(dotted)
        if raw is None:
            return default
        value = float(raw) if isinstance(raw, int | float) and not isinstance(raw, bool) else math.nan
        if not math.isfinite(value) or value <= 0:
            raise SidecarConfigError(f"{self.source}: {dotted} must be a positive number of seconds, got {raw!r}")
        return value

    def boolean(self, dotted: str, *, default: bool) -> bool:
        value = self._get(dotted)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise SidecarConfigError(f"{self.source}: {dotted} must be true or false, got {value!r}")
        return value

    def optional_mapping(self, dotted: str) -> Mapping[str, Any] | None:
        value = self._get(dotted)
        if value is not None and not isinstance(value, Mapping):
            raise SidecarConfigError(f"{self.source}: {dotted} must be a mapping")
        return value

    def location(self, dotted: str, *, key_field: str = "prefix") -> S3Location | None:
        if self.optional_mapping(dotted) is None:
            return None
        bucket = self.optional_text(f"{dotted}.bucket")
        if not bucket or not _BUCKET_PATTERN.match(bucket):
            raise SidecarConfigError(f"{self.source}: {dotted}.bucket must be an S3 bucket name, got {bucket!r}")
        prefix = (self.optional_text(f"{dotted}.{key_field}") or "").lstrip("/")
        if key_field == "key" and not prefix:
            raise SidecarConfigError(f"{self.source}: {dotted}.key is required")
        if ".." in prefix.split("/"):
            raise SidecarConfigError(f"{self.source}: {dotted}.{key_field} must not contain '..'")
        return S3Location(bucket, prefix)
