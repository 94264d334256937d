"""The scheduler's settings, grouped by what they configure; `SchedulerSettings.from_env` reads them.

Each field names its environment variable. Where the sidecar reads the same thing (etcd, S3) the variable is the
same one, so one environment serves both. Secrets come only from the environment, never from the command line,
and are left out of ``repr()``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import Any, TypeVar

from learnerkit.common.passphrase import key_passphrase
from learnerkit.pair.jobdisk import JobDiskError, JobDiskSettings
from learnerkit.pair.spec import MIN_PIDS_LIMIT, PidsLimits
from learnerkit.scheduler.backends.deployment import DEFAULT_SHARED_SIZE
from learnerkit.scheduler.config.policy import (
    DEFAULT_MAX_LEARNERS,
    DEFAULT_MAX_MANIFEST_BYTES,
    DEFAULT_MAX_MODEL_BYTES,
    origin,
)
from learnerkit.scheduler.errors import SettingsError
from learnerkit.scheduler.manifest.model import FFDL_DEFAULTS, ResourceDefaults
from learnerkit.scheduler.manifest.units import parse_size
from learnerkit.scheduler.preemption.rules import DEFAULT_MAX_PREEMPTIONS, DEFAULT_MIN_RUN_S

DEFAULT_TOKENS = Path("/etc/learnerkit/tokens.json")
DEFAULT_HEAD_TIMEOUT_S = 30.0
DEFAULT_MAX_CONNECTIONS = 512
"""In all; keep it under the process's open-file limit (often 1024), which etcd, S3 and the engine share."""
DEFAULT_MAX_CONNECTIONS_PER_ADDRESS = 64
"""One CLI command holds one connection; an office behind one NAT rarely runs 64 at once."""
BODY_GRACE_S = 5.0
"""The HTTP protocol cuts a stalled body this long after the submit's own timeouts, which answer first and abort
the model's upload."""
DEFAULT_SIGNING_KEY = Path("/etc/learnerkit/signing-key.pem")
SIGNING_KEY_SETTING = "LEARNERKIT_SIGNING_KEY"
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
T = TypeVar("T", int, float)


class BackendKind(StrEnum):
    DOCKER = "docker"
    KUBERNETES = "kubernetes"


@dataclass(frozen=True)
class ApiSettings:
    host: str = "127.0.0.1"
    """``$LEARNERKIT_SCHEDULER_HOST``; loopback unless the API is meant to be reached from elsewhere."""
    port: int = 8080
    """``$LEARNERKIT_SCHEDULER_PORT``."""
    tokens: Path = DEFAULT_TOKENS
    """``$LEARNERKIT_SCHEDULER_TOKENS``: the tokens file (`learnerkit scheduler token add`)."""
    head_timeout_s: float = DEFAULT_HEAD_TIMEOUT_S
    """``$LEARNERKIT_API_HEAD_TIMEOUT_S``: a request's line and headers must arrive within this (408 past it)."""
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    """``$LEARNERKIT_API_MAX_CONNECTIONS``: connections open at once, in all (503 past it)."""
    max_connections_per_address: int = DEFAULT_MAX_CONNECTIONS_PER_ADDRESS
    """``$LEARNERKIT_API_MAX_CONNECTIONS_PER_ADDRESS``: connections open at once from one client address (429)."""
    tls_cert: Path | None = None
    """``$LEARNERKIT_SCHEDULER_TLS_CERT``: the server's certificate (PEM, its chain after it); with `tls_key` the
    API is served over HTTPS only (`learnerkit scheduler cert create` makes both). None: plain HTTP."""
    tls_key: Path | None = None
    """``$LEARNERKIT_SCHEDULER_TLS_KEY``: its private key (PEM, unencrypted)."""

    def tls(self) -> tuple[Path, Path] | None:
        """The certificate and key, or None for plain HTTP; `SettingsError` when only one is given."""
        if self.tls_cert is None and self.tls_key is None:
            return None
        if self.tls_cert is None or self.tls_key is None:
            raise SettingsError(
                "LEARNERKIT_SCHEDULER_TLS_CERT and LEARNERKIT_SCHEDULER_TLS_KEY (--tls-cert, --tls-key): give both"
            )
        return self.tls_cert, self.tls_key


