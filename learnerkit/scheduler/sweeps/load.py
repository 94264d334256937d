"""A sweep from disk: its search file and the manifest it names, checked alone and together."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from learnerkit.common.yamlfile import Problem
from learnerkit.scheduler.errors import ManifestError
from learnerkit.scheduler.manifest.model import FFDL_DEFAULTS, FrameworkCatalog, JobManifest, ResourceDefaults
from learnerkit.scheduler.manifest.parser import load_manifest
from learnerkit.scheduler.sweeps.searchfile import SearchFileError, load_search_file
from learnerkit.scheduler.sweeps.spec import SweepSpec
from learnerkit.scheduler.sweeps.sweepcheck import sweep_problems


@dataclass(frozen=True)
class Sweep:
    search_file: Path
    spec: SweepSpec
    manifest: JobManifest


def load_sweep(
    search_file: Path, catalog: FrameworkCatalog | None = None, *, defaults: ResourceDefaults = FFDL_DEFAULTS
) -> Sweep:
    """Raises `SearchFileError` listing every problem of the search file, its manifest and the two together."""
    spec = load_search_file(search_file)
    if not spec.manifest.is_file():
        line = spec.lines.get(("manifest",))
        raise SearchFileError([Problem(search_file, line, ("manifest",), f"{spec.manifest}: no such file")])
    try:
        manifest = load_manifest(spec.manifest, catalog, defaults=defaults)
    except ManifestError as e:
        raise SearchFileError(list(e.problems)) from e
    problems = sweep_problems(spec, manifest, search_file)
    if problems:
        raise SearchFileError(problems)
    return Sweep(search_file, spec, manifest)
