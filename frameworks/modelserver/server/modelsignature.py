"""The OpenSSF model signature of a version's folder, checked before anything in it is loaded.

The check `model_signing verify key` makes (key mode, no transparency log), with the platform's public keys: the
Sigstore bundle's DSSE envelope verifies with one of them (ECDSA P-256, SHA-256), its statement is a model
signature (`https://model_signing/signature/v1.0`) whose subject is the digest of its files' digests, and the
folder holds exactly the files it lists (but for its `ignore_paths`), each hashing to its listed SHA-256.
The catalog signs in this format (learnerkit/scheduler/provenance/modelsig.py) and pulls into this layout.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Sequence
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

SIGNATURE_FILE = "provenance/model.sig"
PREDICATE_TYPE = "https://model_signing/signature/v1.0"
CHUNK = 1 << 20


class SignatureError(Exception):
    """The folder's model signature does not verify; the message names every failed check."""


def verify_folder(folder: Path, public_keys: Sequence[Path]) -> dict[str, str]:
    """The signed files (path under ``folder`` to SHA-256) once every check holds; `SignatureError` otherwise."""
    path = folder / SIGNATURE_FILE
    try:
        bundle = json.loads(path.read_bytes())
        envelope = bundle["dsseEnvelope"]
        payload = base64.b64decode(envelope["payload"], validate=True)
        payload_type = str(envelope["payloadType"])
        signatures = [base64.b64decode(s["sig"], validate=True) for s in envelope["signatures"]]
    except FileNotFoundError as e:
        raise SignatureError(f"{SIGNATURE_FILE}: missing (an unsigned folder is never loaded)") from e
    except OSError as e:
        raise SignatureError(f"{SIGNATURE_FILE}: cannot be read ({e})") from e
    except (ValueError, KeyError, TypeError) as e:
        raise SignatureError(f"{SIGNATURE_FILE}: not a Sigstore bundle with a DSSE envelope ({e})") from e
    if not _signed_by_one_of(payload_type, payload, signatures, public_keys):
        raise SignatureError(f"{SIGNATURE_FILE}: the signature does not verify with the platform's public key(s)")
    try:
        statement = json.loads(payload)
        resources = {str(r["name"]): str(r["digest"]) for r in statement["predicate"]["resources"]}
        ignored = [str(p) for p in statement["predicate"]["serialization"]["ignore_paths"]]
        subject = str(statement["subject"][0]["digest"]["sha256"])
    except (ValueError, KeyError, TypeError, IndexError) as e:
        raise SignatureError(f"{SIGNATURE_FILE}: the signed statement is not a model signature ({e})") from e
    if statement.get("predicateType") != PREDICATE_TYPE:
        raise SignatureError(
            f"{SIGNATURE_FILE}: predicateType {statement.get('predicateType')!r}, not {PREDICATE_TYPE}"
        )
    root = hashlib.sha256(b"".join(bytes.fromhex(resources[name]) for name in sorted(resources))).hexdigest()
    if root != subject:
        raise SignatureError(f"{SIGNATURE_FILE}: the subject is not the digest of the listed files")
    problems = _check_files(folder, resources, [*ignored, SIGNATURE_FILE])
    if problems:
        raise SignatureError("; ".join(problems))
    return resources


def _signed_by_one_of(payload_type: str, payload: bytes, signatures: list[bytes], keys: Sequence[Path]) -> bool:
    encoded = payload_type.encode()
    pae = b"DSSEv1 %d %s %d %s" % (len(encoded), encoded, len(payload), payload)
    for key_path in keys:
        key = serialization.load_pem_public_key(key_path.read_bytes())
        if not isinstance(key, ec.EllipticCurvePublicKey):
            continue
        for signature in signatures:
            try:
                key.verify(signature, pae, ec.ECDSA(hashes.SHA256()))
            except InvalidSignature:
                continue
            return True
    return False


def _check_files(folder: Path, resources: dict[str, str], ignored: list[str]) -> list[str]:
    problems = []
    present: set[str] = set()
    for path in sorted(folder.rglob("*")):
        name = path.relative_to(folder).as_posix()
        if any(name == p or name.startswith(p.rstrip("/") + "/") for p in ignored):
            continue
        if path.is_symlink():
            problems.append(f"{name}: a symbolic link (the signature allows none)")
        elif path.is_file():
            present.add(name)
    for name in sorted(present - resources.keys()):
        problems.append(f"{name}: not in the signature")
    for name in sorted(resources.keys() - present):
        problems.append(f"{name}: signed but missing")
    for name in sorted(present & resources.keys()):
        if _sha256(folder / name) != resources[name]:
            problems.append(f"{name}: changed (its SHA-256 is not the signed one)")
    return problems


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()
