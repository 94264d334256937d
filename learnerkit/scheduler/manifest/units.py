"""Memory sizes as FfDL manifests write them (`1Gb`, `512MiB`, `2GB`, `1024M`), parsed exactly into bytes.

FfDL matched the unit case-insensitively and read GB as 1000 MB and GiB as 1024 MiB; so do we (`1Gb`
is a gigabyte, never a gigabit). It fell back to 512 MB on anything it could not read; we raise instead.
The one-letter forms (`M`, `Gi`) are Kubernetes' spelling of the same units.
"""

from __future__ import annotations

import re
from decimal import Decimal, localcontext

UNITS: dict[str, int] = {
    "k": 10**3,
    "kb": 10**3,
    "m": 10**6,
    "mb": 10**6,
    "g": 10**9,
    "gb": 10**9,
    "t": 10**12,
    "tb": 10**12,
    "ki": 2**10,
    "kib": 2**10,
    "mi": 2**20,
    "mib": 2**20,
    "gi": 2**30,
    "gib": 2**30,
    "ti": 2**40,
    "tib": 2**40,
}

_SIZE_RE = re.compile(r"^\s*(?P<number>[0-9]{1,18}(?:\.[0-9]{1,18})?)\s*(?P<unit>[A-Za-z]*)\s*$")
UNIT_HELP = "a number and a unit: MB, GB, TB (powers of 1000) or MiB, GiB, TiB (powers of 1024), e.g. 1Gb, 512MiB"


def parse_size(text: str) -> int:
    """Bytes in `text`; raises ValueError saying what is wrong (the caller adds the field)."""
    match = _SIZE_RE.match(text)
    if not match:
        raise ValueError(f"{text!r} is not a size: expected {UNIT_HELP}")
    unit = match["unit"].lower()
    if not unit:
        raise ValueError(f"{text!r} has no unit: expected {UNIT_HELP}")
    factor = UNITS.get(unit)
    if factor is None:
        raise ValueError(f"{text!r}: unknown unit {match['unit']!r}; expected {UNIT_HELP}")
    with localcontext(prec=60):  # 18 + 18 digits times 2**40 stays exact
        exact = Decimal(match["number"]) * factor
    if exact != exact.to_integral_value():
        raise ValueError(f"{text!r} is not a whole number of bytes")
    if exact <= 0:
        raise ValueError(f"{text!r} must be more than 0 bytes")
    return int(exact)


def format_size(size: int) -> str:
    """The largest binary unit that divides `size` exactly, else decimal, else bytes: `1GiB`, `1500MB`."""
    for unit, factor in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("TB", 10**12), ("GB", 10**9)):
        if size % factor == 0:
            return f"{size // factor}{unit}"
    for unit, factor in (("MB", 10**6), ("KiB", 2**10), ("kB", 10**3)):
        if size % factor == 0:
            return f"{size // factor}{unit}"
    return f"{size}B"
