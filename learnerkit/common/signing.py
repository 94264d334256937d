"""ECDSA P-256 signing keys (PEM) and DSSE envelopes of in-toto Statements v1: the one signer of the project.

The image publisher (`learnerkit_build.publish.push`) and the scheduler's job provenance
(`learnerkit.scheduler.provenance`) both sign with it. securesystemslib signs and verifies; the key id is
securesystemslib's default id of the public key, so in-toto and securesystemslib accept an envelope given only the
public key, and cosign (which ignores key ids) accepts it with `--key PUBLIC.pem`. Payloads are canonical JSON
(sorted keys, no spaces): identical statements give identical payloads.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ec import (
    SECP256R1,
    EllipticCurvePrivateKey,
    EllipticCurvePublicKey,
    generate_private_key,
)
from securesystemslib.dsse import Envelope
from securesystemslib.exceptions import VerificationError
from securesystemslib.signer import CryptoSigner, Key, Signer, SSlibKey

from controller_sidecar.atomicfile import write_atomic
from learnerkit.common.errors import ConfigError, LearnerkitError
from learnerkit.common.passphrase import PASSPHRASE_FILE_SETTING, PASSPHRASE_SETTING

SCHEME = "ecdsa-sha2-nistp256"
PAYLOAD_TYPE = "application/vnd.in-toto+json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"


class EnvelopeError(LearnerkitError):
    """A DSSE envelope is malformed, or no signature in it verifies with the key."""


def public_key_path(private: Path) -> Path:
    return private.with_suffix(".pub")


def load_signer(path: Path, setting: str | None = None, passphrase: bytes | None = None) -> CryptoSigner:
    """The signer of the PEM key at ``path``, decrypted with ``passphrase`` where it is encrypted; the error names
    ``setting`` (the variable that gave the path) and, for a passphrase missing or wrong, where one is read from."""
    named = f"{setting}={path}" if setting else str(path)
    try:
        pem = path.read_bytes()
    except FileNotFoundError as e:
        raise ConfigError(f"{named}: no signing key there (create one: `learnerkit scheduler key create`)") from e
    except OSError as e:
        raise ConfigError(f"{named}: cannot read the signing key: {e}") from e
    encrypted = b"ENCRYPTED" in pem.split(b"\n", 1)[0]
    settings = f"{PASSPHRASE_SETTING} or {PASSPHRASE_FILE_SETTING}"
    if encrypted and passphrase is None:
        raise ConfigError(f"{named}: the signing key is encrypted and no passphrase is given (set {settings})")
    try:
        key = serialization.load_pem_private_key(pem, password=passphrase if encrypted else None)
    except (ValueError, TypeError) as e:
        if encrypted:
            raise ConfigError(f"{named}: the passphrase ({settings}) does not decrypt the signing key") from e
        raise ConfigError(f"{named}: not a readable PEM private key: {e}") from e
    if not isinstance(key, EllipticCurvePrivateKey) or not isinstance(key.curve, SECP256R1):
        raise ConfigError(f"{named} is not an ECDSA P-256 private key")
    return CryptoSigner(key)


def create_signer(path: Path, passphrase: bytes | None = None) -> CryptoSigner:
    """A new key at ``path`` (mode 0600; encrypted with ``passphrase`` where one is given) with its public key
    beside it (``.pub``), both written atomically."""
    key = generate_private_key(SECP256R1())
    encryption = serialization.BestAvailableEncryption(passphrase) if passphrase else serialization.NoEncryption()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)
    signer = CryptoSigner(key)
    write_atomic(path, pem, mode=0o600)
    write_atomic(public_key_path(path), public_pem(signer).encode())
    return signer


def load_or_create_signer(path: Path, setting: str | None = None) -> CryptoSigner:
    """The key at ``path``; made, with its ``.pub``, when there is no file there. ``setting``: as `load_signer`'s."""
    return load_signer(path, setting) if path.exists() else create_signer(path)


def public_pem(signer: CryptoSigner) -> str:
    pem: str = signer.public_key.keyval["public"]
    return pem


def public_key_from_pem(pem: bytes, where: str) -> SSlibKey:
    try:
        key = serialization.load_pem_public_key(pem)
    except ValueError as e:
        raise ConfigError(f"{where}: not a PEM public key: {e}") from e
    if not isinstance(key, EllipticCurvePublicKey) or not isinstance(key.curve, SECP256R1):
        raise ConfigError(f"{where} is not an ECDSA P-256 public key")
    return SSlibKey.from_crypto(key, scheme=SCHEME)


def load_public_key(path: Path, setting: str | None = None) -> SSlibKey:
    """The public key at ``path``; the error names ``setting`` (the option or variable that gave the path)."""
    named = f"{setting}={path}" if setting else str(path)
    try:
        pem = path.read_bytes()
    except OSError as e:
        raise ConfigError(f"{named}: not a readable PEM public key: {e}") from e
    return public_key_from_pem(pem, named)


def canonical(payload: Any) -> bytes:
    return json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def sign_statement(payload: dict[str, Any], signer: Signer) -> dict[str, Any]:
    """A DSSE envelope (as a dict) over the canonical JSON of an in-toto statement."""
    envelope = Envelope(canonical(payload), PAYLOAD_TYPE, {})
    envelope.sign(signer)
    result: dict[str, Any] = envelope.to_dict()
    return result


def open_envelope(raw: bytes, keys: Key | Sequence[Key], where: str) -> dict[str, Any]:
    """The statement of a DSSE envelope one of ``keys`` signed; raises EnvelopeError naming ``where`` otherwise."""
    return open_signed(raw, keys, where)[0]


def open_signed(raw: bytes, keys: Key | Sequence[Key], where: str) -> tuple[dict[str, Any], Key]:
    """The statement of a DSSE envelope and the key of ``keys`` that signed it (matched by the signature's key id:
    the platform's keys before and after a rotation verify the documents each signed)."""
    ring = [keys] if isinstance(keys, Key) else list(keys)
    try:
        envelope = Envelope.from_dict(json.loads(raw))
    except (KeyError, TypeError, ValueError) as e:
        raise EnvelopeError(f"{where}: not a DSSE envelope: {e}") from e
    if envelope.payload_type != PAYLOAD_TYPE:
        raise EnvelopeError(f"{where}: payloadType is {envelope.payload_type!r}, not {PAYLOAD_TYPE}")
    try:
        accepted = envelope.verify(ring, 1)
    except (VerificationError, ValueError) as e:
        ids = ", ".join(key.keyid for key in ring) or "none"
        signed_by = ", ".join(sorted(envelope.signatures)) or "no key id"
        raise EnvelopeError(f"{where}: no signature verifies with key {ids} (signed by {signed_by}): {e}") from e
    try:
        parsed: Any = json.loads(envelope.payload)
    except ValueError as e:
        raise EnvelopeError(f"{where}: the signed payload is not JSON: {e}") from e
    if not isinstance(parsed, dict) or parsed.get("_type") != STATEMENT_TYPE:
        raise EnvelopeError(f"{where}: the signed payload is not an in-toto Statement v1")
    return parsed, next(iter(accepted.values()))
