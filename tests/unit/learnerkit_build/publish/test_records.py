"""The publish record: written atomically by image ID, read back whole, and the publish state of a reference
(published, not published, rebuilt since) from the records alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from learnerkit_build.errors import BuildToolError
from learnerkit_build.publish import records
from learnerkit_build.publish.records import PublishRecord, RecordedAttestation, publish_state
from learnerkit_build.state import id_file_name

REFERENCE = "learnerkit/pytorch:2.13-cpu-py3.12"
OLD_ID, NEW_ID = "sha256:" + "1" * 64, "sha256:" + "2" * 64
DIGEST = "sha256:" + "d" * 64


def record(image_id: str, when: str = "2026-11-29T05:00:00+00:00", reference: str = REFERENCE) -> PublishRecord:
    return PublishRecord(
        image_id,
        reference,
        f"127.0.0.1:5000/{reference}",
        DIGEST,
        when,
        "tag-schema",
        "sha256:" + "5" * 64,
        "0a1b2c3d",
        (RecordedAttestation("sbom", "https://cyclonedx.org/bom", "sha256:" + "e" * 64),),
    )


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LEARNERKIT_HOME", str(tmp_path))
    return tmp_path


def test_a_record_is_kept_by_image_id_and_read_back_whole(home: Path) -> None:
    written = records.record_publish(record(OLD_ID))
    assert written == home / "image-publishes" / f"{id_file_name(OLD_ID)}.json"
    assert written.stat().st_mode & 0o777 == 0o600
    assert json.loads(written.read_text())["digest"] == DIGEST
    assert records.load_publish_record(OLD_ID) == record(OLD_ID)
    assert record(OLD_ID).pinned == f"127.0.0.1:5000/{REFERENCE}@{DIGEST}"
    assert records.load_publish_record(NEW_ID) is None


def test_a_record_is_written_atomically(monkeypatch: pytest.MonkeyPatch, home: Path) -> None:
    """The record goes through the atomic writer: a write that fails leaves the earlier record as it was."""
    records.record_publish(record(OLD_ID, when="2026-11-28T00:00:00+00:00"))

    def broken(path: Path, data: bytes, mode: int = 0o600) -> None:
        raise OSError("no space left on device")

    monkeypatch.setattr("learnerkit_build.state.write_atomic", broken)
    with pytest.raises(OSError):
        records.record_publish(record(OLD_ID))
    loaded = records.load_publish_record(OLD_ID)
    assert loaded is not None and loaded.published_at == "2026-11-28T00:00:00+00:00"
    assert [p.name for p in (home / "image-publishes").iterdir()] == [f"{id_file_name(OLD_ID)}.json"]


def test_the_publish_state_of_a_reference() -> None:
    assert publish_state(REFERENCE, NEW_ID) == records.PublishState("not published", None)
    records.record_publish(record(OLD_ID))
    records.record_publish(record("sha256:" + "3" * 64, reference="learnerkit/jax:0.10-cpu-py3.11"))
    assert publish_state(REFERENCE, OLD_ID) == records.PublishState("published", record(OLD_ID))
    assert publish_state(REFERENCE, NEW_ID) == records.PublishState("rebuilt since", record(OLD_ID))
    assert publish_state(REFERENCE, None) == records.PublishState("published", record(OLD_ID))
    records.record_publish(record(NEW_ID, when="2026-11-29T06:00:00+00:00"))
    assert publish_state(REFERENCE, NEW_ID).state == "published"
    assert records.last_publish_of(REFERENCE) == record(NEW_ID, when="2026-11-29T06:00:00+00:00")


def test_a_record_that_is_not_one_is_refused_naming_its_file(home: Path) -> None:
    path = home / "image-publishes" / f"{id_file_name(OLD_ID)}.json"
    path.parent.mkdir()
    path.write_text(json.dumps({"image_id": OLD_ID}))
    with pytest.raises(BuildToolError, match=f"{path}: not a publish record"):
        records.load_publish_record(OLD_ID)
