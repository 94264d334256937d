"""The console's front-end files are the build of its committed npm lock (docs/dependencies.md, "npm")."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[4]

FRONTEND = REPO / "learnerkit/scheduler/console/frontend"
VENDOR = REPO / "learnerkit/scheduler/console/static/vendor"


def test_the_lock_pins_exactly_what_package_json_asks_and_the_served_script_is_that_version() -> None:
    wanted = json.loads((FRONTEND / "package.json").read_text())
    lock = json.loads((FRONTEND / "package-lock.json").read_text())["packages"]
    for name, version in {**wanted["dependencies"], **wanted["devDependencies"]}.items():
        assert lock[f"node_modules/{name}"]["version"] == version, name
        assert lock[f"node_modules/{name}"]["integrity"].startswith("sha512-"), name
    banner = (VENDOR / "uPlot.iife.min.js").read_text()[:80]
    assert f"(v{wanted['dependencies']['uplot']})" in banner


def test_the_committed_files_are_the_locks_build_byte_for_byte() -> None:
    """`scripts/frontend.sh check`: npm ci when the lock changed, a build into a temporary folder, a diff."""
    done = subprocess.run([REPO / "scripts/frontend.sh", "check"], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "is the lock's build" in done.stdout