@dataclass(frozen=True)
class EtcdSettings:
    endpoints: tuple[str, ...] = ("127.0.0.1:2379",)
    """``$ETCD_ENDPOINTS``, comma-separated ``host:port``."""
    username: str | None = None
    """``$ETCD_USERNAME``."""
    password: str | None = field(default=None, repr=False)
    """``$ETCD_PASSWORD``."""
    root: str = "/learnerkit/jobs"
    """``$LEARNERKIT_ETCD_ROOT``: the prefix of every job's keys."""


@dataclass(frozen=True)
class S3Settings:
    endpoint_url: str | None = None
    """``$S3_ENDPOINT_URL``; None means AWS."""
    bucket: str = "learnerkit"
    """``$LEARNERKIT_S3_BUCKET``: where jobs' logs, checkpoints and results go unless a manifest says otherwise."""
    access_key: str | None = field(default=None, repr=False)
    """``$AWS_ACCESS_KEY_ID``."""
    secret_key: str | None = field(default=None, repr=False)
    """``$AWS_SECRET_ACCESS_KEY``."""
    region: str = "us-east-1"
    """``$AWS_DEFAULT_REGION``."""
    abandoned_upload_grace_s: float = 3600.0
    """``$LEARNERKIT_ABANDONED_UPLOAD_GRACE_S``: at its start the scheduler aborts the multipart uploads left open
    under ended jobs' prefixes for longer than this."""


@dataclass(frozen=True)
class BackendSettings:
    kind: BackendKind = BackendKind.DOCKER
    """``$LEARNERKIT_SCHEDULER_BACKEND``: where learners run."""
    namespace: str = "learnerkit"
    """``$LEARNERKIT_K8S_NAMESPACE``: the Kubernetes backend's namespace."""
    sidecar_image: str | None = None
    """``$LEARNERKIT_SIDECAR_IMAGE``; None means the sidecar image this project builds."""
    registry: str | None = None
    """``$LEARNERKIT_REGISTRY``: where learner images come from (None: the engine's local images)."""
    egress: tuple[str, ...] = ()
    """``$LEARNERKIT_K8S_EGRESS``: ``CIDR:port`` of etcd and S3, comma-separated, for the jobs' NetworkPolicy."""
    shared_storage_class: str | None = None
    """``$LEARNERKIT_K8S_SHARED_STORAGE_CLASS``: the StorageClass (it must offer ReadWriteMany, e.g. NFS or CephFS)
    of the claim a multi-learner job's learners share at ``/job/shared``; None: the cluster's default class."""
    shared_size: str = DEFAULT_SHARED_SIZE
    """``$LEARNERKIT_K8S_SHARED_SIZE``: the size that claim asks for."""
    job_disk: JobDiskSettings = field(default_factory=JobDiskSettings)
    """``$LEARNERKIT_JOB_DISK_DIR`` and ``$LEARNERKIT_JOB_DISK_UNBOUNDED``: how the Docker backend bounds ``/job`` to
    the manifest's ``storage`` (:mod:`learnerkit.pair.jobdisk`)."""


