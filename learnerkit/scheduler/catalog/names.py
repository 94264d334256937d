"""Model names and version references, and the registry repository a tenant's model lives in."""

from __future__ import annotations

import re
from dataclasses import dataclass

from learnerkit.scheduler.catalog.errors import CatalogError

_NAME = re.compile(r"^[a-z0-9]+(?:[._-][a-z0-9]+)*$")
_ALIAS = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
RESERVED_ALIASES = frozenset({"aliases", "latest"})


def check_name(name: str, what: str = "name") -> str:
    if len(name) > 100 or not _NAME.match(name):
        raise CatalogError(f"{what} {name!r}: lower-case letters and digits, separated by one of . _ - (at most 100)")
    return name


def check_alias(alias: str) -> str:
    if not _ALIAS.match(alias) or alias in RESERVED_ALIASES or alias.startswith(("v-", "sha256-")):
        raise CatalogError(
            f"alias {alias!r}: a lower-case letter, then letters, digits, _ or - (at most 63); not 'v-...' or "
            f"'sha256-...' (the catalog's own tags), {', '.join(sorted(RESERVED_ALIASES))}"
        )
    return alias


def check_digest(version: str) -> str:
    if not _DIGEST.match(version):
        raise CatalogError(f"version {version!r}: a version is its manifest digest, sha256:<64 hex digits>")
    return version


def repository(tenant: str, name: str) -> str:
    return f"{check_name(tenant, 'tenant')}/{check_name(name)}"


@dataclass(frozen=True)
class Reference:
    """``NAME``, ``NAME@sha256:...`` (a version) or ``NAME@ALIAS``."""

    name: str
    version: str | None = None
    alias: str | None = None

    @classmethod
    def parse(cls, text: str) -> Reference:
        name, at, rest = text.partition("@")
        check_name(name)
        if not at:
            return cls(name)
        if rest.startswith("sha256:"):
            return cls(name, version=check_digest(rest))
        return cls(name, alias=check_alias(rest))

    def __str__(self) -> str:
        return self.name + (f"@{self.version}" if self.version else f"@{self.alias}" if self.alias else "")
