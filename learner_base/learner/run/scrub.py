"""Remove platform variables (object-store and etcd credentials, secrets) from the command's environment.

Names are matched case-insensitively against shell-style globs. Everything not matched is kept: the job's
directories, ``JOB_ID``, ``LEARNER_ID``, ``NUM_LEARNERS``, ``GPU_COUNT`` and the distributed-training
variables (``MASTER_ADDR``, ``RANK``, ``TF_CONFIG``, ``DMLC_*``...) are for the learner.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from fnmatch import fnmatchcase

SCRUB_PATTERNS: tuple[str, ...] = (
    "AWS_*",
    "S3_*",
    "ETCD_*",
    "LEARNERKIT_*",
    "*_SECRET*",
    "*_PASSWORD*",
    "*_TOKEN*",
    "*ACCESS_KEY*",
    "*_CREDENTIALS*",
    "LEARNER_SCRUB",
)
"""Always removed. ``LEARNER_SCRUB`` adds comma-separated names or globs to these, and is removed itself."""


def scrubbed(name: str, patterns: Iterable[str]) -> bool:
    """True when ``name`` matches one of ``patterns`` (case-insensitive globs)."""
    upper = name.upper()
    return any(fnmatchcase(upper, pattern.upper()) for pattern in patterns)


def scrub_env(environ: Mapping[str, str], extra: Iterable[str] = ()) -> dict[str, str]:
    """A copy of ``environ`` without the variables that match :data:`SCRUB_PATTERNS` or ``extra``."""
    patterns = (*SCRUB_PATTERNS, *extra)
    return {name: value for name, value in environ.items() if not scrubbed(name, patterns)}
