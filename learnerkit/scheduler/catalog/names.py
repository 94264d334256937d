"""Model names and version references, and the registry repository a tenant's model lives in."""

from __future__ import annotations

import re
from dataclasses import dataclass

from learnerkit.scheduler.catalog.errors import CatalogError
from learnerkit.scheduler.manifest.catalogfield import ALIAS_HELP, MODEL_NAME_HELP, alias_ok, model_name_ok

_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


def check_name(name: str, what: str = "name") -> str:
    if not model_name_ok(name):
        raise CatalogError(f"{what} {name!r}: {MODEL_NAME_HELP}")
    return name


def check_alias(alias: str) -> str:
    if not alias_ok(alias):
        raise CatalogError(f"alias {alias!r}: {ALIAS_HELP}")
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

    def pinned(self) -> str:
        """The version or alias after the ``@``; CatalogError for a bare name, which names neither."""
        if self.version is None and self.alias is None:
            raise CatalogError(f"{self}: name a version (NAME@sha256:...) or an alias (NAME@ALIAS)")
        return self.version or str(self.alias)

    def __str__(self) -> str:
        return self.name + (f"@{self.version}" if self.version else f"@{self.alias}" if self.alias else "")
