"""The model catalog against Debian's docker-registry: versions stored by digest with their signed documents as
referrers, aliases moved only on proof into a signed hash-chained log, verify naming every tampered item, lineage
both ways, Hugging Face export and import, and bad input refused with nothing half-stored."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import uuid
from pathlib import Path
from typing import Any

import pytest
import requests

from learnerkit.common.signing import canonical, load_public_key, load_signer, public_key_path
from learnerkit.scheduler.catalog import layout, oci
from learnerkit.scheduler.catalog.aliaslog import LOG_TAG
from learnerkit.scheduler.catalog.card import CARD_FILE
from learnerkit.scheduler.catalog.errors import CatalogError, NotFoundError, RefusedError
from learnerkit.scheduler.catalog.service import export_hf, history, import_hf, move_alias, pull, used_by, verify
from learnerkit.scheduler.catalog.versions import Store, models, register, show, version_digests
from tests.integration.catalog.modeljob import job_folder
from tests.unit.scheduler.provenance.jobfolder import DATA, EVALUATOR_ID, LEARNER_ID, sha

pytestmark = [pytest.mark.integration]

WEIGHTS = "attempt-1/learner-1/results/model.bin"
NOW = "2026-11-29T01:00:00Z"


@pytest.fixture
def store(registry: str) -> Store:
    return Store(registry, f"team-{uuid.uuid4().hex[:8]}")


@pytest.fixture
def job(tmp_path: Path) -> tuple[Path, Any, Any]:
    folder, key = job_folder(tmp_path / "job")
    return folder, [load_public_key(public_key_path(key))], load_signer(key)


def registered(store: Store, job: tuple[Path, Any, Any], name: str = "digits") -> str:
    return register(store, name, job[0], job[1]).version


def test_a_job_registers_as_a_version_by_digest_with_its_documents_as_referrers(store: Store, job: Any) -> None:
    version = register(store, "digits", job[0], job[1])
    assert version.version == oci.get_manifest(store.host, store.repo("digits"), version.version)[1]  # type: ignore[index]
    assert [b.path for b in version.files] == [WEIGHTS]
    manifest = json.loads(oci.get_manifest(store.host, store.repo("digits"), version.version)[0])  # type: ignore[index]
    assert manifest["artifactType"] == layout.MODEL_ARTIFACT and manifest["config"]["mediaType"] == layout.MODEL_CONFIG
    index = json.loads(oci.get_manifest(store.host, store.repo("digits"), layout.tag_schema_tag(version.version))[0])  # type: ignore[index]
    kinds = sorted(e["annotations"][layout.DOCUMENT] for e in index["manifests"])
    assert kinds == ["card", "evaluation-round-1", "evaluation-round-2", "factsheet", "provenance", "signature"]
    assert register(store, "digits", job[0], job[1]).version == version.version  # the same job: the same version
    assert version_digests(store, "digits") == [version.version]


def test_an_alias_moves_on_proof_into_a_signed_chained_log_and_verifies_offline(store: Store, job: Any) -> None:
    digest = registered(store, job)
    move = move_alias(store, "digits", "production", digest, job[1], job[2], "alice", NOW)
    assert move["from"] is None and move["to"] == digest and move["sequence"] == 1
    assert set(move["checksPassed"]) >= {
        "weights signature",
        "provenance",
        "scan gate",
        "evaluation thresholds",
        "model card",
    }
    again = move_alias(store, "digits", "candidate", digest, job[1], job[2], "bob", NOW)
    assert again["sequence"] == 2 and len(again["previous"]) == 64
    moves, checks = history(store, "digits", job[1])
    assert [(m["alias"], m["by"]) for m in moves] == [("production", "alice"), ("candidate", "bob")]
    assert all(c.state.value == "ok" for c in checks)
    result = verify(store, "digits@production", job[1])
    assert result.ok, result.to_dict()


def tamper_blob(registry_data: Path, digest: str) -> None:
    path = registry_data / "docker/registry/v2/blobs/sha256" / digest[7:9] / digest[7:] / "data"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def replace_document(store: Store, digest: str, kind: str, path: str, edit: Any) -> None:
    """What a writer to the registry can do: a document's file replaced and its referrer re-pointed at it."""
    repo = store.repo("digits")
    index = json.loads(oci.get_manifest(store.host, repo, layout.tag_schema_tag(digest))[0])  # type: ignore[index]
    for entry in index["manifests"]:
        if entry["annotations"][layout.DOCUMENT] != kind:
            continue
        referrer = json.loads(oci.get_manifest(store.host, repo, entry["digest"])[0])  # type: ignore[index]
        for layer in referrer["layers"]:
            if layer["annotations"][layout.FILEPATH] == path:
                data = edit(oci.get_blob(store.host, repo, layer["digest"]))
                layer["digest"], layer["size"] = oci.put_blob(store.host, repo, data), len(data)
        body = canonical(referrer)
        entry["digest"] = oci.put_manifest(store.host, repo, oci.sha256_digest(body), body, layout.OCI_MANIFEST)
        entry["size"] = len(body)
    body = canonical(index)
    oci.put_manifest(store.host, repo, layout.tag_schema_tag(digest), body, layout.OCI_INDEX)


