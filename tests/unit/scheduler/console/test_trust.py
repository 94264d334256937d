"""The trust panel's server-side check and its view data, over a job the platform's real writers signed (in
memory) served by a small stand-in of the facade's file methods."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

import pytest

from controller_sidecar.s3objects import RemoteObject
from learnerkit.common.signing import load_public_key, public_key_path
from learnerkit.scheduler.console import trust_views
from learnerkit.scheduler.console.trust_checks import REVERIFY_S, TrustCheck, TrustChecker
from learnerkit.scheduler.errors import UnknownFileError
from learnerkit.scheduler.facade import FileStream, StoredFile
from learnerkit.scheduler.outputs.files import kind_of
from learnerkit.scheduler.provenance.report import Check, State
from learnerkit.scheduler.provenance.verify import ImageAnswer
from tests.unit.scheduler.provenance.jobfolder import EVAL_DATA, JOB, PREFIX, MemoryStore, evaluated_round, finished_job

RESULT = "attempt-1/learner-1/results/model.bin"


class Files:
    """The facade's file methods over a MemoryStore, ETags the MD5 of the bytes as S3 gives them."""

    def __init__(self, store: MemoryStore) -> None:
        self.store = store
        self.opened: list[str] = []

    async def outputs(self, tenant: str, job_id: str, *, what: str = "all") -> list[StoredFile]:
        found = []
        for key, data in sorted(self.store.objects.items()):
            path = key.removeprefix(PREFIX)
            if (kind := kind_of(path)) is not None:
                found.append(StoredFile(path, len(data), kind, hashlib.md5(data).hexdigest()))
        return found

    async def open_output(self, tenant: str, job_id: str, path: str) -> FileStream:
        self.opened.append(path)
        data = self.store.objects.get(PREFIX + path)
        if data is None:
            raise UnknownFileError(path)
        return FileStream(iter([data]), len(data))

    async def open_evaluation_data(self, tenant: str, job_id: str, uri: str) -> FileStream:
        return FileStream(iter([EVAL_DATA]), len(EVAL_DATA))


def _no_engine(reference: str) -> ImageAnswer:
    return ImageAnswer("no engine")


@pytest.fixture
def job(tmp_path: Path) -> tuple[Files, TrustChecker]:
    store, key = finished_job(tmp_path)
    evaluated_round(store, key, 1)
    files = Files(store)
    keys = [load_public_key(public_key_path(key))]
    checker = TrustChecker(files, keys, recheck_s=0, images=_no_engine)  # type: ignore[arg-type]
    return files, checker


def _check(checker: TrustChecker) -> TrustCheck:
    return asyncio.run(checker.check("team-a", JOB))


def test_a_check_is_job_verifys_and_fetches_only_what_changed(job: tuple[Files, TrustChecker]) -> None:
    files, checker = job
    first = _check(checker)
    assert first.report is not None and first.report.ok, first.report
    assert first.fetched == first.files == len(files.opened) > 3
    again = _check(checker)
    assert again.fetched == 0 and again.report is first.report  # nothing changed: nothing fetched or hashed
    stored = files.store.objects[PREFIX + RESULT]
    files.store.objects[PREFIX + RESULT] = bytes([stored[0] ^ 1]) + stored[1:]
    changed = _check(checker)
    assert changed.fetched == 1 and files.opened[-1] == RESULT
    assert first.hashed > changed.hashed == 1  # only the file fetched anew is hashed again
    assert changed.report is not None
    assert [(c.item, c.state) for c in changed.report.failed] == [(f"result {RESULT}", State.CHANGED)]
    del files.store.objects[PREFIX + RESULT]
    gone = _check(checker)
    assert gone.report is not None
    assert [(c.item, c.state) for c in gone.report.failed] == [(f"result {RESULT}", State.MISSING)]


def test_a_check_within_recheck_s_is_the_last_one(job: tuple[Files, TrustChecker]) -> None:
    files, checker = job
    checker.recheck_s = 3600
    first = _check(checker)
    del files.store.objects[PREFIX + RESULT]
    assert _check(checker) is first


def test_a_job_without_provenance_says_so(tmp_path: Path) -> None:
    store, key = finished_job(tmp_path)
    for name in [k for k in store.objects if k.startswith(PREFIX + "provenance/")]:
        del store.objects[name]
    checker = TrustChecker(Files(store), [load_public_key(public_key_path(key))], images=_no_engine)  # type: ignore[arg-type]
    found = _check(checker)
    assert found.report is None and "no signed provenance" in found.problem


