"""`make demo` (scripts/demo.sh) builds only what its job runs, and starts the services while it builds."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[3]
SCRIPT = (REPO / "scripts" / "demo.sh").read_text(encoding="utf-8")


def test_the_demo_builds_only_the_image_its_manifest_names_and_the_sidecar() -> None:
    manifest = yaml.safe_load((REPO / "examples" / "pytorch-smoke" / "manifest.yml").read_text(encoding="utf-8"))
    framework = manifest["framework"]
    builds = re.findall(r'^"\$LK" (image|sidecar) build(.*)$', SCRIPT, flags=re.MULTILINE)
    specs = [arg for kind, args in builds if kind == "image" for arg in args.split() if not arg.startswith("--")]
    assert specs == [f"{framework['name']}:{framework['version']}-cpu"]
    assert [kind for kind, _ in builds] == ["image", "sidecar"]
    assert not any(flag in args for _, args in builds for flag in ("--all", "--tier", "--variant"))


def test_the_stores_start_in_the_background_before_the_builds_and_the_scheduler_after_the_sidecar_is_built() -> None:
    """The scheduler pins the sidecar image as it starts: started before that image was built (a fresh machine),
    it exited with "no image learnerkit/sidecar:0.1.0 on this engine" and the demo failed."""
    started = SCRIPT.index('"$LK" dev up >"$DEMO/dev-up.log" 2>&1 &')
    first_build = SCRIPT.index('"$LK" image build')
    sidecar_built = SCRIPT.index('"$LK" sidecar build')
    awaited = SCRIPT.index('if ! wait "$services"; then')
    scheduler = SCRIPT.index('"$LK" dev up --with-scheduler')
    submitted = SCRIPT.index('"$LK" job submit')
    assert started < first_build < sidecar_built < awaited < scheduler < submitted
    assert SCRIPT.count("--with-scheduler") == 1


def test_the_demo_submits_the_example_as_shipped_the_cli_filling_in_its_variables() -> None:
    """No copy of the manifest filled in by the script: what a user runs by hand is what the demo runs."""
    assert '"$LK" job submit examples/pytorch-smoke/manifest.yml --output json' in SCRIPT
    assert "expandvars" not in SCRIPT and '"$DEMO/manifest.yml"' not in SCRIPT


def test_the_scan_runs_beside_the_sidecar_build_and_ends_before_the_job_is_submitted() -> None:
    """The job's provenance, signed as it ends, names the scan's record: the scan may not still run then."""
    learner_built = SCRIPT.index('"$LK" image build pytorch:2.13-cpu')
    scan_started = SCRIPT.index('"$LK" image scan pytorch:2.13-cpu >"$DEMO/scan.log" 2>&1 &')
    sidecar_built = SCRIPT.index('"$LK" sidecar build')
    scan_awaited = SCRIPT.index('! wait "$scan"')
    submitted = SCRIPT.index('"$LK" job submit')
    assert learner_built < scan_started < sidecar_built < scan_awaited < submitted
