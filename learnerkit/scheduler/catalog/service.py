"""The catalog's operations over one tenant's store: alias moves on proof, history, verify, lineage, pull, and
Hugging Face export and import."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from securesystemslib.signer import Key, Signer

from learnerkit.common.signing import canonical
from learnerkit.scheduler.catalog import aliaslog, layout, oci
from learnerkit.scheduler.catalog.card import CARD_FILE, read_front_matter
from learnerkit.scheduler.catalog.errors import CatalogError, NotFoundError, RefusedError
from learnerkit.scheduler.catalog.lineage import uses
from learnerkit.scheduler.catalog.names import Reference, check_alias, check_name
from learnerkit.scheduler.catalog.proof import Proof, prove
from learnerkit.scheduler.catalog.versions import Store, Version, materialize, models, resolve, show, version_digests
from learnerkit.scheduler.provenance.report import Check, State


@contextmanager
def _scratch(near: Path | None = None) -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="learnerkit-model-", dir=near) as folder:
        yield Path(folder)


@dataclass(frozen=True)
class Verified:
    reference: str
    version: str
    proof: Proof
    log: list[Check]

    @property
    def ok(self) -> bool:
        return not self.proof.failed and all(c.state is State.OK for c in self.log)

    def to_dict(self) -> dict[str, Any]:
        return {
            "reference": self.reference,
            "version": self.version,
            "verified": self.ok,
            **self.proof.to_dict(),
            "log": [{"item": c.item, "state": c.state.value, "detail": c.detail} for c in self.log],
        }


def check_version(store: Store, name: str, digest: str, keys: Sequence[Key]) -> Proof:
    with _scratch() as folder:
        version, _, broken = materialize(store, name, digest, folder, weights=False)
        return prove(folder, version, keys, broken, weights_streamed=True)


def move_alias(
    store: Store, name: str, alias: str, version: str, keys: Sequence[Key], signer: Signer, by: str, at: str
) -> dict[str, Any]:
    """Point ``alias`` at ``version`` when every gate holds; RefusedError naming each failed check otherwise."""
    check_alias(alias)
    target = resolve(store, Reference.parse(version if "@" in version else f"{name}@{version}"))
    proof = check_version(store, name, target, keys)
    if proof.failed:
        raise RefusedError(f"{name}@{alias} not moved to {target}: " + "; ".join(proof.reasons()), proof.failed)
    envelopes = aliaslog.read_log(store, name)
    entries, chain = aliaslog.check_chain(envelopes, keys, name)
    broken = [c for c in chain if c.state is not State.OK]
    if broken:
        raise RefusedError(
            f"{name}: the alias log does not verify, no move appended: "
            + "; ".join(f"{c.item}: {c.detail}" for c in broken),
            ["alias log"],
        )
    source = aliaslog.current(entries, alias)
    return aliaslog.append(store, name, envelopes, alias, source, target, by, at, proof.passed, signer)


def history(store: Store, name: str, keys: Sequence[Key]) -> tuple[list[dict[str, Any]], list[Check]]:
    if not version_digests(store, name):
        raise NotFoundError(f"no model named {name!r} for tenant {store.tenant}")
    entries, checks = aliaslog.check_chain(aliaslog.read_log(store, name), keys, name)
    return [e.move for e in entries], checks


def verify(store: Store, text: str, keys: Sequence[Key]) -> Verified:
    """A version or an alias checked again offline: the alias log's chain and the alias's tag, every referrer,
    every file hashed again."""
    ref = Reference.parse(text)
    digest = resolve(store, ref)
    proof = check_version(store, ref.name, digest, keys)
    log: list[Check] = []
    if ref.alias is not None:
        entries, log = aliaslog.check_chain(aliaslog.read_log(store, ref.name), keys, ref.name)
        moved = aliaslog.current(entries, ref.alias)
        if moved != digest:
            log.append(
                Check(
                    f"alias {ref.alias}",
                    State.CHANGED,
                    f"its tag points at {digest}, the log last moved it to {moved or 'nothing'}",
                )
            )
        else:
            log.append(Check(f"alias {ref.alias}", State.OK, f"the log's last move of it, to {digest}"))
    return Verified(str(ref), digest, proof, log)


def lineage_of(store: Store, text: str) -> Version:
    ref = Reference.parse(text)
    return show(store, ref.name, resolve(store, ref))


def used_by(store: Store, digest: str) -> list[dict[str, Any]]:
    """Every version of the tenant whose lineage has ``digest`` (a data object's or an image's SHA-256) or names
    that object or image; what of it does."""
    found = []
    for name in models(store):
        for version in version_digests(store, name):
            matched = uses(show(store, name, version).lineage, digest)
            if matched:
                found.append({"name": name, "version": version, "uses": matched})
    return found


def pull(store: Store, text: str, target: Path) -> Version:
    """The version's files and documents into ``target`` (new or empty), every blob checked against its digest;
    nothing is left in ``target`` when one is not."""
    ref = Reference.parse(text)
    digest = resolve(store, ref)
    if target.exists() and any(target.iterdir()):
        raise CatalogError(f"{target}: not empty; pull into a new folder")
    target.parent.mkdir(parents=True, exist_ok=True)
    with _scratch(target.parent) as folder:
        version, _, broken = materialize(store, ref.name, digest, folder)
        if broken:
            raise CatalogError(f"{ref}: blobs that are not their digest, nothing pulled: {'; '.join(broken)}")
        if target.exists():
            target.rmdir()
        folder.replace(target)
        folder.mkdir()  # for the TemporaryDirectory's cleanup
    return version


def export_hf(store: Store, text: str, target: Path) -> Version:
    """A Hugging Face folder: the card as README.md at the top, the model's files, the signed documents."""
    version = pull(store, text, target)
    card = target / CARD_FILE
    if card.is_file():
        shutil.copyfile(card, target / "README.md")
    return version