def test_the_view_names_each_problem_in_words_and_groups_the_checks() -> None:
    checks = [
        Check("provenance signature", State.OK, "signed by k"),
        Check("completeness", State.INCOMPLETE, "the platform holds no record of attempt 2 learner 1: lost"),
        *(Check(f"result r{n}.bin", State.OK) for n in range(30)),
        Check("result r30.bin", State.CHANGED, "sha256 aa, the provenance says bb"),
        Check("model signature provenance/model.sig", State.OK),
        Check("file attempt-1/learner-1/checkpoints/a", State.UNSIGNED, "no statement names it"),
        Check("file attempt-1/learner-1/checkpoints/b", State.UNSIGNED, "no statement names it"),
    ]
    assert [(p.item, p.words) for p in trust_views.problems(checks)] == [
        ("completeness", "incomplete: the statement does not cover every learner"),
        ("result r30.bin", "changed since it was signed"),
    ]
    verified, line = trust_views.verdict_line(checks, "k")
    assert not verified and line == "Not verified: 1 incomplete, 1 changed (key k)."
    found = {s.key: s for s in trust_views.sections(checks)}
    assert list(found) == ["statement", "signature", "files", "unsigned"]
    assert [p.item for p in found["files"].problems] == ["result r30.bin"]
    assert len(found["files"].ok) == 30 and found["files"].ok_folded
    assert [o.item for o in found["unsigned"].others] == ["2 files in attempt-1/learner-1/checkpoints/"]
    assert trust_views.verdict_line(checks[:1], "k") == (True, "Verified: every signed item matches (key k).")


def test_rounds_carry_the_reports_curves_and_the_thresholds(job: tuple[Files, TrustChecker], tmp_path: Path) -> None:
    files, checker = job
    name = next(k for k in files.store.objects if k.endswith("robust.json"))
    found = _check(checker)
    assert found.folder is not None
    report = found.folder / name.removeprefix(PREFIX)
    report.write_text(
        '{"name": "robust", "kind": "robustness", "verdict": "passed", "metrics": {"clean_accuracy": 0.9, '
        '"curve": {"pgd": [{"epsilon": 0.1, "accuracy": 0.8}, {"epsilon": 0.2, "accuracy": 0.5}]}}}'
    )
    (round_,) = trust_views.rounds(found.folder, checker.keys)
    (evaluation,) = round_.evaluations
    assert (round_.number, round_.verdict, evaluation.name, evaluation.verdict) == (1, "passed", "robust", "passed")
    assert evaluation.curve == (("pgd", ((0.1, 0.8), (0.2, 0.5))),) and evaluation.clean_accuracy == 0.9
    assert trust_views.polyline(evaluation.curve[0][1]) == "4.0,14.4 156.0,30.0"


def test_thresholds_read_as_words() -> None:
    robustness = {"thresholds": [{"attack": "pgd", "epsilon": 0.1, "min_accuracy": 0.6}]}
    fairness = {"thresholds": {"disparate_impact": {"min": 0.8, "max": 1.25}}}
    assert trust_views._thresholds(robustness) == (("pgd at epsilon 0.1", "accuracy >= 0.6"),)
    assert trust_views._thresholds(fairness) == (("disparate_impact", "<= 1.25 and >= 0.8"),)


def test_remote_objects_carry_their_etag_into_the_listing() -> None:
    from learnerkit.scheduler.outputs.files import list_outputs

    class Store:
        def list(self, location: object) -> list[RemoteObject]:
            return [RemoteObject(f"{PREFIX}{RESULT}", 3, "abc")]

        def read_range(self, bucket: str, key: str, first: int, last: int) -> object:
            raise AssertionError

    from controller_sidecar.settings import S3Location

    assert list_outputs(Store(), S3Location("b", PREFIX)) == [StoredFile(RESULT, 3, "results", "abc")]  # type: ignore[arg-type]


def test_with_nothing_changed_the_copy_is_verified_again_after_reverify_s(job: tuple[Files, TrustChecker]) -> None:
    _files, checker = job
    now = [0.0]
    checker.clock = lambda: now[0]
    first = _check(checker)
    now[0] += REVERIFY_S - 1
    assert _check(checker).report is first.report
    now[0] += 2
    again = _check(checker)
    assert again.report is not first.report and again.fetched == 0
