"""Checks on how the image was made: its history lines, and what each RUN left in its own layer."""

from __future__ import annotations

import re
from collections.abc import Callable

from learnerkit_build.scan.layers import ImageIndex
from learnerkit_build.scan.model import CheckResult, Evidence, Severity, result

ARCHIVE = r"\S+\.(tar|tar\.gz|tgz|tar\.bz2|tbz2|tar\.xz|txz|tar\.zst)"
ADD_URL = re.compile(r"\bADD\b.*?\bhttps?://\S+", re.I)
ADD_ARCHIVE = re.compile(rf"\bADD\b(\s+--\S+)*\s+{ARCHIVE}\s", re.I)
APT_UPDATE = re.compile(r"\bapt(-get)?\s+(-\S+\s+)*update\b")
APT_INSTALL = re.compile(r"\bapt(-get)?\s+(-\S+\s+)*install\b")
DIST_UPGRADE = re.compile(r"\bapt(-get)?\s+(-\S+\s+)*(dist-upgrade|full-upgrade)\b")
SUDO = re.compile(r"(^|[\s;&|(])sudo\s")
NO_RECOMMENDS = re.compile(r"--no-install-recommends|APT::Install-Recommends=(false|0)")
CURL_PIPE_SH = re.compile(r"\b(curl|wget)\b[^;&|]*\|\s*(sudo\s+)?(\S*/)?(ba|da|z|k)?sh\b")
APT_LISTS = "/var/lib/apt/lists/"
PIP_CACHE = re.compile(r"/\.cache/pip/|/root/\.cache/pip")


def _lines(index: ImageIndex) -> list[tuple[int | None, str]]:
    """(layer or None for metadata-only steps, created_by) for every history entry."""
    out: list[tuple[int | None, str]] = []
    layer = 0
    for item in index.config.get("history", []):
        line = str(item.get("created_by", ""))
        if item.get("empty_layer", False):
            out.append((None, line))
        else:
            out.append((layer, line))
            layer += 1
    return out


def _matching(index: ImageIndex, test: Callable[[str], str | None]) -> list[Evidence]:
    evidence = []
    for layer, line in _lines(index):
        message = test(line)
        if message:
            evidence.append(Evidence(message, layer=layer, history=line))
    return evidence


def _apt_update_alone(line: str) -> str | None:
    if APT_UPDATE.search(line) and not APT_INSTALL.search(line):
        return "apt-get update in a step without an install (a stale index cached in a later layer)"
    return None


def _missing_no_recommends(line: str) -> str | None:
    if APT_INSTALL.search(line) and not NO_RECOMMENDS.search(line):
        return "apt-get install without --no-install-recommends"
    return None


def _left_in_layer(index: ImageIndex, what: str, test: Callable[[str], bool]) -> list[Evidence]:
    evidence = []
    for layer in index.layers:
        paths = [e.path for e in layer.entries if e.kind == "file" and test(e.path)]
        if paths:
            evidence.append(
                Evidence(
                    f"{len(paths)} {what} left in the layer, e.g. {paths[0]}",
                    path=paths[0],
                    layer=layer.index,
                    history=layer.history,
                )
            )
    return evidence


def history_checks(index: ImageIndex) -> list[CheckResult]:
    return [
        result(
            "history.add-url",
            "no ADD from a URL",
            Severity.MEDIUM,
            _matching(index, lambda line: "ADD from a URL" if ADD_URL.search(line) else None),
        ),
        result(
            "history.add-archive",
            "no ADD of a local archive (auto-extraction)",
            Severity.LOW,
            _matching(index, lambda line: "ADD of a local archive" if ADD_ARCHIVE.search(line + " ") else None),
            warn=True,
        ),
        result(
            "history.apt-update-alone",
            "apt-get update runs with its install",
            Severity.MEDIUM,
            _matching(index, _apt_update_alone),
        ),
        result(
            "history.dist-upgrade",
            "no dist-upgrade in the image build",
            Severity.LOW,
            _matching(index, lambda line: "dist-upgrade/full-upgrade" if DIST_UPGRADE.search(line) else None),
            warn=True,
        ),
        result(
            "history.sudo",
            "no sudo in build steps",
            Severity.MEDIUM,
            _matching(index, lambda line: "sudo in a build step" if SUDO.search(line) else None),
        ),
        result(
            "history.no-install-recommends",
            "apt-get install uses --no-install-recommends",
            Severity.LOW,
            _matching(index, _missing_no_recommends),
            warn=True,
        ),
        result(
            "history.apt-lists-left",
            "no apt lists left in any layer",
            Severity.MEDIUM,
            _left_in_layer(index, "apt list files", lambda p: p.startswith(APT_LISTS) and not p.endswith("/lock")),
        ),
        result(
            "history.pip-cache-left",
            "no pip cache left in any layer",
            Severity.MEDIUM,
            _left_in_layer(index, "pip cache files", lambda p: bool(PIP_CACHE.search(p))),
        ),
        result(
            "history.curl-pipe-sh",
            "no `curl | sh` in build steps",
            Severity.HIGH,
            _matching(index, lambda line: "a download piped into a shell" if CURL_PIPE_SH.search(line) else None),
        ),
    ]
