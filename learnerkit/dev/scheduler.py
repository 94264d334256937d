"""The scheduler as an optional dev service (``learnerkit dev up --with-scheduler``), with a demo tenant.

It serves on loopback against the dev etcd; the first start makes a token for the tenant ``demo`` (kept,
mode 0600, beside the tokens file) so that ``eval "$(learnerkit dev env)"`` is all a shell needs to submit, and
a tenants file that lets ``demo`` raise its jobs' priority.
"""

from __future__ import annotations

import sys
import urllib.error
import urllib.request
from pathlib import Path

from controller_sidecar.atomicfile import write_atomic
from learnerkit.dev.ports import LOOPBACK
from learnerkit.dev.service import Launch, Service
from learnerkit.scheduler.api.auth import add_token

DEMO_TENANT = "demo"
TENANTS = f"tenants:\n  {DEMO_TENANT}:\n    priority: [-1000, 100]\n"
"""The demo tenant may raise its jobs' priority (the example manifest asks for 10); others keep -1000..0."""


def _tokens(launch: Launch) -> Path:
    return launch.folder / "tokens.json"


def _demo_token(launch: Launch) -> Path:
    return launch.folder / f"{DEMO_TENANT}.token"


def _tenants(launch: Launch) -> Path:
    return launch.folder / "tenants.yaml"


def _prepare(launch: Launch) -> None:
    launch.folder.mkdir(parents=True, exist_ok=True)
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
        "--tenants",
        str(_tenants(launch)),
        "--etcd-endpoints",
        launch.env["ETCD_ENDPOINTS"],
        "--s3-endpoint",
        launch.env["S3_ENDPOINT_URL"],
        "--trust-project-images",  # the dev environment runs the images built here, scanned or not (docs/security.md)
    ]


def _probe(launch: Launch) -> bool:
    try:
        with urllib.request.urlopen(f"http://{LOOPBACK}:{launch.ports['api']}/healthz", timeout=2) as answer:
            return bool(answer.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def _exports(launch: Launch) -> dict[str, str]:
    token = _demo_token(launch).read_text(encoding="utf-8").strip()
    return {"LEARNERKIT_SCHEDULER_URL": f"http://{LOOPBACK}:{launch.ports['api']}", "LEARNERKIT_TOKEN": token}


SCHEDULER_SERVICE = Service(
    name="scheduler",
    ports={"api": 8080},
    main_port="api",
    argv=_argv,
    probe=_probe,
    prepare=_prepare,
    exports=_exports,
    metrics_path="/metrics",
    optional=True,
    start_timeout_s=60.0,
)
