"""The publisher's signing key: ECDSA P-256 (cosign's default key type), kept as PEM under $LEARNERKIT_HOME.

securesystemslib signs and verifies with it; the key id is securesystemslib's default id of the public key, so
in-toto and securesystemslib accept an envelope given only the public key, and cosign (which ignores key ids)
accepts it with `--key PUBLIC.pem`.
"""

from __future__ import annotations

from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ec import SECP256R1, EllipticCurvePrivateKey, EllipticCurvePublicKey
from securesystemslib.signer import CryptoSigner, SSlibKey

from learnerkit.common.errors import ConfigError
from learnerkit_build.state import state_home, write_atomic

SCHEME = "ecdsa-sha2-nistp256"


def default_key_path() -> Path:
    return state_home() / "signing" / "ecdsa-p256.pem"


def public_key_path(private: Path) -> Path:
    return private.with_suffix(".pub")


def load_or_create_signer(path: Path | None = None) -> CryptoSigner:
    """The signer of the key at `path` (default under $LEARNERKIT_HOME); made, with its .pub, on first use."""
    path = path or default_key_path()
    if path.is_file():
        try:
            key = serialization.load_pem_private_key(path.read_bytes(), password=None)
        except (OSError, ValueError, TypeError) as e:
            raise ConfigError(f"{path}: not a readable unencrypted PEM private key: {e}") from e
        if not isinstance(key, EllipticCurvePrivateKey) or not isinstance(key.curve, SECP256R1):
            raise ConfigError(f"{path} is not an ECDSA P-256 private key")
        return CryptoSigner(key)
    signer = CryptoSigner.generate_ecdsa()
    write_atomic(path, signer.private_bytes)
    path.chmod(0o600)
    write_atomic(public_key_path(path), signer.public_key.keyval["public"].encode())
    return signer


def load_public_key(path: Path) -> SSlibKey:
    try:
        key = serialization.load_pem_public_key(path.read_bytes())
    except (OSError, ValueError) as e:
        raise ConfigError(f"{path}: not a readable PEM public key: {e}") from e
    if not isinstance(key, EllipticCurvePublicKey) or not isinstance(key.curve, SECP256R1):
        raise ConfigError(f"{path} is not an ECDSA P-256 public key")
    return SSlibKey.from_crypto(key, scheme=SCHEME)