@dataclass(frozen=True)
class LimitSettings:
    """What one tenant's requests may cost the scheduler (docs/security.md)."""

    max_manifest_bytes: int = DEFAULT_MAX_MANIFEST_BYTES
    """``$LEARNERKIT_MAX_MANIFEST_BYTES``: a larger manifest is refused (413) before it is read."""
    parse_budget_s: float = 5.0
    """``$LEARNERKIT_MANIFEST_PARSE_BUDGET_S``: reading one manifest (off the event loop) may take this long."""
    max_learners: int = DEFAULT_MAX_LEARNERS
    """``$LEARNERKIT_MAX_LEARNERS``: learners per job."""
    submits_per_minute: int = 30
    """``$LEARNERKIT_SUBMITS_PER_MINUTE``: per tenant, in bursts of as many; more get 429 with Retry-After."""
    tenants: Path | None = None
    """``$LEARNERKIT_TENANTS``: per-tenant quotas and priority ranges (`learnerkit.scheduler.config.tenants`)."""
    defaults: ResourceDefaults = FFDL_DEFAULTS
    """``$LEARNERKIT_DEFAULT_CPUS``, ``$LEARNERKIT_DEFAULT_MEMORY`` and ``$LEARNERKIT_DEFAULT_STORAGE`` (sizes,
    ``12GiB``): what a manifest without ``cpus``, ``memory`` or ``storage`` gets; FfDL's 5 CPUs and 12 GiB, and
    no storage bound, when unset. ``$LEARNERKIT_RESULTS_BUCKET``: the default
    results store of a manifest without ``training_results`` (none when unset). `job validate` reads the same
    variables."""
    max_model_bytes: int = DEFAULT_MAX_MODEL_BYTES
    """``$LEARNERKIT_MAX_MODEL_BYTES``: a larger model upload is refused (413) as soon as it is known to be."""
    upload_idle_s: float = 60.0
    """``$LEARNERKIT_UPLOAD_IDLE_S``: a submit's body that sends nothing for this long is refused (408), and the
    model's multipart upload aborted; any other request's body is cut 5 s later (`BODY_GRACE_S`)."""
    upload_total_s: float = 3600.0
    """``$LEARNERKIT_UPLOAD_TOTAL_S``: a submit's body may take this long in all (408 past it); any other request's
    body likewise, 5 s later."""
    preemption_min_run_s: float = DEFAULT_MIN_RUN_S
    """``$LEARNERKIT_PREEMPTION_MIN_RUN_S``: a job that has run for less (this attempt) is never preempted."""
    preemption_max_per_job: int = DEFAULT_MAX_PREEMPTIONS
    """``$LEARNERKIT_PREEMPTION_MAX_PER_JOB``: a job preempted this many times is not preempted again until it
    ends."""
    node_lost_grace_s: float = 60.0
    """``$LEARNERKIT_NODE_LOST_GRACE_S``: a node not Ready for this long has its jobs resumed elsewhere."""
    loop_stall_s: float = 60.0
    """``$LEARNERKIT_LOOP_STALL_S``: ``/healthz`` answers 503 once the control loop has completed no step for this
    long."""
    pids: PidsLimits = field(default_factory=PidsLimits)
    """``$LEARNERKIT_LEARNER_PIDS_LIMIT`` (4096) and ``$LEARNERKIT_SIDECAR_PIDS_LIMIT`` (512): the processes and
    threads each learner and each sidecar may hold on the Docker backend (a fork past it fails); on Kubernetes the
    kubelet's ``podPidsLimit`` caps each pod instead."""


@dataclass(frozen=True)
class TrustSettings:
    """What jobs may reach and run, and which of the engine's objects this scheduler owns (docs/security.md)."""

    object_stores: tuple[str, ...] = ()
    """``$LEARNERKIT_OBJECT_STORES``: http(s) endpoints a data store's ``auth_url`` may name, comma-separated,
    beside ``$S3_ENDPOINT_URL``; anything else is refused at submit."""
    host_paths: tuple[str, ...] = ()
    """``$LEARNERKIT_HOST_PATHS``: host folders that ``mount_volume`` stores may mount (read-only); none: refused."""
    images: tuple[str, ...] = ()
    """``$LEARNERKIT_IMAGE_ALLOWLIST``: image patterns (fnmatch) that run without passing the scan gate."""
    project_images: bool = False
    """``$LEARNERKIT_TRUST_PROJECT_IMAGES`` (``1``): this project's own framework images run without the gate;
    for development setups (``learnerkit dev up --with-scheduler``, ``make demo``)."""
    instance: str | None = None
    """``$LEARNERKIT_SCHEDULER_INSTANCE``: this scheduler's id on the engine; None: derived and kept in etcd."""

    def allowed_stores(self, s3: S3Settings) -> tuple[str, ...]:
        """The object store origins jobs may use: the listed ones and the scheduler's own S3 endpoint."""
        urls = (*self.object_stores, *((s3.endpoint_url,) if s3.endpoint_url else ()))
        return tuple(dict.fromkeys(str(origin(url)) for url in urls))


@dataclass(frozen=True)
class PackageSettings:
    """Where sidecars resolve a model's ``requirements.txt`` (docs/model-code.md). The learners stay offline."""

    index_url: str | None = None
    """``$LEARNERKIT_PIP_INDEX_URL``: the package index (PEP 503) sidecars install from; None: pip's default."""
    extra_index_urls: tuple[str, ...] = ()
    """``$LEARNERKIT_PIP_EXTRA_INDEX_URLS``: more indexes, comma-separated."""
    trusted_hosts: tuple[str, ...] = ()
    """``$LEARNERKIT_PIP_TRUSTED_HOSTS``: hosts pip may reach over plain http or unverified TLS, comma-separated."""
    find_links: tuple[str, ...] = ()
    """``$LEARNERKIT_PIP_FIND_LINKS``: URLs or folders of this host of wheels, comma-separated."""
    ca_bundle: Path | None = None
    """``$LEARNERKIT_PIP_CA_BUNDLE``: the CA bundle (PEM) pip trusts. Each of these settings left unset, the host's
    pip configuration gives it, as builds do (``learnerkit.scheduler.config.packageindex``)."""


