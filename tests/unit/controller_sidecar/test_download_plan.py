"""Key safety, resume state and retry logic of downloads, without a server."""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, ReadTimeoutError

from controller_sidecar.download import ResumeState, plan_download, remove_partials
from controller_sidecar.errors import PermanentError, TransferError, TransientError, UnsafePathError
from controller_sidecar.retry import Backoff, retry_sync
from controller_sidecar.s3objects import HashedObject
from controller_sidecar.s3store import PARTIAL_SUFFIX, RemoteObject, file_etag, translate_error
from controller_sidecar.settings import S3Location

LOCATION = S3Location("data", "mnist/")


def obj(key: str, size: int = 1, etag: str = "e") -> RemoteObject:
    return RemoteObject(key, size, etag)


def test_plan_maps_keys_below_the_prefix(tmp_path: Path) -> None:
    planned = plan_download([obj("mnist/train/a.bin"), obj("mnist/b.bin"), obj("mnist/dir/", 0)], LOCATION, tmp_path)
    assert [p.path for p in planned] == [tmp_path / "train" / "a.bin", tmp_path / "b.bin"]


@pytest.mark.parametrize("key", ["mnist/../etc/passwd", "mnist/a/../../x", "mnist//abs", "mnist/a//b", "mnist/./a"])
def test_plan_refuses_keys_that_escape(tmp_path: Path, key: str) -> None:
    with pytest.raises(UnsafePathError, match=f"s3://data/{key}"):
        plan_download([obj("mnist/fine.bin"), obj(key)], LOCATION, tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_plan_refuses_a_path_through_an_existing_symlink(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "sub").symlink_to(outside)
    with pytest.raises(UnsafePathError, match="symlink"):
        plan_download([obj("mnist/sub/a.bin")], LOCATION, dest)


def test_plan_refuses_a_nonempty_key_ending_in_a_slash(tmp_path: Path) -> None:
    with pytest.raises(UnsafePathError):
        plan_download([obj("mnist/dir/", 5)], LOCATION, tmp_path)


def test_resume_state_round_trip_and_checks(tmp_path: Path) -> None:
    state_file = tmp_path / "control" / "download.json"
    done = tmp_path / "a.bin"
    done.write_bytes(b"abc")
    state = ResumeState.load(state_file, LOCATION)
    state.record(HashedObject("mnist/a.bin", 3, "etag-a", "ab" * 32))
    state.record(HashedObject("mnist/gone.bin", 3, "etag-g", "cd" * 32))
    state.save()
    assert [p.name for p in state_file.parent.iterdir()] == ["download.json"]

    again = ResumeState.load(state_file, LOCATION)
    assert again.is_complete(obj("mnist/a.bin", 3, "etag-a"), done)
    assert again.digests["mnist/a.bin"] == "ab" * 32
    assert not again.is_complete(obj("mnist/a.bin", 3, "etag-changed"), done)
    assert not again.is_complete(obj("mnist/gone.bin", 3, "etag-g"), tmp_path / "gone.bin")
    done.write_bytes(b"ab")  # truncated on disk
    assert not again.is_complete(obj("mnist/a.bin", 3, "etag-a"), done)
    assert not ResumeState.load(state_file, S3Location("data", "other/")).done
    without_digests = json.loads(state_file.read_text())
    del without_digests["objects"]["mnist/a.bin"]["sha256"]
    state_file.write_text(json.dumps(without_digests))
    assert "mnist/a.bin" not in ResumeState.load(state_file, LOCATION).done, "fetched again: its digest is unknown"


def test_resume_state_ignores_a_damaged_file(tmp_path: Path) -> None:
    state_file = tmp_path / "download.json"
    state_file.write_text("{not json")
    assert ResumeState.load(state_file, LOCATION).done == {}
    state_file.write_text(json.dumps({"version": 1, "source": str(LOCATION), "objects": {"k": {"size": "x"}}}))
    assert ResumeState.load(state_file, LOCATION).done == {}


def test_remove_partials(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / f".a.bin.x1{PARTIAL_SUFFIX}").write_bytes(b"half")
    (tmp_path / "sub" / "a.bin").write_bytes(b"whole")
    assert remove_partials(tmp_path) == 1
    assert [p.name for p in (tmp_path / "sub").iterdir()] == ["a.bin"]


def test_file_etag_single_and_multipart(tmp_path: Path) -> None:
    data = random.Random(1).randbytes(2500)
    path = tmp_path / "f"
    path.write_bytes(data)
    assert file_etag(path, None) == hashlib.md5(data).hexdigest()
    parts = [data[i : i + 1000] for i in range(0, 2500, 1000)]
    combined = hashlib.md5(b"".join(hashlib.md5(p).digest() for p in parts)).hexdigest()
    assert file_etag(path, 1000) == f"{combined}-3"


def client_error(status: int, code: str, headers: dict[str, str] | None = None) -> ClientError:
    response = {
        "Error": {"Code": code, "Message": "m"},
        "ResponseMetadata": {"HTTPStatusCode": status, "HTTPHeaders": headers or {}},
    }
    return ClientError(response, "GetObject")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("error", "kind", "delay"),
    [
        (client_error(503, "SlowDown", {"retry-after": "3"}), TransientError, 3.0),
        (client_error(500, "InternalError"), TransientError, None),
        (client_error(400, "RequestTimeout"), TransientError, None),
        (client_error(404, "NoSuchKey"), TransferError, None),
        (client_error(404, "NoSuchBucket"), TransferError, None),
        (client_error(403, "AccessDenied"), TransferError, None),
        (EndpointConnectionError(endpoint_url="http://127.0.0.1:1"), TransientError, None),
        (ReadTimeoutError(endpoint_url="http://127.0.0.1:1"), TransientError, None),
    ],
)
def test_translate_error(error: Exception, kind: type[Exception], delay: float | None) -> None:
    translated = translate_error(error, "s3://b/k")  # type: ignore[arg-type]
    assert type(translated) is kind
    assert str(translated).startswith("s3://b/k: ")
    assert getattr(translated, "delay_s", None) == delay
    assert isinstance(translated, TransientError | PermanentError)


