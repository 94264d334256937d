"""The licence a package states, as CycloneDX licence choices: an SPDX id or expression where it is one, else the
name as written. A package that states none (a Debian copyright file not in the machine-readable format, a wheel
without licence metadata) gets none: nothing is guessed.

Debian: the `License:` short names of `/usr/share/doc/<package>/copyright` in the machine-readable format (DEP-5).
Python, first found: `License-Expression` (PEP 639), a one-line `License`, the `License ::` classifiers.
The SPDX list and expression parser are cyclonedx-python-lib's (`cyclonedx.spdx`), the same the validator uses.
"""

from __future__ import annotations

import posixpath
from typing import Any

from cyclonedx.spdx import fixup_id, is_expression
from debian.deb822 import Deb822

from learnerkit_build.scan.layers import ImageIndex
from learnerkit_build.scan.packages import DEB_DOCS, PythonDist

DEP5_FORMAT = "copyright-format/1.0"
NO_LICENCE = frozenset({"", "UNKNOWN", "NONE", "OTHER", "OTHER/PROPRIETARY LICENSE"})
CLASSIFIER_IDS = {
    "MIT License": "MIT",
    "MIT No Attribution License (MIT-0)": "MIT-0",
    "ISC License (ISCL)": "ISC",
    "Mozilla Public License 2.0 (MPL 2.0)": "MPL-2.0",
    "Python Software Foundation License": "PSF-2.0",
    "The Unlicense (Unlicense)": "Unlicense",
    "Zope Public License": "ZPL-2.1",
}
"""Classifiers that name exactly one SPDX licence; the others (`BSD License`, `Apache Software License`, no
version or clause count) are kept by name."""


def licence_choices(names: list[str]) -> list[dict[str, Any]]:
    """CycloneDX `licenses` of the distinct `names`: one expression alone where a name is an SPDX expression and
    the only one (the schema allows an expression only on its own), else one licence each (id or name)."""
    distinct = sorted({name.strip() for name in names} - NO_LICENCE)
    if len(distinct) == 1 and fixup_id(distinct[0]) is None and is_expression(distinct[0]):
        return [{"expression": distinct[0]}]
    choices = []
    for name in distinct:
        spdx = fixup_id(name)
        choices.append({"license": {"id": spdx} if spdx else {"name": name}})
    return choices


def deb_licences(index: ImageIndex, package: str) -> list[dict[str, Any]]:
    folder = f"{DEB_DOCS}{package}"
    entry = index.files.get(folder)
    if entry is not None and entry.kind == "symlink":  # python3.11-venv's docs are python3.11's
        folder = posixpath.normpath(posixpath.join(DEB_DOCS, entry.linkname))
    text = index.text(f"{folder}/copyright")
    if text is None:
        return []
    paragraphs = list(Deb822.iter_paragraphs(text.splitlines()))
    if not paragraphs or DEP5_FORMAT not in paragraphs[0].get("Format", ""):
        return []
    names = [
        str(para["License"]).splitlines()[0].strip()
        for para in paragraphs[1:]
        if "Files" in para and para.get("License")
    ]
    return licence_choices(names)


def python_licences(dist: PythonDist) -> list[dict[str, Any]]:
    if dist.licence_expression:
        return licence_choices([dist.licence_expression])
    one_line = dist.licence if "\n" not in dist.licence and len(dist.licence) <= 100 else ""
    if choices := licence_choices([one_line]):
        return choices
    classified = [c.rsplit("::", 1)[-1].strip() for c in dist.classifiers if c.startswith("License ::")]
    return licence_choices([CLASSIFIER_IDS.get(name, name) for name in classified if name != "OSI Approved"])
