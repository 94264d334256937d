"""The publisher's signing key: ECDSA P-256 (cosign's default key type), kept as PEM under $LEARNERKIT_HOME.

The key handling itself is `learnerkit.common.signing`, shared with the scheduler's job provenance.

securesystemslib signs and verifies with it; the key id is securesystemslib's default id of the public key, so
in-toto and securesystemslib accept an envelope given only the public key, and cosign (which ignores key ids)
accepts it with `--key PUBLIC.pem`.
"""

from __future__ import annotations

from pathlib import Path

from securesystemslib.signer import CryptoSigner

from learnerkit.common import signing
from learnerkit.common.signing import SCHEME, load_public_key, public_key_path
from learnerkit_build.state import state_home

__all__ = ["SCHEME", "default_key_path", "load_or_create_signer", "load_public_key", "public_key_path"]


def default_key_path() -> Path:
    return state_home() / "signing" / "ecdsa-p256.pem"


def load_or_create_signer(path: Path | None = None) -> CryptoSigner:
    """The signer of the key at `path` (`image publish --key`; default under $LEARNERKIT_HOME); made, with its .pub,
    on first use. An error names the option, or the variable of the default's folder."""
    setting = "--key" if path is not None else "the default key under LEARNERKIT_HOME"
    return signing.load_or_create_signer(path or default_key_path(), setting)
