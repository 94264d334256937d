"""The Python programs outside the packages (`scripts/`, `bench/`) still import: mypy checks only the packages, so
a name moved in a package broke `make repro` (`scripts/repro.py` imported `base_archive` from the module it had left)
without any check failing."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.integration.conftest import REPO

IMPORT_EACH = """
import importlib.util, json, sys
from pathlib import Path
sys.path[:0] = ["bench", "scripts"]
failed = {}
for path in sorted([*Path("scripts").glob("*.py"), *Path("bench").glob("*.py")]):
    name = f"program_{path.parent.name}_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        failed[str(path)] = f"{type(e).__name__}: {e}"
print(json.dumps(failed))
"""


def test_every_program_under_scripts_and_bench_imports() -> None:
    ran = subprocess.run(
        [sys.executable, "-c", IMPORT_EACH], cwd=REPO, capture_output=True, text=True, timeout=300, check=True
    )
    assert json.loads(ran.stdout.splitlines()[-1]) == {}
