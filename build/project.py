"""Where the project's build sources live: the folder holding `learner_base/` and `frameworks/`."""

from __future__ import annotations

import os
from pathlib import Path

from learnerkit.errors import ConfigError

ROOT_ENV = "LEARNERKIT_ROOT"


def is_project_root(path: Path) -> bool:
    return (path / "learner_base" / "Dockerfile.j2").is_file() and (path / "frameworks").is_dir()


def find_project_root(explicit: Path | None = None) -> Path:
    """`--root`, then $LEARNERKIT_ROOT, then the current folder or a parent, then this source checkout."""
    candidates: list[Path] = []
    if explicit is not None:
        candidates.append(explicit)
    elif os.environ.get(ROOT_ENV):
        candidates.append(Path(os.environ[ROOT_ENV]))
    else:
        cwd = Path.cwd()
        candidates.extend([cwd, *cwd.parents, Path(__file__).resolve().parent.parent])
    for candidate in candidates:
        if is_project_root(candidate):
            return candidate.resolve()
    raise ConfigError(
        f"no learnerkit project found (looked in {', '.join(map(str, candidates[:3]))}); a project has "
        f"learner_base/Dockerfile.j2 and frameworks/: pass --root or set ${ROOT_ENV}"
    )
