"""The scheduler as an optional dev service (``learnerkit dev up --with-scheduler``), with a demo tenant.

It serves on loopback against the dev etcd; the first start makes a token for the tenant ``demo`` (kept,
mode 0600, beside the tokens file) so that ``eval "$(learnerkit dev env)"`` is all a shell needs to submit, and
a tenants file that lets ``demo`` raise its jobs' priority, the platform's signing key, and a local CA with the
API's certificate: the dev scheduler serves HTTPS, and ``dev env`` exports the CA for the CLI.

Its settings are the caller's ``LEARNERKIT_*`` variables (:func:`scheduler_settings`), so that
``LEARNERKIT_PREEMPTION_MIN_RUN_S=30 learnerkit dev up --with-scheduler`` tries preemption locally; ``dev status``
shows them. The dev files (tokens,
signing key, certificates, etcd and S3) always win; the defaults below and the demo tenants file only where the
caller sets no variable of its own.

FfDL's defaults (5 CPUs, 12 GiB a learner) would leave a manifest without ``cpus`` unschedulable on a small
machine, so the dev scheduler's defaults fit this host (the local engine's one node), and manifests without
``training_results`` keep results in the dev store's results bucket, a folder per tenant. ``learnerkit dev env``
exports the same values, so ``job validate`` in that shell applies what the scheduler applies.
"""

from __future__ import annotations

import os
import ssl
import sys
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path

from controller_sidecar.atomicfile import write_atomic
from learnerkit.common.signing import load_or_create_signer
from learnerkit.dev.ports import LOOPBACK
from learnerkit.dev.service import Launch, Service
from learnerkit.scheduler.api.auth import add_token
from learnerkit.scheduler.api.certificates import CertificateFiles, create_certificates
from learnerkit.scheduler.client.http import CA_ENV
from learnerkit.scheduler.manifest.model import FFDL_DEFAULTS

DEMO_TENANT = "demo"
RESULTS_BUCKET = "training-results"
"""The default results store's bucket: one of the dev S3's buckets (``learnerkit.dev.s3.DEV_BUCKETS``)."""
_MIB = 2**20
TENANTS = f"tenants:\n  {DEMO_TENANT}:\n    priority: [-1000, 100]\n"
"""The demo tenant may raise its jobs' priority (the example manifest asks for 10); others keep -1000..0."""


CLIENT_VARIABLES = frozenset({"LEARNERKIT_TOKEN", "LEARNERKIT_SCHEDULER_URL", CA_ENV, "LEARNERKIT_SERVICES_DIR"})
"""The CLI's own variables (and where the dev services live): never a scheduler setting, a token never passed on."""


def scheduler_settings(environ: Mapping[str, str]) -> dict[str, str]:
    """The caller's ``LEARNERKIT_*`` variables but the CLI's: the settings the dev scheduler takes."""
    return {
        key: value for key, value in environ.items() if key.startswith("LEARNERKIT_") and key not in CLIENT_VARIABLES
    }


