"""``python -m controller_sidecar.health``: the image's healthcheck. Exit 0 while the sidecar's heartbeat
(written by the runtime every few seconds) is fresh, 1 otherwise."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from controller_sidecar.jobdirs import JobDirs

HEARTBEAT_FILE = "sidecar.heartbeat"
STALE_AFTER_S = 60.0


def healthy(control_dir: Path, now: float) -> tuple[bool, str]:
    try:
        age = now - (control_dir / HEARTBEAT_FILE).stat().st_mtime
    except FileNotFoundError:
        return False, f"no heartbeat in {control_dir}"
    if age > STALE_AFTER_S:
        return False, f"heartbeat is {age:.0f}s old"
    return True, f"heartbeat {age:.0f}s ago"


def main() -> int:
    ok, reason = healthy(JobDirs().control, time.time())
    sys.stdout.write(f"controller-sidecar: {'healthy' if ok else 'unhealthy'}: {reason}\n")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
