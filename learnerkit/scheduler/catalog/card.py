"""The model card: a Hugging Face README.md (YAML front matter, then prose) rendered from the factsheet, which is
itself rendered from the signed statements; a card is never edited by hand, so verifying renders it again."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml

from learnerkit.scheduler.catalog.errors import CatalogError

CARD_FILE = "provenance/README.md"
"""Where a version's card lies in its folder: beside the documents the model signature ignores."""


def front_matter(name: str, sheet: Mapping[str, Any], framework: str, license_: str) -> dict[str, Any]:
    metrics = [
        {"type": metric, "name": f"final {metric}", "value": figures["final"]}
        for metric, figures in sheet["metrics"].items()
    ]
    evaluations = [
        {"type": f"{e['name']}-verdict", "name": f"round {r['round']} {e['name']} ({e['kind']})", "value": e["verdict"]}
        for r in sheet["evaluations"]
        for e in r["evaluations"]
    ]
    return {
        "library_name": framework,
        "license": license_,
        "tags": ["learnerkit", "attested"],
        "datasets": [d["object"] for d in sheet["data"]],
        "model-index": [
            {
                "name": name,
                "results": [
                    {
                        "task": {"type": "other", "name": sheet["purpose"].get("name") or name},
                        "dataset": {"type": "training", "name": ", ".join(d["object"] for d in sheet["data"]) or "-"},
                        "metrics": metrics + evaluations,
                    }
                ],
            }
        ],
    }


def render_card(name: str, sheet: Mapping[str, Any], framework: str, license_: str = "other") -> str:
    head = yaml.safe_dump(front_matter(name, sheet, framework, license_), sort_keys=False, allow_unicode=True)
    purpose = sheet["purpose"]
    body = [
        f"# {name}",
        "",
        f"{purpose.get('description') or purpose.get('name') or 'A model trained by learnerkit.'}",
        "",
        f"Trained by job `{sheet['job']}` ({sheet['status']}) for tenant `{sheet['tenant']}` on image "
        f"`{sheet['image']['reference']}` (scan: {sheet['image']['scan']}).",
        "",
        "Every figure here is rendered from the platform's signed statements (provenance and evaluation rounds);",
        "`learnerkit model verify` renders it again and refuses a card that differs.",
        "",
        "## Files",
        "",
        *(f"- `{m['file']}` sha256 `{m['sha256']}`" for m in sheet["model"]),
        "",
    ]
    return f"---\n{head}---\n\n" + "\n".join(body)


def read_front_matter(text: str, where: str) -> dict[str, Any]:
    """The YAML front matter of a README.md; CatalogError naming ``where`` when it has none or it is not YAML."""
    if not text.startswith("---\n") or "\n---\n" not in text[3:]:
        raise CatalogError(f"{where}: no YAML front matter (a model card starts with a --- line)")
    try:
        parsed = yaml.safe_load(text[4 : text.index("\n---\n", 3)])
    except yaml.YAMLError as e:
        raise CatalogError(f"{where}: the front matter is not YAML: {e}") from e
    if not isinstance(parsed, dict):
        raise CatalogError(f"{where}: the front matter is not a mapping")
    return parsed


def stated_metrics(matter: Mapping[str, Any]) -> list[Any]:
    """The metrics a card's front matter states (model-index results)."""
    return [
        m
        for entry in matter.get("model-index") or []
        for r in entry.get("results") or []
        for m in r.get("metrics") or []
    ]
