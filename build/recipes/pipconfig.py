"""Build inputs from options, `LEARNERKIT_*` variables and the host's pip configuration, each with its source.

`learnerkit image build` with no option finds what `pip install` on this host would use: the index, extra
indexes, find-links and CA bundle of `pip config list`. An option beats its variable, which beats pip's
configuration (whose own order is pip's: its `PIP_*` variables, then the `install` section, then `global`).
A build sees only its context, so a find-links folder on this host travels into it as a wheelhouse, and a
folder index (`file://`) cannot be used at all: it is reported, with the option that can supply its wheels.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import re
import subprocess
import sys
from collections.abc import Mapping
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

from learnerkit_build.recipes.render import PYPI_INDEX_URL, BuildInputs, without_credentials
from learnerkit_build.state import write_atomic

DEFAULT_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
PIP_SECTIONS = (":env:", "install", "global")
"""Where pip's `install` reads a setting, first match wins."""


@dataclass(frozen=True)
class Given:
    """A value from the command line or a `LEARNERKIT_*` variable, and which of the two."""

    value: str
    source: str


@dataclass(frozen=True)
class BuildOptions:
    """What the command line and `LEARNERKIT_*` variables said; None where they said nothing."""

    index_url: Given | None = None
    extra_index_urls: tuple[Given, ...] = ()
    find_links: tuple[Given, ...] = ()
    ca_bundle: Given | None = None
    no_ca_bundle: bool = False


@dataclass(frozen=True)
class Setting:
    """One build input as people see it: its value, where it came from, and why it is not used (if not)."""

    name: str
    value: str
    source: str
    unused: str | None = None


@dataclass(frozen=True)
class ResolvedInputs:
    inputs: BuildInputs
    settings: tuple[Setting, ...]


def pip_config(project: Path | None = None) -> dict[str, str]:
    """`pip config list` of this Python's pip, as `section.key` -> value ({} when pip cannot say).

    With `project`, the answer is remembered in its `.learnerkit/` (mode 0600: an index URL may hold a
    password) and given again without starting pip while nothing pip reads has changed: its configuration
    files (as `pip config debug` lists them: same size, times and inode, or still absent), pip itself, and the
    `PIP_*` and location variables. Starting pip twice took 0.3 s of a no-op build's 2 s."""
    if project is None:
        return parse_pip_config(_ask_pip("list"))
    memory = project / PIP_MEMORY_FILE
    situation = _situation()
    remembered = _read_json(memory)
    if (
        isinstance(remembered, dict)
        and remembered.get("situation") == situation
        and isinstance(remembered.get("files"), dict)
        and all(_file_state(Path(name)) == state for name, state in remembered["files"].items())
        and isinstance(remembered.get("config"), dict)
    ):
        return {str(key): str(value) for key, value in remembered["config"].items()}
    files = _pip_files()
    states = {name: _file_state(Path(name)) for name in files}
    config = parse_pip_config(_ask_pip("list"))
    if files:
        with suppress(OSError):  # a read-only checkout asks pip every time
            write_atomic(
                memory, json.dumps({"situation": situation, "files": states, "config": config}, indent=1).encode()
            )
    return config


PIP_MEMORY_FILE = Path(".learnerkit") / "cache" / "pip-config.json"
"""Under the project root."""
_LOCATION_VARIABLES = ("HOME", "XDG_CONFIG_HOME", "XDG_CONFIG_DIRS", "VIRTUAL_ENV")
_DEBUG_FILE_LINE = re.compile(r"^\s+(?P<path>/.*), exists: (?:True|False)$")