def swap(old: bytes, new: bytes) -> Any:
    def edit(data: bytes) -> bytes:
        assert old in data, (old, data[:300])
        return data.replace(old, new, 1)

    return edit


def storage(registry: str) -> Path:
    """The storage folder of the test registry at `registry`, found by the address its config names, wherever
    pytest made it (a worker's own folder under pytest-xdist)."""
    address = re.compile(rf"{re.escape(registry)}\b")
    for user in Path("/tmp").glob("pytest-of-*"):
        # os.walk passes over the folders other workers remove meanwhile (a glob would raise on them).
        for folder, _, files in os.walk(user):
            if "config.yml" in files and Path(folder).name.startswith("registry"):
                with contextlib.suppress(OSError):
                    if address.search((Path(folder) / "config.yml").read_text()):
                        return Path(folder) / "data"
    raise AssertionError(f"no registry storage found for {registry}")


@pytest.mark.parametrize(
    ("tamper", "gate", "item"),
    [
        ("weights", "weights signature", WEIGHTS),
        ("card", "model card", "model card"),
        ("provenance", "provenance", "provenance signature"),
        ("report", "evaluation thresholds", "evaluation report"),
        ("image", "lineage", "version lineage"),
    ],
)
def test_verify_names_each_tampered_item(
    store: Store, job: Any, registry: str, tmp_path: Path, tamper: str, gate: str, item: str
) -> None:
    # A version of its own (other weights: its blobs are not shared with the other tests' versions).
    folder, key = job_folder(tmp_path / "own", key=None)
    keys = [load_public_key(public_key_path(key))]
    version = register(store, "digits", folder, keys)
    move_alias(store, "digits", "production", version.version, keys, load_signer(key), "alice", NOW)
    digest = version.version
    if tamper == "weights":
        tamper_blob(storage(registry), version.files[0].digest)
    elif tamper == "card":
        replace_document(store, digest, "card", CARD_FILE, swap(b"license: other", b"license: mit"))
    elif tamper == "provenance":
        replace_document(
            store, digest, "provenance", "provenance/provenance.intoto.json", swap(b'{"payload":"', b'{"payload":"e')
        )
    elif tamper == "report":
        replace_document(
            store,
            digest,
            "evaluation-round-1",
            "evaluations/round-1/robust/results/evaluations/robust.json",
            swap(b"passed", b"failed"),
        )
    else:  # the image reference in the version's own config: a new manifest under the same tag
        repo = store.repo("digits")
        manifest = json.loads(oci.get_manifest(store.host, repo, digest)[0])  # type: ignore[index]
        config = oci.get_blob(store.host, repo, manifest["config"]["digest"])
        forged = config.replace(LEARNER_ID[7:].encode(), b"9" * 64)
        manifest["config"]["digest"], manifest["config"]["size"] = oci.put_blob(store.host, repo, forged), len(forged)
        body = canonical(manifest)
        forged_digest = oci.put_manifest(store.host, repo, oci.sha256_digest(body), body, layout.OCI_MANIFEST)
        index = json.loads(oci.get_manifest(store.host, repo, layout.tag_schema_tag(digest))[0])  # type: ignore[index]
        for entry in index["manifests"]:  # every document re-pointed at the forged version, as a writer can
            referrer = json.loads(oci.get_manifest(store.host, repo, entry["digest"])[0])  # type: ignore[index]
            referrer["subject"] = layout.descriptor(layout.OCI_MANIFEST, forged_digest, len(body))
            moved = canonical(referrer)
            entry["digest"] = oci.put_manifest(store.host, repo, oci.sha256_digest(moved), moved, layout.OCI_MANIFEST)
            entry["size"] = len(moved)
        oci.put_manifest(store.host, repo, layout.tag_schema_tag(forged_digest), canonical(index), layout.OCI_INDEX)
        oci.put_manifest(store.host, repo, layout.version_tag(forged_digest), body, layout.OCI_MANIFEST)
        oci.put_manifest(store.host, repo, "production", body, layout.OCI_MANIFEST)
        digest = forged_digest
    result = verify(store, "digits@production", keys)
    assert not result.ok
    failed = [c for c in result.proof.failed_checks(gate) if item in c.item]
    assert failed, result.to_dict()
    with pytest.raises(RefusedError, match=gate):
        move_alias(store, "digits", "candidate", digest, keys, load_signer(key), "mallory", NOW)