@dataclass(frozen=True)
class SigningSettings:
    """The platform's key: it signs every job's provenance and model signature (docs/provenance.md)."""

    key: Path = DEFAULT_SIGNING_KEY
    """``$LEARNERKIT_SIGNING_KEY``: an ECDSA P-256 private key (PEM, encrypted or not); `learnerkit scheduler key
    create` makes one. The scheduler does not start without it."""
    passphrase: bytes | None = field(default=None, repr=False)
    """What decrypts it: ``$LEARNERKIT_SIGNING_KEY_PASSPHRASE`` or the file ``$..._PASSPHRASE_FILE`` names."""
    source: str = "LEARNERKIT_SIGNING_KEY"
    """What gave `key` (``--signing-key`` of `scheduler serve`, else the variable): a key error names it."""


@dataclass(frozen=True)
class SchedulerSettings:
    api: ApiSettings = field(default_factory=ApiSettings)
    etcd: EtcdSettings = field(default_factory=EtcdSettings)
    s3: S3Settings = field(default_factory=S3Settings)
    backend: BackendSettings = field(default_factory=BackendSettings)
    limits: LimitSettings = field(default_factory=LimitSettings)
    trust: TrustSettings = field(default_factory=TrustSettings)
    packages: PackageSettings = field(default_factory=PackageSettings)
    signing: SigningSettings = field(default_factory=SigningSettings)
    catalog_registry: str | None = None
    """The model catalog's OCI registry, ``host:port`` (``LEARNERKIT_CATALOG_REGISTRY``; docs/catalog.md)."""

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> SchedulerSettings:
        """Settings from the environment, defaults where a variable is unset or empty."""
        env = {k: v for k, v in environ.items() if v}
        api, etcd, s3, backend, limits = ApiSettings(), EtcdSettings(), S3Settings(), BackendSettings(), LimitSettings()
        return cls(
            api=ApiSettings(
                host=env.get("LEARNERKIT_SCHEDULER_HOST", api.host),
                port=_port(env.get("LEARNERKIT_SCHEDULER_PORT"), api.port),
                tokens=Path(env.get("LEARNERKIT_SCHEDULER_TOKENS", str(api.tokens))),
                head_timeout_s=_positive(env, "LEARNERKIT_API_HEAD_TIMEOUT_S", api.head_timeout_s, float),
                max_connections=_positive(env, "LEARNERKIT_API_MAX_CONNECTIONS", api.max_connections, int),
                max_connections_per_address=_positive(
                    env, "LEARNERKIT_API_MAX_CONNECTIONS_PER_ADDRESS", api.max_connections_per_address, int
                ),
                tls_cert=Path(env["LEARNERKIT_SCHEDULER_TLS_CERT"]) if "LEARNERKIT_SCHEDULER_TLS_CERT" in env else None,
                tls_key=Path(env["LEARNERKIT_SCHEDULER_TLS_KEY"]) if "LEARNERKIT_SCHEDULER_TLS_KEY" in env else None,
            ),
            etcd=EtcdSettings(
                endpoints=parse_endpoints(env["ETCD_ENDPOINTS"]) if "ETCD_ENDPOINTS" in env else etcd.endpoints,
                username=env.get("ETCD_USERNAME"),
                password=env.get("ETCD_PASSWORD"),
                root=env.get("LEARNERKIT_ETCD_ROOT", etcd.root),
            ),
            s3=S3Settings(
                endpoint_url=env.get("S3_ENDPOINT_URL"),
                bucket=env.get("LEARNERKIT_S3_BUCKET", s3.bucket),
                access_key=env.get("AWS_ACCESS_KEY_ID"),
                secret_key=env.get("AWS_SECRET_ACCESS_KEY"),
                region=env.get("AWS_DEFAULT_REGION", s3.region),
                abandoned_upload_grace_s=_positive(
                    env, "LEARNERKIT_ABANDONED_UPLOAD_GRACE_S", s3.abandoned_upload_grace_s, float
                ),
            ),
            backend=BackendSettings(
                kind=_backend(env.get("LEARNERKIT_SCHEDULER_BACKEND", backend.kind.value)),
                namespace=env.get("LEARNERKIT_K8S_NAMESPACE", backend.namespace),
                sidecar_image=env.get("LEARNERKIT_SIDECAR_IMAGE"),
                registry=env.get("LEARNERKIT_REGISTRY"),
                egress=_list(env, "LEARNERKIT_K8S_EGRESS"),
                shared_storage_class=env.get("LEARNERKIT_K8S_SHARED_STORAGE_CLASS"),
                shared_size=env.get("LEARNERKIT_K8S_SHARED_SIZE", backend.shared_size),
                job_disk=_job_disk(env),
            ),
            limits=LimitSettings(
                max_manifest_bytes=_positive(env, "LEARNERKIT_MAX_MANIFEST_BYTES", limits.max_manifest_bytes, int),
                parse_budget_s=_positive(env, "LEARNERKIT_MANIFEST_PARSE_BUDGET_S", limits.parse_budget_s, float),
                max_learners=_positive(env, "LEARNERKIT_MAX_LEARNERS", limits.max_learners, int),
                submits_per_minute=_positive(env, "LEARNERKIT_SUBMITS_PER_MINUTE", limits.submits_per_minute, int),
                tenants=Path(env["LEARNERKIT_TENANTS"]) if "LEARNERKIT_TENANTS" in env else None,
                defaults=resource_defaults(env),
                max_model_bytes=_positive(env, "LEARNERKIT_MAX_MODEL_BYTES", limits.max_model_bytes, int),
                upload_idle_s=_positive(env, "LEARNERKIT_UPLOAD_IDLE_S", limits.upload_idle_s, float),
                upload_total_s=_positive(env, "LEARNERKIT_UPLOAD_TOTAL_S", limits.upload_total_s, float),
                preemption_min_run_s=_positive(
                    env, "LEARNERKIT_PREEMPTION_MIN_RUN_S", limits.preemption_min_run_s, float
                ),
                preemption_max_per_job=_positive(
                    env, "LEARNERKIT_PREEMPTION_MAX_PER_JOB", limits.preemption_max_per_job, int
                ),
                node_lost_grace_s=_positive(env, "LEARNERKIT_NODE_LOST_GRACE_S", limits.node_lost_grace_s, float),
                loop_stall_s=_positive(env, "LEARNERKIT_LOOP_STALL_S", limits.loop_stall_s, float),
                pids=pids_limits(env),
            ),
            trust=TrustSettings(
                object_stores=_urls(env, "LEARNERKIT_OBJECT_STORES"),
                host_paths=_folders(env, "LEARNERKIT_HOST_PATHS"),
                images=_list(env, "LEARNERKIT_IMAGE_ALLOWLIST"),
                project_images=env.get("LEARNERKIT_TRUST_PROJECT_IMAGES") == "1",
                instance=env.get("LEARNERKIT_SCHEDULER_INSTANCE"),
            ),
            packages=PackageSettings(
                index_url=(_urls(env, "LEARNERKIT_PIP_INDEX_URL") or (None,))[0],
                extra_index_urls=_urls(env, "LEARNERKIT_PIP_EXTRA_INDEX_URLS"),
                trusted_hosts=_list(env, "LEARNERKIT_PIP_TRUSTED_HOSTS"),
                find_links=_list(env, "LEARNERKIT_PIP_FIND_LINKS"),
                ca_bundle=Path(env["LEARNERKIT_PIP_CA_BUNDLE"]) if "LEARNERKIT_PIP_CA_BUNDLE" in env else None,
            ),
            signing=SigningSettings(
                key=Path(env.get(SIGNING_KEY_SETTING, str(DEFAULT_SIGNING_KEY))), passphrase=key_passphrase(env)
            ),
            catalog_registry=env.get("LEARNERKIT_CATALOG_REGISTRY"),
        )

    def with_overrides(self, **groups: Mapping[str, Any]) -> SchedulerSettings:
        """A copy with the given fields replaced per group, skipping None: ``api={"port": 9000}``."""
        changed = {
            name: replace(getattr(self, name), **{k: v for k, v in values.items() if v is not None})
            for name, values in groups.items()
        }
        return replace(self, **changed)