def _ask_pip(verb: str) -> str:
    """What `pip config VERB` prints ("" when pip cannot say)."""
    try:
        out = subprocess.run(
            [sys.executable, "-m", "pip", "config", verb],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
            env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
    return out


def _pip_files() -> list[str]:
    """The configuration files pip reads (present or not), and pip's own code; [] when pip cannot say."""
    files = [m["path"] for m in map(_DEBUG_FILE_LINE.match, _ask_pip("debug").splitlines()) if m]
    spec = importlib.util.find_spec("pip")
    if not files or spec is None or spec.origin is None:
        return []
    return [*files, spec.origin]


def _situation() -> dict[str, str]:
    variables = {k: v for k, v in os.environ.items() if k.startswith("PIP_") or k in _LOCATION_VARIABLES}
    return {"python": sys.executable, **dict(sorted(variables.items()))}


def _file_state(path: Path) -> list[int] | None:
    try:
        stat = path.stat()
    except OSError:
        return None
    return [stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino]


def _read_json(path: Path) -> object:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def parse_pip_config(text: str) -> dict[str, str]:
    """Lines `global.find-links='/opt/wheels'` (pip prints each value as a Python literal)."""
    found = {}
    for line in text.splitlines():
        key, sep, literal = line.partition("=")
        if not sep:
            continue
        try:
            value = ast.literal_eval(literal)
        except (ValueError, SyntaxError):
            value = literal
        found[key.strip()] = str(value)
    return found


def pip_setting(config: Mapping[str, str], name: str) -> tuple[str, str] | None:
    """(value, source) of pip's effective setting `name`."""
    for section in PIP_SECTIONS:
        key = f"{section}.{name}"
        if key in config:
            where = f"${'PIP_' + name.upper().replace('-', '_')}" if section == ":env:" else key
            return config[key], f"pip config {where}"
    return None


def resolve_build_inputs(options: BuildOptions, config: Mapping[str, str]) -> ResolvedInputs:
    """The build inputs, and a Setting per value (used or not) saying where it came from."""
    settings: list[Setting] = []

    index_url: str | None = None
    index = _single(options.index_url, config, "index-url")
    if index is None:
        settings.append(Setting("index-url", PYPI_INDEX_URL, "default"))
    else:
        value, source = index
        reason = _remote_only(value)
        settings.append(Setting("index-url", without_credentials(value), source, reason))
        index_url = None if reason else value

    extra: list[str] = []
    for value, source in _many(options.extra_index_urls, config, "extra-index-url"):
        reason = _remote_only(value)
        settings.append(Setting("extra-index-url", without_credentials(value), source, reason))
        if reason is None:
            extra.append(value)

    wheelhouses: list[Path] = []
    links: list[str] = []
    for value, source in _many(options.find_links, config, "find-links"):
        folder = _local_folder(value)
        if folder is None:
            links.append(value)
            settings.append(Setting("find-links", without_credentials(value), source))
        elif folder.is_dir():
            wheelhouses.append(folder)
            settings.append(Setting("find-links", str(folder), source))
        else:
            settings.append(Setting("find-links", value, source, "no such folder on this host"))

    ca_bundle = _ca_bundle(options, config, settings)
    inputs = BuildInputs(
        wheelhouses=tuple(wheelhouses),
        find_links=tuple(links),
        ca_bundle=ca_bundle,
        index_url=index_url,
        extra_index_urls=tuple(extra),
    )
    return ResolvedInputs(inputs, tuple(settings))


def _single(given: Given | None, config: Mapping[str, str], name: str) -> tuple[str, str] | None:
    if given is not None:
        return given.value, given.source
    return pip_setting(config, name)


def _many(given: tuple[Given, ...], config: Mapping[str, str], name: str) -> list[tuple[str, str]]:
    """Each value of a list setting (pip separates them by white space) with its source."""
    if given:
        return [(part, item.source) for item in given for part in item.value.split()]
    found = pip_setting(config, name)
    return [(part, found[1]) for part in found[0].split()] if found else []


def _local_folder(link: str) -> Path | None:
    """A find-links entry on this host (a path or a file:// URL) as a path; None for a URL pip fetches."""
    parts = urlsplit(link)
    if parts.scheme == "file":
        return Path(unquote(parts.path))
    if parts.scheme in ("http", "https"):
        return None
    return Path(link).expanduser()


def _remote_only(url: str) -> str | None:
    """Why an index URL cannot be used inside a build, or None when it can."""
    if urlsplit(url).scheme in ("http", "https"):
        return None
    return "a folder index on this host, which no build can reach (pass its wheels' folder with --find-links)"


def _ca_bundle(options: BuildOptions, config: Mapping[str, str], settings: list[Setting]) -> Path | None:
    if options.no_ca_bundle:
        settings.append(Setting("ca-bundle", "none", "--no-ca-bundle"))
        return None
    found = _single(options.ca_bundle, config, "cert")
    if found is None and DEFAULT_CA_BUNDLE.is_file():
        found = str(DEFAULT_CA_BUNDLE), "default"
    if found is None:
        settings.append(Setting("ca-bundle", "none", "default"))
        return None
    value, source = found
    path = Path(value).expanduser()
    if not path.is_file():
        settings.append(Setting("ca-bundle", value, source, "no such file on this host"))
        return None
    settings.append(Setting("ca-bundle", str(path), source))
    return path