def fitting_defaults(cpus: int, memory_bytes: int) -> dict[str, str]:
    """FfDL's defaults cut to a node of ``cpus`` and ``memory_bytes``: at most half of each, so two learners
    fit; as the scheduler's variables."""
    cpu = min(FFDL_DEFAULTS.cpus, max(cpus / 2, 0.5))
    memory_mib = max(min(FFDL_DEFAULTS.memory_bytes, memory_bytes // 2) // _MIB // 256 * 256, 256)
    return {
        "LEARNERKIT_DEFAULT_CPUS": f"{cpu:g}",
        "LEARNERKIT_DEFAULT_MEMORY": f"{memory_mib}Mi",
        "LEARNERKIT_RESULTS_BUCKET": RESULTS_BUCKET,
    }


def host_defaults() -> dict[str, str]:
    """`fitting_defaults` of this host: the dev scheduler runs learners on the local engine."""
    return fitting_defaults(os.cpu_count() or 1, os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def console_note(endpoint: str) -> str:
    """Where the scheduler's web console is, and how to log in to it (docs/console.md)."""
    return (
        f"console: {endpoint.rstrip('/')}/ui/ (log in with tenant {DEMO_TENANT}'s token, $LEARNERKIT_TOKEN after "
        f'eval "$(learnerkit dev env)"; the browser trusts the page once it trusts the dev CA, ${CA_ENV})'
    )


def _tokens(launch: Launch) -> Path:
    return launch.folder / "tokens.json"


def _demo_token(launch: Launch) -> Path:
    return launch.folder / f"{DEMO_TENANT}.token"


def _tenants(launch: Launch) -> Path:
    return launch.folder / "tenants.yaml"


def signing_key(launch: Launch) -> Path:
    """The dev platform's signing key, made on the first start (docs/provenance.md)."""
    return launch.folder / "signing-key.pem"


def certificates(launch: Launch) -> CertificateFiles:
    """The dev CA and the API's certificate (``localhost``, ``127.0.0.1``), made on the first start."""
    return CertificateFiles.in_folder(launch.folder / "tls")


def _prepare(launch: Launch) -> None:
    launch.folder.mkdir(parents=True, exist_ok=True)
    load_or_create_signer(signing_key(launch), "the dev scheduler's key (dev --state-dir)")
    if not certificates(launch).cert.exists():
        create_certificates(launch.folder / "tls")
    if not _tenants(launch).exists():
        write_atomic(_tenants(launch), TENANTS.encode(), mode=0o600)
    if not _demo_token(launch).exists():
        write_atomic(_demo_token(launch), add_token(_tokens(launch), DEMO_TENANT).encode(), mode=0o600)


def _argv(launch: Launch) -> list[str]:
    return [
        sys.executable,
        "-m",
        "learnerkit",
        "scheduler",
        "serve",
        "--host",
        LOOPBACK,
        "--port",
        str(launch.ports["api"]),
        "--tokens",
        str(_tokens(launch)),
        "--signing-key",
        str(signing_key(launch)),
        "--tls-cert",
        str(certificates(launch).cert),
        "--tls-key",
        str(certificates(launch).key),
        *([] if "LEARNERKIT_TENANTS" in launch.settings else ["--tenants", str(_tenants(launch))]),
        "--etcd-endpoints",
        launch.env["ETCD_ENDPOINTS"],
        "--s3-endpoint",
        launch.env["S3_ENDPOINT_URL"],
        *_default_options(launch.settings),
        "--trust-project-images",  # the dev environment runs the images built here, scanned or not (docs/security.md)
    ]


OPTIONS = {
    "LEARNERKIT_DEFAULT_CPUS": "--default-cpus",
    "LEARNERKIT_DEFAULT_MEMORY": "--default-memory",
    "LEARNERKIT_RESULTS_BUCKET": "--results-bucket",
}
"""The host's defaults as ``serve`` options (an option wins over its variable): given only where the caller sets
no such variable."""


def _default_options(settings: Mapping[str, str]) -> list[str]:
    defaults = host_defaults()
    return [part for name, option in OPTIONS.items() if name not in settings for part in (option, defaults[name])]


def _url(launch: Launch) -> str:
    return f"https://{LOOPBACK}:{launch.ports['api']}"


def _probe(launch: Launch) -> bool:
    try:
        context = ssl.create_default_context(cafile=certificates(launch).ca)
        with urllib.request.urlopen(f"{_url(launch)}/healthz", timeout=2, context=context) as answer:  # noqa: S310
            return bool(answer.status == 200)
    except (urllib.error.URLError, OSError, ssl.SSLError):
        return False


def _exports(launch: Launch) -> dict[str, str]:
    token = _demo_token(launch).read_text(encoding="utf-8").strip()
    return {
        "LEARNERKIT_SCHEDULER_URL": _url(launch),
        CA_ENV: str(certificates(launch).ca),
        "LEARNERKIT_TOKEN": token,
        **host_defaults(),
        **{name: value for name, value in launch.settings.items() if name in OPTIONS},
    }


SCHEDULER_SERVICE = Service(
    name="scheduler",
    ports={"api": 8080},
    main_port="api",
    argv=_argv,
    probe=_probe,
    prepare=_prepare,
    exports=_exports,
    settings=scheduler_settings,
    metrics_path="/metrics",
    optional=True,
    start_timeout_s=60.0,
    scheme="https",
)