def _job_disk(env: Mapping[str, str]) -> JobDiskSettings:
    try:
        return JobDiskSettings.from_env(env)
    except JobDiskError as e:
        raise SettingsError(str(e)) from e


def resource_defaults(environ: Mapping[str, str]) -> ResourceDefaults:
    """``$LEARNERKIT_DEFAULT_CPUS`` and ``$LEARNERKIT_DEFAULT_MEMORY``, FfDL's defaults where unset or empty,
    ``$LEARNERKIT_DEFAULT_STORAGE`` (unset: a manifest without ``storage`` gets an unbounded ``/job``) and
    ``$LEARNERKIT_RESULTS_BUCKET`` (the default results store; unset: none): `serve` and `job validate` alike."""
    env = {k: v for k, v in environ.items() if v}
    bucket = env.get("LEARNERKIT_RESULTS_BUCKET")
    if bucket is not None and not _BUCKET.fullmatch(bucket):
        raise SettingsError(f"LEARNERKIT_RESULTS_BUCKET={bucket!r}: expected an S3 bucket name (a-z, 0-9, '.', '-')")
    cpus = _positive(env, "LEARNERKIT_DEFAULT_CPUS", FFDL_DEFAULTS.cpus, float)
    raw = env.get("LEARNERKIT_DEFAULT_MEMORY")
    try:
        memory = FFDL_DEFAULTS.memory_bytes if raw is None else parse_size(raw)
    except ValueError as e:
        raise SettingsError(f"LEARNERKIT_DEFAULT_MEMORY: {e}") from e
    raw = env.get("LEARNERKIT_DEFAULT_STORAGE")
    try:
        storage = None if raw is None else parse_size(raw)
    except ValueError as e:
        raise SettingsError(f"LEARNERKIT_DEFAULT_STORAGE: {e}") from e
    return ResourceDefaults(cpus=cpus, memory_bytes=memory, storage_bytes=storage, results_bucket=bucket)


