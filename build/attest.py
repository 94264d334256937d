"""Signatures over what was published: an in-toto statement in a DSSE envelope, signed with Ed25519.

The statement's subject is the image digest in the registry; its predicate binds the SBOM's and the scan
report's sha256 and the image ID that was tested and scanned. Changing any of them breaks the signature or a
hash; a re-tagged image has a digest no statement names.
"""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from learnerkit.common.errors import ConfigError
from learnerkit_build.errors import BuildToolError
from learnerkit_build.state import state_home, write_atomic

PAYLOAD_TYPE = "application/vnd.in-toto+json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://learnerkit.dev/attestations/scan-gate/v1"


class AttestationError(BuildToolError):
    """A signature or a hash in a published attestation does not verify."""


def default_key_path() -> Path:
    return state_home() / "signing" / "ed25519.pem"


def load_or_create_key(path: Path | None = None) -> Ed25519PrivateKey:
    """The signing key at `path` (default under $LEARNERKIT_HOME); made, with its .pub, on first use."""
    path = path or default_key_path()
    if path.is_file():
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
        if not isinstance(key, Ed25519PrivateKey):
            raise ConfigError(f"{path} is not an Ed25519 private key")
        return key
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    write_atomic(path, pem)
    path.chmod(0o600)
    write_atomic(path.with_suffix(".pub"), public_pem(key.public_key()))
    return key


def public_pem(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def load_public_key(path: Path) -> Ed25519PublicKey:
    try:
        key = serialization.load_pem_public_key(path.read_bytes())
    except (OSError, ValueError) as e:
        raise ConfigError(f"{path}: not a readable PEM public key: {e}") from e
    if not isinstance(key, Ed25519PublicKey):
        raise ConfigError(f"{path} is not an Ed25519 public key")
    return key


def key_id(key: Ed25519PublicKey) -> str:
    raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:32]


def statement(repository: str, digest: str, image_id: str, sbom_sha256: str, report_sha256: str) -> dict[str, Any]:
    algorithm, _, hexdigest = digest.partition(":")
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": repository, "digest": {algorithm: hexdigest}}],
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "imageId": image_id,
            "sbom": {"mediaType": "application/vnd.cyclonedx+json", "digest": {"sha256": sbom_sha256}},
            "scanReport": {"mediaType": "application/json", "digest": {"sha256": report_sha256}},
            "gates": {"test": "passed", "scan": "passed"},
        },
    }


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE pre-authentication encoding: what the signature actually covers."""
    kind = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(payload), payload)


def sign(payload: dict[str, Any], key: Ed25519PrivateKey) -> dict[str, Any]:
    body = json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()
    signature = key.sign(pae(PAYLOAD_TYPE, body))
    return {
        "payloadType": PAYLOAD_TYPE,
        "payload": base64.b64encode(body).decode(),
        "signatures": [{"keyid": key_id(key.public_key()), "sig": base64.b64encode(signature).decode()}],
    }


def open_envelope(envelope: dict[str, Any], key: Ed25519PublicKey) -> dict[str, Any]:
    """The statement of a DSSE envelope whose signature by `key` verifies; raises otherwise."""
    if envelope.get("payloadType") != PAYLOAD_TYPE:
        raise AttestationError(f"envelope payloadType is {envelope.get('payloadType')!r}, not {PAYLOAD_TYPE}")
    try:
        body = base64.b64decode(envelope["payload"], validate=True)
        signatures = [base64.b64decode(s["sig"], validate=True) for s in envelope["signatures"]]
    except (KeyError, TypeError, ValueError) as e:
        raise AttestationError(f"malformed DSSE envelope: {e}") from e
    for signature in signatures:
        try:
            key.verify(signature, pae(PAYLOAD_TYPE, body))
        except InvalidSignature:
            continue
        parsed: dict[str, Any] = json.loads(body)
        if parsed.get("_type") != STATEMENT_TYPE or parsed.get("predicateType") != PREDICATE_TYPE:
            raise AttestationError("the signed payload is not a learnerkit scan-gate statement")
        return parsed
    raise AttestationError(f"no signature in the envelope verifies with key {key_id(key)}")
