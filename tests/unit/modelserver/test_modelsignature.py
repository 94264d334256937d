"""The server's signature check against the platform's own signer (learnerkit/scheduler/provenance/modelsig.py):
a version as the catalog pulls it verifies; a changed, added or missing file, or another key, is named."""

import hashlib
import json
from pathlib import Path

import pytest
from modelsignature import SignatureError, verify_folder

from controller_sidecar.provenancerecord import Digested
from learnerkit.common.signing import create_signer, public_key_path
from learnerkit.scheduler.provenance.modelsig import SIGNATURE_FILE, model_signature

MODEL = "attempt-1/learner-1/results/model/model.pt"
FILES = {MODEL: b"torchscript bytes", MODEL.replace(".pt", ".json"): b'{"format": "torchscript"}'}


@pytest.fixture
def signed(tmp_path: Path) -> tuple[Path, Path]:
    folder = tmp_path / "version"
    for name, data in FILES.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
    key = tmp_path / "platform.key"
    signer = create_signer(key)
    digested = [Digested(n, hashlib.sha256(d).hexdigest(), len(d)) for n, d in FILES.items()]
    (folder / SIGNATURE_FILE).parent.mkdir()
    (folder / SIGNATURE_FILE).write_text(json.dumps(model_signature("digits", digested, signer)), encoding="utf-8")
    (folder / "provenance" / "manifest.json").write_text("{}", encoding="utf-8")
    (folder / "attempt-1" / "learner-1" / "logs").mkdir()
    (folder / "attempt-1" / "learner-1" / "logs" / "stdout.log").write_text("ignored", encoding="utf-8")
    return folder, public_key_path(key)


def refusal(folder: Path, key: Path) -> str:
    with pytest.raises(SignatureError) as caught:
        verify_folder(folder, [key])
    return str(caught.value)


def test_a_version_signed_by_the_platform_verifies(signed: tuple[Path, Path]) -> None:
    folder, key = signed
    assert verify_folder(folder, [key]) == {n: hashlib.sha256(d).hexdigest() for n, d in FILES.items()}


def test_one_byte_changed_is_named(signed: tuple[Path, Path]) -> None:
    folder, key = signed
    (folder / MODEL).write_bytes(b"torchscript bytez")
    assert refusal(folder, key) == f"{MODEL}: changed (its SHA-256 is not the signed one)"


def test_a_file_added_or_removed_is_named(signed: tuple[Path, Path]) -> None:
    folder, key = signed
    (folder / "attempt-1" / "learner-1" / "results" / "extra.py").write_text("", encoding="utf-8")
    (folder / MODEL.replace(".pt", ".json")).unlink()
    message = refusal(folder, key)
    assert "attempt-1/learner-1/results/extra.py: not in the signature" in message
    assert "model/model.json: signed but missing" in message


def test_another_key_or_an_edited_statement_does_not_verify(signed: tuple[Path, Path], tmp_path: Path) -> None:
    folder, key = signed
    create_signer(tmp_path / "other.key")
    assert "does not verify with the platform's public key" in refusal(folder, tmp_path / "other.pub")
    bundle = json.loads((folder / SIGNATURE_FILE).read_text(encoding="utf-8"))
    bundle["dsseEnvelope"]["payload"] = bundle["dsseEnvelope"]["payload"][:-4] + "AAA="
    (folder / SIGNATURE_FILE).write_text(json.dumps(bundle), encoding="utf-8")
    assert "does not verify with the platform's public key" in refusal(folder, key)


def test_an_unsigned_folder_is_never_loaded(signed: tuple[Path, Path]) -> None:
    folder, key = signed
    (folder / SIGNATURE_FILE).unlink()
    assert refusal(folder, key) == f"{SIGNATURE_FILE}: missing (an unsigned folder is never loaded)"
