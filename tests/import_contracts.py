"""An import-linter contract type for code that ships inside an image: it may import only what ships with it.

``type = allowlist`` names the source packages and everything they may import beside themselves: the standard
library always, the listed third-party distributions' top-level modules, and the listed project modules. Any
other import, direct, names the importing module and line. ``.importlinter`` registers it as
``allowlist: tests.import_contracts.AllowlistContract``.
"""

from __future__ import annotations

import sys
from typing import Any

import grimp
from importlinter import Contract, ContractCheck, fields, output


class AllowlistContract(Contract):
    type_name = "allowlist"

    source_modules = fields.ListField(subfield=fields.ModuleField())
    allowed_external = fields.ListField(subfield=fields.StringField(), required=False)
    """Top-level names of third-party packages (``boto3``), beside the standard library."""
    allowed_modules = fields.ListField(subfield=fields.ModuleField(), required=False)
    """Project modules the source may import (exactly these modules, not their packages)."""

    def check(self, graph: grimp.ImportGraph, verbose: bool) -> ContractCheck:
        sources: set[str] = set()
        for module in self.source_modules:  # type: ignore[attr-defined]
            sources |= {module.name, *graph.find_descendants(module.name)}
        allowed_modules = {module.name for module in self.allowed_modules or []}  # type: ignore[attr-defined]
        allowed_external = set(self.allowed_external or []) | set(sys.stdlib_module_names)  # type: ignore[attr-defined]
        broken: list[dict[str, Any]] = []
        for importer in sorted(sources):
            for imported in sorted(graph.find_modules_directly_imported_by(importer)):
                if imported in sources or imported in allowed_modules:
                    continue
                if graph.is_module_squashed(imported) and imported.split(".")[0] in allowed_external:
                    continue
                details = graph.get_import_details(importer=importer, imported=imported)
                lines = tuple(detail["line_number"] for detail in details)
                broken.append({"importer": importer, "imported": imported, "lines": lines})
        return ContractCheck(kept=not broken, metadata={"broken": broken})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for item in check.metadata["broken"]:
            lines = ", ".join(f"l.{number}" for number in item["lines"])
            output.print_error(f"{item['importer']} imports {item['imported']} ({lines}): not shipped with it")
            output.new_line()