def test_retry_sync_retries_transient_errors_in_zero_wall_time() -> None:
    slept: list[float] = []
    outcomes: list[Exception | str] = [TransientError("a"), TransientError("b", delay_s=2.0), "done"]

    def operation() -> str:
        outcome = outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    assert retry_sync(operation, Backoff(initial_s=0.1), what="op", sleep=slept.append) == "done"
    assert len(slept) == 2
    assert slept[0] <= 0.1
    assert slept[1] >= 2.0


def test_retry_sync_gives_up_and_lets_permanent_errors_through() -> None:
    calls = 0

    def failing() -> None:
        nonlocal calls
        calls += 1
        raise TransientError("down")

    with pytest.raises(TransientError):
        retry_sync(failing, Backoff(max_attempts=3), what="op", sleep=lambda _s: None)
    assert calls == 3

    def permanent() -> None:
        raise TransferError("gone")

    with pytest.raises(TransferError):
        retry_sync(permanent, Backoff(), what="op", sleep=lambda _s: pytest.fail("must not wait"))


@pytest.mark.parametrize(
    ("keys", "named", "message"),
    [
        (["mnist/a", "mnist/a/b"], "mnist/a/b", "which is the file of s3://data/mnist/a"),
        (["mnist/x/y/z", "mnist/x/y"], "mnist/x/y/z", "which is the file of s3://data/mnist/x/y"),
        (["mnist/ok", "mnist/" + "n" * 256], "mnist/nnnn", "longer than 255 bytes"),
        (["mnist/x\x00y"], "mnist/x", "NUL"),
    ],
)
def test_plan_refuses_keys_that_cannot_be_placed(tmp_path: Path, keys: list[str], named: str, message: str) -> None:
    with pytest.raises(UnsafePathError, match=message) as caught:
        plan_download([obj(key) for key in keys], LOCATION, tmp_path)
    assert f"s3://data/{named}" in str(caught.value)
    assert list(tmp_path.iterdir()) == []


def test_plan_takes_a_name_of_255_bytes(tmp_path: Path) -> None:
    key = "mnist/" + "é" * 127 + "n"
    assert [p.path.name for p in plan_download([obj(key)], LOCATION, tmp_path)] == ["é" * 127 + "n"]
