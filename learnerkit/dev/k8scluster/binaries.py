"""The cluster's binaries, as ``scripts/k8s-binaries.sh`` built and cached them."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from learnerkit.common.project import find_project_root

BUILD_SCRIPT = "scripts/k8s-binaries.sh"


@dataclass(frozen=True)
class Binaries:
    """The cached build: ``bin/{kube-apiserver,kube-controller-manager,kubelet,kube-scheduler,kubectl}``,
    ``pause.tar``."""

    root: Path

    def tool(self, name: str) -> str:
        return str(self.root / "bin" / name)

    @property
    def pause_archive(self) -> Path:
        return self.root / "pause.tar"

    @property
    def pause_ref(self) -> str:
        return (self.root / "pause.ref").read_text().strip()


def cached_binaries() -> Binaries | None:
    """The cached build, or None when ``scripts/k8s-binaries.sh`` has not built it yet (nothing is built here)."""
    script = find_project_root() / BUILD_SCRIPT
    done = subprocess.run([str(script), "--print-dir"], capture_output=True, text=True, check=False)
    return Binaries(Path(done.stdout.strip())) if done.returncode == 0 else None
