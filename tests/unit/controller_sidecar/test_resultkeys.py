"""Result names to object keys: reversible, collision-free, bounded (issue 27: D4, D14, D15)."""

from __future__ import annotations

import os
import random

import pytest

from controller_sidecar.outcome import Outcome
from controller_sidecar.outputs import SHOWN_REFUSALS, StoredTree
from controller_sidecar.resultkeys import MAX_KEY_BYTES, ResultRefused, encoded_name, original_name, result_key
from controller_sidecar.status import ErrorCode, Phase


@pytest.mark.parametrize(
    ("name", "key"),
    [
        (b"model.onnx", "model.onnx"),
        (b"a/b c.txt", "a/b c.txt"),
        ("ünï.txt".encode(), "ünï.txt"),
        (b"caf\xe9.txt", "caf%E9.txt"),
        (b"x\\y.txt", "x%5Cy.txt"),
        (b"line\nbreak\t.txt", "line%0Abreak%09.txt"),
        (b"100%.txt", "100%25.txt"),
        (b"\xed\xa0\x80surrogate", "%ED%A0%80surrogate"),
    ],
)
def test_names_are_percent_encoded_only_where_they_must_be(name: bytes, key: str) -> None:
    assert encoded_name(os.fsdecode(name)) == key
    assert original_name(key) == name


def test_any_bytes_round_trip_and_no_two_names_share_a_key() -> None:
    rng = random.Random(27)
    alphabet = [b"a", b"/", b"\\", b"%", b"\n", b"\xe9", b"\xc3\xa9", b"%2F", b"%5C", b"\xff"]
    names = {b"".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 8))) for _ in range(20_000)}
    keys = {encoded_name(os.fsdecode(name)): name for name in names}
    assert len(keys) == len(names)
    assert all(original_name(key) == name for key, name in keys.items())
    assert all(key.isprintable() for key in keys)


def test_a_key_longer_than_s3_allows_is_refused_by_name() -> None:
    assert len(result_key("p/", "a" * (MAX_KEY_BYTES - 2)).encode()) == MAX_KEY_BYTES
    name = "d" * 1_318
    with pytest.raises(ResultRefused) as refused:
        result_key("p/", name)
    assert refused.value.name == name
    assert str(refused.value) == f"'{'d' * 60}'... (1,318 characters): its key is 1,320 bytes; S3 allows 1,024"


def test_a_completed_job_with_refused_results_fails_naming_them_briefly() -> None:
    tree = StoredTree(size=10, refused=[ResultRefused(f"r{i}" * 300, "too long") for i in range(8)])
    outcome = tree.applied_to(Outcome(Phase.COMPLETED, ErrorCode.NONE, "completed", 0))
    assert (outcome.phase, outcome.error_code, outcome.exit_code) == (Phase.FAILED, ErrorCode.UPLOAD_FAILED, 0)
    assert outcome.message.startswith("8 result(s) not stored: 'r0r0")
    assert outcome.message.endswith(f"; and {8 - SHOWN_REFUSALS} more (the sidecar's log names each)")
    assert len(outcome.message) < 700


def test_a_halted_job_keeps_its_phase_and_says_which_results_were_not_stored() -> None:
    tree = StoredTree(refused=[ResultRefused("a.bin", "the sidecar may not read it")])
    outcome = tree.applied_to(Outcome(Phase.HALTED, ErrorCode.NONE, "halted (halted, exit code 0)", 0))
    assert outcome.phase is Phase.HALTED
    note = "1 result(s) not stored: 'a.bin': the sidecar may not read it"
    assert outcome.message == f"halted (halted, exit code 0); {note}"


def test_nothing_refused_leaves_the_outcome_alone() -> None:
    done = Outcome(Phase.COMPLETED, ErrorCode.NONE, "completed", 0)
    assert StoredTree(size=3).applied_to(done) is done
