"""Where the project's build sources live: the folder holding `learner_base/` and `frameworks/`."""

from __future__ import annotations

import os
from pathlib import Path

import click

from learnerkit.common.errors import ConfigError

ROOT_ENV = "LEARNERKIT_ROOT"
CHECKOUT = Path(__file__).resolve().parents[2]
"""The source checkout this module was loaded from (an editable install)."""

root_option = click.option(
    "--root",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="project folder with learner_base/ and frameworks/ [default: found from cwd]",
)


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
        candidates.extend([cwd, *cwd.parents, CHECKOUT])
    for candidate in candidates:
        if is_project_root(candidate):
            return candidate.resolve()
    raise ConfigError(
        f"no learnerkit project found (looked in {', '.join(map(str, candidates[:3]))}); a project has "
        f"learner_base/Dockerfile.j2 and frameworks/: pass --root or set ${ROOT_ENV}"
    )
