"""The platform's keys over time: the signing key and the public keys of those it replaced.

`scheduler key rotate` moves the current key's public key into ``<key>.retired/<key id>.pub`` (beside the key:
``signing-key.pem`` keeps them in ``signing-key.retired/``) before it writes a new key in its place, so every key
that ever signed a job stays published (``GET /v1/keys``) and `job verify` matches each document's signature to
its key by the key id the envelope names. A retired private key is never kept: what it signed stays verifiable,
and nothing new can be signed with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from securesystemslib.signer import CryptoSigner, SSlibKey

from controller_sidecar.atomicfile import write_atomic
from learnerkit.common.errors import ConfigError
from learnerkit.common.signing import create_signer, load_public_key, load_signer, public_pem

RETIRED_SUFFIX = ".retired"


@dataclass(frozen=True)
class PublishedKey:
    keyid: str
    pem: str
    current: bool
    """The key that signs now; the others signed before a rotation."""


@dataclass(frozen=True)
class Rotation:
    retired: str
    """The key id of the key replaced."""
    current: CryptoSigner


def retired_folder(key: Path) -> Path:
    return key.with_name(key.stem + RETIRED_SUFFIX)


def retired_keys(key: Path) -> list[SSlibKey]:
    """The public keys rotated out, oldest first by file time; a file whose name is not its key's id is refused."""
    folder = retired_folder(key)
    if not folder.is_dir():
        return []
    found = []
    for path in sorted(folder.glob("*.pub"), key=lambda p: (p.stat().st_mtime, p.name)):
        public = load_public_key(path)
        if public.keyid != path.stem:
            raise ConfigError(f"{path}: holds the key {public.keyid}, not the key its name says")
        found.append(public)
    return found


def published_keys(key: Path, signer: CryptoSigner) -> list[PublishedKey]:
    """The current key first, then every retired one (each once)."""
    current = PublishedKey(signer.public_key.keyid, public_pem(signer), True)
    retired = [
        PublishedKey(k.keyid, str(k.keyval["public"]), False) for k in retired_keys(key) if k.keyid != current.keyid
    ]
    return [current, *retired]


def rotate(key: Path, passphrase: bytes | None = None, setting: str | None = None) -> Rotation:
    """A new signing key at ``key`` (encrypted with ``passphrase`` where one is given, which must also open the
    old one); the old key's public key is kept first, so a failure between the two writes loses no public key.
    ``setting``: what gave ``key``, named by an error."""
    old = load_signer(key, setting, passphrase)
    keyid = old.public_key.keyid
    write_atomic(retired_folder(key) / f"{keyid}.pub", public_pem(old).encode())
    return Rotation(keyid, create_signer(key, passphrase))
