"""scripts/gpu_measure.py, loaded by its file as gpu_check.py imports it (scripts/ is no package)."""

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[3]
TRAIN_CPU = Path(__file__).with_name("train_cpu.py")


def gpu_measure() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_measure", ROOT / "scripts" / "gpu_measure.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_measure"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module
