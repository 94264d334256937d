"""What a learner image holds, read from inside it: run there as a script (`python3 -c <this file's source>`).

Standard library only, since it runs under the image's Python. It prints one JSON document:
- `content [LIBRARY]`: `distributions`, the names of every distribution of the Python running it (the
  learner's venv); with LIBRARY, `capabilities`: the CUDA architectures in the fatbinaries of that library
  (`sm_80` for code of a real GPU architecture, `compute_90` for PTX the driver compiles at run time);
- `libraries [DISTRIBUTION...]`: `unresolved`, per shared library of the framework, the libraries `ldd` cannot
  find (those the framework's libraries link, directly or not, included). The framework's libraries are those
  of the named distributions and everything under /opt outside the venv (what a template built itself).

The check that runs it (`learnerkit_build.checks_cuda`) decides what is allowed.
"""

from __future__ import annotations

import json
import os
import re
import struct
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

LIBRARY_ROOT = Path("/opt")
VENV = Path(sys.prefix)
FATBIN_MAGIC = 0xBA55ED50
FATBIN_KINDS = {1: "compute", 2: "sm"}
"""Fatbinary entry kinds: 1 is PTX (virtual architecture), 2 is an ELF cubin (real architecture)."""
_NOT_FOUND = re.compile(r"^\s*(\S+) => not found", re.MULTILINE)


def distributions() -> list[str]:
    return sorted({dist.metadata["Name"] for dist in metadata.distributions()})


def is_shared_library(path: Path) -> bool:
    """An ELF shared object (`*.so`, `*.so.N`), symbolic links left out."""
    name = path.name
    return (name.endswith(".so") or ".so." in name) and not path.is_symlink() and _is_elf(path)


def framework_libraries(names: list[str], root: Path = LIBRARY_ROOT) -> Iterator[Path]:
    """The shared libraries of the distributions `names`, and those under `root` but outside the venv.

    Libraries a wheel vendors in a `<name>.libs/` folder (auditwheel) are left out: they are found through the
    RPATH of the extension modules that load them, and `ldd` on those checks them as they are really loaded.
    """
    for name in names:
        for file in metadata.distribution(name).files or ():
            path = Path(str(file.locate()))
            if is_shared_library(path) and not path.parent.name.endswith(".libs"):
                yield path
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if Path(folder, d) != VENV)
        for name in sorted(files):
            path = Path(folder) / name
            if is_shared_library(path):
                yield path


def _is_elf(path: Path) -> bool:
    try:
        with path.open("rb") as handle:
            return handle.read(4) == b"\x7fELF"
    except OSError:
        return False


def missing_libraries(ldd_output: str) -> list[str]:
    """The names `ldd` printed as `=> not found`."""
    return sorted(set(_NOT_FOUND.findall(ldd_output)))


def unresolved(names: list[str], root: Path = LIBRARY_ROOT) -> dict[str, list[str]]:
    found = {}
    for path in framework_libraries(names, root):
        out = subprocess.run(["ldd", str(path)], capture_output=True, text=True, check=False).stdout
        missing = missing_libraries(out)
        if missing:
            found[str(path)] = missing
    return found


def elf_section(path: Path, name: bytes) -> tuple[int, int] | None:
    """(offset, size) in the file of a 64-bit little-endian ELF's section `name`, None without one."""
    with path.open("rb") as handle:
        header = handle.read(64)
        if header[:4] != b"\x7fELF" or header[4] != 2 or header[5] != 1:
            return None
        (shoff,) = struct.unpack_from("<Q", header, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", header, 0x3A)
        handle.seek(shoff)
        table = handle.read(shentsize * shnum)
        sections = [struct.unpack_from("<IIQQQQ", table, i * shentsize) for i in range(shnum)]
        _, _, _, _, names_offset, names_size = sections[shstrndx]
        handle.seek(names_offset)
        names = handle.read(names_size)
        for name_at, _, _, _, offset, size in sections:
            if names[name_at : names.index(b"\0", name_at)] == name:
                return offset, size
    return None


def fatbin_architectures(path: Path) -> list[str]:
    """The architectures of every entry of every fatbinary in the library's `.nv_fatbin` section.

    A fatbinary is a 16-byte header (magic, version, header size, size of the entries) followed by entries;
    an entry header holds its kind (u16 at 0), its header size (u32 at 4), its payload size (u64 at 8) and
    its architecture (u32 at 28). Only headers are read: payloads (gigabytes for some libraries) are skipped.
    """
    section = elf_section(path, b".nv_fatbin")
    if section is None:
        return []
    start, size = section
    found: set[str] = set()
    with path.open("rb") as handle:
        at = start
        while at + 16 <= start + size:
            handle.seek(at)
            magic, _, header_size, entries_size = struct.unpack("<IHHQ", handle.read(16))
            if magic != FATBIN_MAGIC:
                at += 8  # containers are 8-byte aligned; padding may sit between them
                continue
            entry, end = at + header_size, at + header_size + entries_size
            while entry + 32 <= end:
                handle.seek(entry)
                kind, _, entry_header, payload = struct.unpack("<HHIQ", handle.read(16))
                handle.seek(entry + 28)
                (arch,) = struct.unpack("<I", handle.read(4))
                if kind in FATBIN_KINDS and arch:
                    found.add(f"{FATBIN_KINDS[kind]}_{arch}")
                entry += entry_header + payload
            at = end
    return sorted(found, key=lambda name: (int(name.split("_")[1]), name))


def resolve_library(name: str) -> Path:
    """A library named relative to the venv's site-packages (or absolute)."""
    return Path(name) if name.startswith("/") else Path(sysconfig.get_path("purelib")) / name


def main(argv: list[str]) -> None:
    report: dict[str, object] = {}
    if argv[:1] == ["libraries"]:
        report["unresolved"] = unresolved(argv[1:])
    elif argv[:1] == ["content"]:
        report["distributions"] = distributions()
        if len(argv) > 1:
            library = resolve_library(argv[1])
            report["library"] = str(library)
            report["capabilities"] = fatbin_architectures(library) if library.is_file() else None
    else:
        sys.exit(f"usage: content [LIBRARY] | libraries [DISTRIBUTION...], not {argv}")
    print(json.dumps(report))


if __name__ == "__main__":
    main(sys.argv[1:])
