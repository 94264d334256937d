"""Signed documents in the formats standard tools read: in-toto Statements v1 in DSSE envelopes, and cosign's
simple-signing payload.

Payloads are canonical JSON (sorted keys, no spaces), so identical statements give identical envelopes but for
the ECDSA signature's randomness; the statement is what verifiers compare. The envelope itself is
`learnerkit.common.signing`'s, shared with the scheduler's job provenance.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from securesystemslib.exceptions import UnverifiedSignatureError, VerificationError
from securesystemslib.signer import Key, Signature, Signer

from learnerkit.common import signing
from learnerkit.common.signing import PAYLOAD_TYPE, STATEMENT_TYPE, canonical, sign_statement
from learnerkit_build.errors import BuildToolError

__all__ = [
    "PAYLOAD_TYPE",
    "STATEMENT_TYPE",
    "AttestationError",
    "canonical",
    "open_envelope",
    "sign_bytes",
    "sign_statement",
    "simple_signing_payload",
    "statement",
    "verify_simple_signing",
]
SIMPLE_SIGNING_TYPE = "cosign container image signature"


class AttestationError(BuildToolError):
    """A signature or a statement in a published attestation does not verify."""


def statement(subject_name: str, digest: str, predicate_type: str, predicate: dict[str, Any]) -> dict[str, Any]:
    """An in-toto Statement v1 about one image digest (`sha256:<hex>`)."""
    algorithm, _, hexdigest = digest.partition(":")
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": subject_name, "digest": {algorithm: hexdigest}}],
        "predicateType": predicate_type,
        "predicate": predicate,
    }


def open_envelope(raw: bytes, key: Key, where: str) -> dict[str, Any]:
    """The statement of a DSSE envelope that `key` signed; raises AttestationError naming `where` otherwise."""
    try:
        return signing.open_envelope(raw, key, where)
    except signing.EnvelopeError as e:
        raise AttestationError(str(e)) from e


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
