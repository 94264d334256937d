"""The model catalog's OCI registry (Debian ``docker-registry``, distribution 2.8) on loopback: its storage in the
service's folder, deletes allowed (the catalog's garbage is collected by the registry's own tool)."""

from __future__ import annotations

import shutil
import urllib.error
import urllib.request

from learnerkit.common.errors import ToolMissingError
from learnerkit.dev.ports import LOOPBACK
from learnerkit.dev.service import Launch, Service

REGISTRY_SETTING = "LEARNERKIT_CATALOG_REGISTRY"


def registry_binary() -> str:
    found = shutil.which("docker-registry")
    if found is None:
        raise ToolMissingError("docker-registry is not installed (Debian package docker-registry): run make setup")
    return found


def registry_config(launch: Launch) -> str:
    return (
        "version: 0.1\nlog: {level: warn}\nstorage:\n"
        f"  filesystem: {{rootdirectory: {launch.folder / 'data'}}}\n  delete: {{enabled: true}}\n"
        f"http:\n  addr: {LOOPBACK}:{launch.ports['http']}\n"
    )


def _prepare(launch: Launch) -> None:
    (launch.folder / "data").mkdir(parents=True, exist_ok=True)
    (launch.folder / "config.yml").write_text(registry_config(launch), encoding="utf-8")


def _argv(launch: Launch) -> list[str]:
    return [registry_binary(), "serve", str(launch.folder / "config.yml")]


def _probe(launch: Launch) -> bool:
    try:
        with urllib.request.urlopen(f"http://{LOOPBACK}:{launch.ports['http']}/v2/", timeout=1) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def _exports(launch: Launch) -> dict[str, str]:
    return {REGISTRY_SETTING: f"{LOOPBACK}:{launch.ports['http']}"}


REGISTRY_SERVICE = Service(
    name="registry",
    ports={"http": 5000},
    main_port="http",
    argv=_argv,
    probe=_probe,
    prepare=_prepare,
    exports=_exports,
)
