"""Fixtures for unit tests: throwaway project roots that reuse the real learner_base."""

from __future__ import annotations

import shutil
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

VALID_YAML = """\
name: toy
description: a toy framework
smoke:
  command: ["python", "/opt/learner/smoke/train.py", "--steps", "{steps}"]
  probe: ["python", "/opt/learner/smoke/probe.py"]
versions:
  "1.0":
    python: "3.11"
    variants:
      cpu:
        accelerator: cpu
        apt: [libgomp1]
        pip:
          packages: ["six==1.17.0"]
      cuda:
        accelerator: cuda
        base: "example.org/cuda-base:1"
        python: "3.12"
        pip:
          packages: ["six==1.17.0", "nvidia-cuda-runtime-cu12==12.9.79"]
        cuda:
          version: "12.9"
          cudnn: null
          capabilities: [sm_80, compute_80]
          library: toy/libtoy.so
          note: no cuDNN in a toy
"""

CHILD_TEMPLATE = '{% extends "learner_base/Dockerfile.j2" %}\n'

MakeProject = Callable[..., Path]


@pytest.fixture
def make_project(tmp_path: Path) -> MakeProject:
    """A project root with the real learner_base and one framework folder `toy` (or another name)."""

    def make(yaml_text: str = VALID_YAML, template: str = CHILD_TEMPLATE, name: str = "toy") -> Path:
        root = tmp_path / "project"
        if not (root / "learner_base").exists():
            shutil.copytree(REPO / "learner_base", root / "learner_base", ignore=shutil.ignore_patterns("__pycache__"))
        folder = root / "frameworks" / name
        (folder / "smoke").mkdir(parents=True, exist_ok=True)
        (folder / "framework.yaml").write_text(textwrap.dedent(yaml_text), encoding="utf-8")
        (folder / "Dockerfile.j2").write_text(template, encoding="utf-8")
        (folder / "smoke" / "train.py").write_text("print('train')\n", encoding="utf-8")
        return root

    return make
