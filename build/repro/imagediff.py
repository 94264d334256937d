"""What differs between two image archives (`docker save` or a base's load archive): diffoscope's report when
it is installed, else a listing of this module's own, layer by layer, of the members whose name, mode,
owner, size, time, link or content differ."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import tarfile
from pathlib import Path

from learnerkit_build.errors import BuildToolError

Entry = tuple[int, int, int, int, int, str, str]
"""mode, uid, gid, size, mtime, link target, sha256 of the content."""
REPORT_LIMIT = 20000
"""Characters of a report kept: enough to name the files, short enough for a test's failure message."""


def describe_difference(first: Path, second: Path, *, timeout: int = 600) -> str:
    exe = shutil.which("diffoscope")
    if exe is None:
        return member_difference(first, second)
    argv = [exe, "--text", "-", "--max-text-report-size", str(REPORT_LIMIT)]
    try:
        done = subprocess.run([*argv, str(first), str(second)], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"diffoscope took over {timeout} s; members that differ:\n{member_difference(first, second)}"
    return done.stdout[:REPORT_LIMIT] or done.stderr[-REPORT_LIMIT:]


def member_difference(first: Path, second: Path) -> str:
    """Config and layers compared in order: each differing member with both sides' attributes."""
    one, two = _archive(first), _archive(second)
    lines = []
    if one[0] != two[0]:
        lines.append(f"config differs:\n  {one[0]!r}\n  {two[0]!r}")
    if len(one[1]) != len(two[1]):
        lines.append(f"{len(one[1])} layers against {len(two[1])}")
    for number, (left, right) in enumerate(zip(one[1], two[1], strict=False)):
        for name in sorted(set(left) | set(right)):
            if left.get(name) != right.get(name):
                lines.append(f"layer {number} {name}: {_show(left.get(name))} | {_show(right.get(name))}")
        if list(left) != list(right) and not any(line.startswith(f"layer {number} ") for line in lines):
            lines.append(f"layer {number}: the same members in another order")
    return "\n".join(lines)[:REPORT_LIMIT] or "the archives hold the same config and layer members"


def _archive(path: Path) -> tuple[str, list[dict[str, Entry]]]:
    with tarfile.open(path) as outer:
        manifest = json.loads(_read(outer, "manifest.json"))[0]
        config = _read(outer, manifest["Config"]).decode()
        layers = []
        for name in manifest["Layers"]:
            handle = outer.extractfile(name)
            if handle is None:
                raise BuildToolError(f"{path}: layer {name} is not a file")
            with tarfile.open(fileobj=handle, mode="r|") as layer:
                layers.append(_members(layer))
    return config, layers


def _members(layer: tarfile.TarFile) -> dict[str, Entry]:
    entries = {}
    for member in layer:
        digest = ""
        if member.isfile():
            handle = layer.extractfile(member)
            digest = hashlib.sha256(handle.read() if handle else b"").hexdigest()
        entries[member.name] = (
            member.mode,
            member.uid,
            member.gid,
            member.size,
            int(member.mtime),
            member.linkname,
            digest,
        )
    return entries


def _read(outer: tarfile.TarFile, name: str) -> bytes:
    handle = outer.extractfile(name)
    if handle is None:
        raise BuildToolError(f"the archive has no file {name}")
    return handle.read()


def _show(entry: Entry | None) -> str:
    if entry is None:
        return "absent"
    mode, uid, gid, size, mtime, link, digest = entry
    return f"{mode:o} {uid}:{gid} {size} B t={mtime}{' -> ' + link if link else ''} {digest[:16]}"
