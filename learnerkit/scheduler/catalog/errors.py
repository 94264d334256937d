"""What the catalog refuses, each naming the model, version, alias or file at fault."""

from __future__ import annotations

from learnerkit.common.errors import LearnerkitError


class CatalogError(LearnerkitError):
    """A catalog request that cannot be done as asked (bad name, unknown version or alias, a folder not a job's)."""


class StoreError(CatalogError):
    """The catalog's registry refused a request, cannot be reached, or returned bytes that are not their digest."""


class NotFoundError(CatalogError):
    """No such model, version or alias for this tenant."""


class RefusedError(CatalogError):
    """An alias move refused: the version does not prove every check; ``failed`` names each."""

    def __init__(self, message: str, failed: list[str]) -> None:
        super().__init__(message)
        self.failed = failed


class ConflictError(CatalogError):
    """The alias log changed between a move's read and its write: another move ran at once; nothing appended."""
