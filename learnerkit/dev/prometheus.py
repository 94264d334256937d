"""Prometheus (Debian ``prometheus`` 2.42; no init system, so we start it) as an optional dev service.

Its targets come from a file (``file_sd_configs``) that every ``learnerkit dev up`` rewrites from the
state's scrape targets: Prometheus re-reads that file by itself, so a service started later (the
scheduler's ``/metrics``) is scraped without restarting or reloading Prometheus.
"""

from __future__ import annotations

import json
import shutil
import urllib.error
import urllib.request

import yaml

from controller_sidecar.atomicfile import write_atomic
from learnerkit.common.errors import ToolMissingError
from learnerkit.dev.ports import LOOPBACK
from learnerkit.dev.service import Launch, Service

SCRAPE_INTERVAL = "5s"


def prometheus_binary() -> str:
    found = shutil.which("prometheus")
    if found is None:
        raise ToolMissingError("prometheus is not installed (Debian package prometheus: apt-get install prometheus)")
    return found


def file_sd_targets(scrape_targets: tuple[str, ...]) -> list[dict[str, object]]:
    """``host:port/path`` (or ``https://host:port/path``) entries as Prometheus file service discovery groups (one
    per target)."""
    groups: list[dict[str, object]] = []
    for target in scrape_targets:
        scheme, _, rest = target.rpartition("://")
        address, _, path = rest.partition("/")
        groups.append(
            {"targets": [address], "labels": {"__metrics_path__": f"/{path}", "__scheme__": scheme or "http"}}
        )
    return groups


def prometheus_config(targets_file: str) -> dict[str, object]:
    return {
        "global": {"scrape_interval": SCRAPE_INTERVAL, "evaluation_interval": SCRAPE_INTERVAL},
        "scrape_configs": [
            {
                "job_name": "learnerkit",
                "file_sd_configs": [{"files": [targets_file], "refresh_interval": SCRAPE_INTERVAL}],
                # The dev scheduler's certificate is of a CA made for it at its first start, which this config,
                # written first, cannot name; on loopback, for metrics that need no token, nothing is at stake.
                "tls_config": {"insecure_skip_verify": True},
            }
        ],
    }


def prometheus_ready(base_url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{base_url}/-/ready", timeout=1) as response:  # noqa: S310 (http only)
            return int(response.status) == 200
    except (urllib.error.URLError, OSError):
        return False


def _prepare(launch: Launch) -> None:
    (launch.folder / "data").mkdir(parents=True, exist_ok=True)
    targets = launch.folder / "targets.json"
    write_atomic(targets, json.dumps(file_sd_targets(launch.scrape_targets), indent=2).encode(), mode=0o644)
    config = yaml.safe_dump(prometheus_config(str(targets)), sort_keys=False)
    write_atomic(launch.folder / "prometheus.yml", config.encode(), mode=0o644)


def _argv(launch: Launch) -> list[str]:
    return [
        prometheus_binary(),
        f"--config.file={launch.folder / 'prometheus.yml'}",
        f"--storage.tsdb.path={launch.folder / 'data'}",
        f"--web.listen-address={LOOPBACK}:{launch.ports['web']}",
    ]


def _probe(launch: Launch) -> bool:
    return prometheus_ready(f"http://{LOOPBACK}:{launch.ports['web']}")


def _exports(launch: Launch) -> dict[str, str]:
    return {"PROMETHEUS_URL": f"http://{LOOPBACK}:{launch.ports['web']}"}


PROMETHEUS_SERVICE = Service(
    name="prometheus",
    ports={"web": 9090},
    main_port="web",
    argv=_argv,
    probe=_probe,
    prepare=_prepare,
    exports=_exports,
    optional=True,
    start_timeout_s=60.0,
)