def pids_limits(env: Mapping[str, str]) -> PidsLimits:
    """``$LEARNERKIT_LEARNER_PIDS_LIMIT`` and ``$LEARNERKIT_SIDECAR_PIDS_LIMIT``; the error names the variable."""
    default = PidsLimits()
    limits = {}
    for role, name in (("learner", "LEARNERKIT_LEARNER_PIDS_LIMIT"), ("sidecar", "LEARNERKIT_SIDECAR_PIDS_LIMIT")):
        limits[role] = _positive(env, name, getattr(default, role), int)
        if limits[role] < MIN_PIDS_LIMIT:
            raise SettingsError(f"{name}={env[name]!r}: expected at least {MIN_PIDS_LIMIT}")
    return PidsLimits(**limits)


def parse_endpoints(raw: str) -> tuple[str, ...]:
    """``host:port`` of each etcd member from a comma-separated list (``http://`` prefixes allowed)."""
    endpoints = tuple(part.strip().removeprefix("http://") for part in raw.split(",") if part.strip())
    if not endpoints:
        raise SettingsError("etcd endpoints: give at least one host:port")
    for endpoint in endpoints:
        host, _, port = endpoint.rpartition(":")
        if not host or not port.isdigit():
            raise SettingsError(f"etcd endpoints: {endpoint!r} is not host:port")
    return endpoints


def _list(env: Mapping[str, str], name: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in env.get(name, "").split(",") if part.strip())


def _urls(env: Mapping[str, str], name: str) -> tuple[str, ...]:
    urls = _list(env, name)
    for url in urls:
        if origin(url) is None:
            raise SettingsError(f"{name}: {url!r} is not an http(s) URL such as http://s3.internal:8333")
    return urls


def _folders(env: Mapping[str, str], name: str) -> tuple[str, ...]:
    folders = _list(env, name)
    for folder in folders:
        if not folder.startswith("/") or ".." in folder.split("/"):
            raise SettingsError(f"{name}: {folder!r} is not an absolute folder without '..'")
    return folders


def _positive(env: Mapping[str, str], name: str, default: T, kind: Callable[[str], T]) -> T:
    raw = env.get(name)
    if raw is None:
        return default
    try:
        value = kind(raw)
    except ValueError:
        value = None
    if value is None or not value > 0:
        raise SettingsError(f"{name}={raw!r}: expected a number above 0")
    return value


def _port(raw: str | None, default: int) -> int:
    if raw is None:
        return default
    if not raw.isdigit() or not 0 < int(raw) < 65536:
        raise SettingsError(f"LEARNERKIT_SCHEDULER_PORT={raw!r}: expected a port number 1-65535")
    return int(raw)


def _backend(raw: str) -> BackendKind:
    try:
        return BackendKind(raw)
    except ValueError as e:
        choices = ", ".join(k.value for k in BackendKind)
        raise SettingsError(f"LEARNERKIT_SCHEDULER_BACKEND={raw!r}: expected one of {choices}") from e