def test_an_alias_log_entry_removed_or_edited_is_named(store: Store, job: Any) -> None:
    digest = registered(store, job)
    for alias in ("a", "b", "c"):
        move_alias(store, "digits", alias, digest, job[1], job[2], "alice", NOW)
    repo = store.repo("digits")
    log = json.loads(oci.get_manifest(store.host, repo, LOG_TAG)[0])  # type: ignore[index]
    removed = dict(log, layers=[log["layers"][0], log["layers"][2]])
    oci.put_manifest(store.host, repo, LOG_TAG, canonical(removed), layout.OCI_MANIFEST)
    _, checks = history(store, "digits", job[1])
    assert [c.state.value for c in checks] == ["ok", "changed"] and "removed" in checks[1].detail
    raw = oci.get_blob(store.host, repo, log["layers"][1]["digest"])
    envelope = json.loads(raw)
    envelope["payload"] = envelope["payload"][:-4] + "AAAA"
    edited = json.dumps(envelope).encode()
    log["layers"][1] = layout.descriptor(layout.DSSE_TYPE, oci.put_blob(store.host, repo, edited), len(edited))
    oci.put_manifest(store.host, repo, LOG_TAG, canonical(log), layout.OCI_MANIFEST)
    result = verify(store, "digits@c", job[1])
    assert not result.ok and [c.item for c in result.log if c.state.value != "ok"][:1] == ["alias log entry 2"]
    with pytest.raises(RefusedError, match="alias log entry 2"):
        move_alias(store, "digits", "d", digest, job[1], job[2], "alice", NOW)
    last = dict(log, layers=log["layers"][:2])  # the last entry removed: the alias c has no move left
    oci.put_manifest(store.host, repo, LOG_TAG, canonical(last), layout.OCI_MANIFEST)
    assert any(c.item == "alias c" and c.state.value == "changed" for c in verify(store, "digits@c", job[1]).log)


def test_an_alias_move_is_refused_for_a_failed_fairness_threshold(store: Store, tmp_path: Path) -> None:
    folder, key = job_folder(tmp_path / "unfair", fairness="failed")
    keys = [load_public_key(public_key_path(key))]
    digest = register(store, "digits", folder, keys).version
    with pytest.raises(
        RefusedError, match=r"evaluation thresholds: evaluation round 2 fair \(fairness\).*disparate_impact"
    ) as refused:
        move_alias(store, "digits", "production", digest, keys, load_signer(key), "alice", NOW)
    assert refused.value.failed == ["evaluation thresholds"]
    assert oci.get_manifest(store.host, store.repo("digits"), "production") is None
    assert oci.get_manifest(store.host, store.repo("digits"), LOG_TAG) is None


def test_lineage_answers_both_ways(store: Store, job: Any) -> None:
    digest = registered(store, job)
    record = show(store, "digits", digest).lineage
    assert record["job"] == "job-7" and record["learnerImage"]["sha256"] == LEARNER_ID[7:]
    assert [i["sha256"] for i in record["evaluatorImages"]] == [EVALUATOR_ID[7:]]
    data = sha(DATA["train/a.bin"])
    assert used_by(store, data) == [{"name": "digits", "version": digest, "uses": ["data s3://data/train/a.bin"]}]
    assert [u["version"] for u in used_by(store, LEARNER_ID)] == [digest]
    assert used_by(store, "0" * 64) == []


def test_hf_export_and_import_round_trip(store: Store, job: Any, tmp_path: Path) -> None:
    digest = registered(store, job)
    exported = tmp_path / "hf"
    export_hf(store, f"digits@{digest}", exported)
    readme = (exported / "README.md").read_text()
    assert readme.startswith("---\n") and "library_name:" in readme and "model-index:" in readme
    assert (exported / WEIGHTS).read_bytes() == (job[0] / WEIGHTS).read_bytes()
    imported = import_hf(store, "digits-hf", exported)
    assert not imported.attested
    again = tmp_path / "again"
    pull(store, f"digits-hf@{imported.version}", again)
    assert (again / WEIGHTS).read_bytes() == (job[0] / WEIGHTS).read_bytes()
    assert (again / CARD_FILE).read_text() == readme
    with pytest.raises(RefusedError, match="imported version"):
        move_alias(store, "digits-hf", "production", imported.version, job[1], job[2], "alice", NOW)


def test_bad_input_is_named_and_stores_nothing(store: Store, job: Any, tmp_path: Path, registry: str) -> None:
    digest = registered(store, job)
    with pytest.raises(NotFoundError, match="no model named 'nope'"):
        verify(store, "nope@production", job[1])
    with pytest.raises(NotFoundError, match="no alias 'staging'"):
        verify(store, "digits@staging", job[1])
    theirs, key = job_folder(tmp_path / "theirs")  # another key: another version
    other = Store(registry, store.tenant + "-other")
    foreign = register(other, "digits", theirs, [load_public_key(public_key_path(key))]).version
    assert foreign != digest
    with pytest.raises(NotFoundError, match=f"model digits: no version {foreign} for tenant {store.tenant}$"):
        verify(store, f"digits@{foreign}", job[1])
    unsigned = tmp_path / "unsigned"
    shutil.copytree(job[0], unsigned)
    (unsigned / "provenance/model.sig").unlink()
    with pytest.raises(CatalogError, match=r"no model signature \(provenance/model.sig\)"):
        register(store, "unsigned", unsigned, job[1])
    assert "unsigned" not in models(store)
    with pytest.raises(CatalogError, match="name 'Bad Name'"):
        register(store, "Bad Name", job[0], job[1])
    assert requests.get(f"http://{registry}/v2/", timeout=5).status_code == 200
