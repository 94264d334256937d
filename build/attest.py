"""Signed documents in the formats standard tools read: in-toto Statements v1 in DSSE envelopes, and cosign's
simple-signing payload.

Payloads are canonical JSON (sorted keys, no spaces), so identical statements give identical envelopes but for
the ECDSA signature's randomness; the statement is what verifiers compare.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from securesystemslib.dsse import Envelope
from securesystemslib.exceptions import UnverifiedSignatureError, VerificationError
from securesystemslib.signer import Key, Signature, Signer

from learnerkit_build.errors import BuildToolError

PAYLOAD_TYPE = "application/vnd.in-toto+json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
SIMPLE_SIGNING_TYPE = "cosign container image signature"


class AttestationError(BuildToolError):
    """A signature or a statement in a published attestation does not verify."""


def canonical(payload: Any) -> bytes:
    return json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def statement(subject_name: str, digest: str, predicate_type: str, predicate: dict[str, Any]) -> dict[str, Any]:
    """An in-toto Statement v1 about one image digest (`sha256:<hex>`)."""
    algorithm, _, hexdigest = digest.partition(":")
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": subject_name, "digest": {algorithm: hexdigest}}],
        "predicateType": predicate_type,
        "predicate": predicate,
    }


def sign_statement(payload: dict[str, Any], signer: Signer) -> dict[str, Any]:
    envelope = Envelope(canonical(payload), PAYLOAD_TYPE, {})
    envelope.sign(signer)
    result: dict[str, Any] = envelope.to_dict()
    return result


def open_envelope(raw: bytes, key: Key, where: str) -> dict[str, Any]:
    """The statement of a DSSE envelope that `key` signed; raises AttestationError naming `where` otherwise."""
    try:
        envelope = Envelope.from_dict(json.loads(raw))
    except (KeyError, TypeError, ValueError) as e:
        raise AttestationError(f"{where}: not a DSSE envelope: {e}") from e
    if envelope.payload_type != PAYLOAD_TYPE:
        raise AttestationError(f"{where}: payloadType is {envelope.payload_type!r}, not {PAYLOAD_TYPE}")
    try:
        envelope.verify([key], 1)
    except VerificationError as e:
        raise AttestationError(f"{where}: no signature verifies with key {key.keyid}: {e}") from e
    try:
        parsed: Any = json.loads(envelope.payload)
    except ValueError as e:
        raise AttestationError(f"{where}: the signed payload is not JSON: {e}") from e
    if not isinstance(parsed, dict) or parsed.get("_type") != STATEMENT_TYPE:
        raise AttestationError(f"{where}: the signed payload is not an in-toto Statement v1")
    return parsed


def simple_signing_payload(docker_reference: str, digest: str) -> bytes:
    """cosign's signature payload ("simple signing"): what `cosign verify` checks the signature over."""
    return canonical(
        {
            "critical": {
                "identity": {"docker-reference": docker_reference},
                "image": {"docker-manifest-digest": digest},
                "type": SIMPLE_SIGNING_TYPE,
            },
            "optional": None,
        }
    )


def sign_bytes(payload: bytes, signer: Signer) -> str:
    """A base64 signature over `payload` itself (DER ECDSA for P-256), as cosign stores it."""
    return base64.b64encode(bytes.fromhex(signer.sign(payload).signature)).decode()


def verify_simple_signing(payload: bytes, signature_b64: str, key: Key, digest: str, where: str) -> None:
    try:
        key.verify_signature(Signature(key.keyid, base64.b64decode(signature_b64, validate=True).hex()), payload)
    except (UnverifiedSignatureError, VerificationError, ValueError) as e:
        raise AttestationError(f"{where}: the image signature does not verify with key {key.keyid}: {e}") from e
    try:
        signed = json.loads(payload)["critical"]["image"]["docker-manifest-digest"]
    except (KeyError, TypeError, ValueError) as e:
        raise AttestationError(f"{where}: not a simple-signing payload: {e}") from e
    if signed != digest:
        raise AttestationError(f"{where}: the image signature names {signed}, not {digest}")
