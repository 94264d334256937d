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


def test_the_services_start_in_the_background_before_the_builds_and_are_awaited_after() -> None:
    started = SCRIPT.index('"$LK" dev up --with-scheduler >"$DEMO/dev-up.log" 2>&1 &')
    first_build = SCRIPT.index('"$LK" image build')
    awaited = SCRIPT.index('if ! wait "$services"; then')
    submitted = SCRIPT.index('"$LK" job submit')
    assert started < first_build < awaited < submitted


def test_the_demo_submits_the_example_as_shipped_the_cli_filling_in_its_variables() -> None:
    """No copy of the manifest filled in by the script: what a user runs by hand is what the demo runs."""
    assert '"$LK" job submit examples/pytorch-smoke/manifest.yml --output json' in SCRIPT
    assert "expandvars" not in SCRIPT and '"$DEMO/manifest.yml"' not in SCRIPT