def import_hf(store: Store, name: str, folder: Path) -> Version:
    """A Hugging Face folder stored as a version marked unattested: its files as they are, its README.md as its
    card; no alias can point at it (nothing the platform signed proves it)."""
    check_name(name)
    readme = folder / "README.md"
    if not readme.is_file():
        raise CatalogError(f"{folder}: no README.md: not a Hugging Face model folder")
    read_front_matter(readme.read_text(encoding="utf-8", errors="replace"), str(readme))
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p != readme and not p.name.startswith("."))
    if not files:
        raise CatalogError(f"{folder}: no model files beside README.md")
    repo = store.repo(name)
    blobs = []
    for path in files:
        digest = oci.file_digest(path)
        oci.put_blob_file(store.host, repo, path, digest)
        blobs.append(layout.Blob(layout.safe_path(path.relative_to(folder).as_posix()), digest, path.stat().st_size))
    record: dict[str, Any] = {"job": None, "imported": str(folder.name)}
    config = canonical(
        {
            "descriptor": {"name": name},
            "config": {"format": "raw"},
            "modelfs": {"type": "layers", "diffIds": [b.digest for b in blobs]},
            "lineage": record,
        }
    )
    config_digest = oci.put_blob(store.host, repo, config)
    annotations = {"org.opencontainers.image.title": name, layout.ATTESTED: "false"}
    manifest = layout.version_manifest(config, config_digest, blobs, annotations)
    digest = oci.put_manifest(store.host, repo, oci.sha256_digest(manifest), manifest, layout.OCI_MANIFEST)
    subject = layout.descriptor(layout.OCI_MANIFEST, digest, len(manifest))
    card_digest = oci.file_digest(readme)
    oci.put_blob_file(store.host, repo, readme, card_digest)
    empty = oci.put_blob(store.host, repo, layout.EMPTY)
    card = layout.referrer_manifest(
        "card", [layout.Blob(CARD_FILE, card_digest, readme.stat().st_size)], subject, empty
    )
    card_ref = oci.put_manifest(store.host, repo, oci.sha256_digest(card), card, layout.OCI_MANIFEST)
    index = layout.referrers_index(
        [
            {
                "mediaType": layout.OCI_MANIFEST,
                "digest": card_ref,
                "size": len(card),
                "artifactType": layout.CARD_TYPE,
                "annotations": {layout.DOCUMENT: "card"},
            }
        ]
    )
    oci.put_manifest(store.host, repo, layout.tag_schema_tag(digest), index, layout.OCI_INDEX)
    oci.put_manifest(store.host, repo, layout.version_tag(digest), manifest, layout.OCI_MANIFEST)
    return Version(name, digest, None, "", False, blobs, record)
