"""`learnerkit framework new NAME`: a framework folder that builds and passes `image test` as it is."""

from __future__ import annotations

import re
from pathlib import Path

import jinja2

from learnerkit.common.errors import ConfigError
from learnerkit_build.recipes.spec import NAME_PATTERN

TEMPLATES = Path(__file__).parent / "scaffold_templates"
FILES = {
    "framework.yaml.j2": "framework.yaml",
    "Dockerfile.j2.j2": "Dockerfile.j2",
    "train.py.j2": "smoke/train.py",
}


def scaffold_framework(root: Path, name: str, description: str | None, packages: list[str]) -> list[Path]:
    """Create frameworks/<name>/; refuse to touch an existing folder. Returns the files made."""
    if not re.match(NAME_PATTERN, name):
        raise ConfigError(f"framework name {name!r}: use lower-case letters, digits and dashes, starting with a letter")
    folder = root / "frameworks" / name
    if folder.exists():
        raise ConfigError(f"{folder} already exists; `framework new` only creates new frameworks")
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,  # noqa: S701 - renders YAML and Python, not HTML
    )
    context = {"name": name, "description": description or f"{name} learner", "packages": packages}
    staged = root / "frameworks" / f".{name}.new"
    created = []
    try:
        for template, target in FILES.items():
            path = staged / target
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(env.get_template(template).render(context), encoding="utf-8")
            created.append(folder / target)
        staged.rename(folder)  # all files appear at once, or none
    finally:
        if staged.exists():
            for path in sorted(staged.rglob("*"), reverse=True):
                path.rmdir() if path.is_dir() else path.unlink()
            staged.rmdir()
    return created
