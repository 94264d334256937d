"""Which registry an image reference names, read as the engine reads it."""

from __future__ import annotations

import pytest

from learnerkit.scheduler.client.imagedigest import split_reference


@pytest.mark.parametrize(
    ("reference", "expected"),
    [
        ("learnerkit/pytorch:2.3-cpu-py3.11", (None, "learnerkit/pytorch", "2.3-cpu-py3.11")),
        ("ubuntu", (None, "ubuntu", "latest")),
        ("127.0.0.1:5000/learnerkit/pytorch:2.3", ("127.0.0.1:5000", "learnerkit/pytorch", "2.3")),
        ("localhost/team/model", ("localhost", "team/model", "latest")),
        ("registry.local/a/b:1@sha256:" + "ab" * 32, ("registry.local", "a/b", "sha256:" + "ab" * 32)),
        ("registry.local:443/a", ("registry.local:443", "a", "latest")),
    ],
)
def test_a_reference_splits_into_registry_repository_and_tag(
    reference: str, expected: tuple[str | None, str, str]
) -> None:
    assert split_reference(reference) == expected
