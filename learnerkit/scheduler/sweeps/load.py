"""A sweep from disk: its search file and the manifest it names, checked alone and together."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from learnerkit.common.errors import ConfigError
from learnerkit.common.yamlfile import Problem, YamlError, read_yaml_text
from learnerkit.common.yamlvars import ExpandedYaml
from learnerkit.scheduler.errors import ManifestError
from learnerkit.scheduler.manifest.model import FFDL_DEFAULTS, FrameworkCatalog, JobManifest, ResourceDefaults
from learnerkit.scheduler.manifest.parser import parse_manifest
from learnerkit.scheduler.sweeps.searchfile import SearchFileError, parse_search_file
from learnerkit.scheduler.sweeps.spec import SweepSpec
from learnerkit.scheduler.sweeps.sweepcheck import sweep_problems

Reader = Callable[[Path], ExpandedYaml]
"""How a file becomes the text that is checked and sent: the CLI's fills in the caller's variables."""


def as_written(path: Path) -> ExpandedYaml:
    """The file's text as it is."""
    return ExpandedYaml(read_yaml_text(path), frozenset())


@dataclass(frozen=True)
class Sweep:
    search_file: Path
    spec: SweepSpec
    manifest: JobManifest
    search_yaml: ExpandedYaml
    """The search file's text as checked: what a submit sends."""
    manifest_yaml: ExpandedYaml
    """The manifest's text as checked: what a submit sends."""


def load_sweep(
    search_file: Path,
    catalog: FrameworkCatalog | None = None,
    *,
    defaults: ResourceDefaults = FFDL_DEFAULTS,
    read: Reader = as_written,
) -> Sweep:
    """Raises `SearchFileError` listing every problem of the search file, its manifest and the two together;
    a problem of the manifest never shows a secret ``read`` filled in."""
    search_yaml = _read(read, search_file)
    spec = parse_search_file(search_yaml.text, search_file)
    if not spec.manifest.is_file():
        line = spec.lines.get(("manifest",))
        raise SearchFileError([Problem(search_file, line, ("manifest",), f"{spec.manifest}: no such file")])
    manifest_yaml = _read(read, spec.manifest)
    try:
        manifest = parse_manifest(manifest_yaml.text, str(spec.manifest), catalog, defaults=defaults)
    except ManifestError as e:
        raise SearchFileError(list(manifest_yaml.masked(e).problems)) from e
    problems = sweep_problems(spec, manifest, search_file)
    if problems:
        raise SearchFileError(problems)
    return Sweep(search_file, spec, manifest, search_yaml, manifest_yaml)


def _read(read: Reader, path: Path) -> ExpandedYaml:
    try:
        return read(path)
    except YamlError as e:
        raise SearchFileError(list(e.problems)) from e
    except ConfigError as e:
        raise SearchFileError([Problem(path=path, line=None, loc=(), message=str(e))]) from e
