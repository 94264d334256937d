"""The catalog's pure parts: references and names refused naming the field, a card's front matter read back,
lineage queries matching by digest, URI or reference only."""

from __future__ import annotations

import pytest

from learnerkit.scheduler.catalog.card import read_front_matter, render_card, stated_metrics
from learnerkit.scheduler.catalog.errors import CatalogError
from learnerkit.scheduler.catalog.layout import safe_path
from learnerkit.scheduler.catalog.lineage import uses
from learnerkit.scheduler.catalog.names import Reference, repository

DIGEST = "sha256:" + "a" * 64
SHEET = {
    "job": "job-1",
    "status": "COMPLETED",
    "tenant": "team-a",
    "purpose": {"name": "digits", "description": "a digits classifier"},
    "image": {"reference": "learnerkit/pytorch:2.3", "digest": {"sha256": "b" * 64}, "scan": "passed"},
    "model": [{"file": "attempt-1/learner-1/results/model.pt", "sha256": "c" * 64}],
    "data": [{"object": "s3://data/train.csv", "sha256": "d" * 64}],
    "metrics": {"loss": {"final": 0.25, "best": 0.2, "first": 1.0, "points": 10}},
    "evaluations": [
        {
            "round": 1,
            "attempt": 1,
            "verdict": "passed",
            "evaluations": [{"name": "fair", "kind": "fairness", "verdict": "passed", "message": ""}],
        }
    ],
}


def test_references_parse_versions_and_aliases() -> None:
    assert Reference.parse(f"digits@{DIGEST}") == Reference("digits", version=DIGEST)
    assert Reference.parse("digits@production") == Reference("digits", alias="production")
    assert str(Reference.parse("digits")) == "digits"


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("Digits@production", "name 'Digits'"),
        ("digits@sha256:abc", "version 'sha256:abc'"),
        ("digits@aliases", "alias 'aliases'"),
        ("digits@v-1", "alias 'v-1'"),
        ("digits@sha256-" + "a" * 20, "alias 'sha256-a"),
    ],
)
def test_bad_references_are_refused_naming_the_part(text: str, named: str) -> None:
    with pytest.raises(CatalogError, match=named):
        Reference.parse(text)


def test_a_repository_is_the_tenant_then_the_name() -> None:
    assert repository("team-a", "digits") == "team-a/digits"
    with pytest.raises(CatalogError, match="tenant 'Team A'"):
        repository("Team A", "digits")


@pytest.mark.parametrize("path", ["/etc/passwd", "../x", "a/../../x", ""])
def test_a_layer_path_outside_the_folder_is_refused(path: str) -> None:
    with pytest.raises(CatalogError, match="not a relative path"):
        safe_path(path)


def test_a_card_states_the_factsheets_metrics_and_verdicts_in_its_front_matter() -> None:
    card = render_card("digits", SHEET, "pytorch")
    matter = read_front_matter(card, "README.md")
    assert matter["library_name"] == "pytorch" and matter["datasets"] == ["s3://data/train.csv"]
    assert stated_metrics(matter) == [
        {"type": "loss", "name": "final loss", "value": 0.25},
        {"type": "fair-verdict", "name": "round 1 fair (fairness)", "value": "passed"},
    ]
    with pytest.raises(CatalogError, match=r"README\.md: no YAML front matter"):
        read_front_matter("# no front matter\n", "README.md")


def test_lineage_matches_by_digest_uri_or_reference_only() -> None:
    record = {
        "data": [{"uri": "s3://data/train.csv", "sha256": "d" * 64}],
        "evaluationData": [],
        "learnerImage": {"reference": "learnerkit/pytorch:2.3", "sha256": "b" * 64},
        "evaluatorImages": [{"reference": "learnerkit/eval:0.1", "sha256": "e" * 64}],
    }
    assert uses(record, "sha256:" + "d" * 64) == ["data s3://data/train.csv"]
    assert uses(record, "b" * 64) == ["learner image learnerkit/pytorch:2.3"]
    assert uses(record, "learnerkit/eval:0.1") == ["evaluator image learnerkit/eval:0.1"]
    assert uses(record, "f" * 64) == []
