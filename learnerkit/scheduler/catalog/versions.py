"""Versions in the registry: stored from a verified job folder, resolved, listed, and brought back as a folder.

A version is stored bottom up: the weights and documents (blobs), the config, the version's manifest (by digest),
each document's referrer manifest, the referrers index, and last the tag ``v-<hex>`` that lists it. A register
that fails before that tag leaves only unlisted, unreferenced content (the registry's garbage collector removes
it), never a version half-stored that `model list` shows or an alias can point at.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from securesystemslib.signer import Key, Signer

from learnerkit.common.signing import canonical, open_signed
from learnerkit.scheduler.catalog import layout, oci
from learnerkit.scheduler.catalog.card import CARD_FILE, render_card
from learnerkit.scheduler.catalog.documents import documents, weights
from learnerkit.scheduler.catalog.errors import CatalogError, NotFoundError, StoreError
from learnerkit.scheduler.catalog.layout import Blob
from learnerkit.scheduler.catalog.lineage import lineage
from learnerkit.scheduler.catalog.names import Reference, check_name, repository
from learnerkit.scheduler.catalog.trialstatement import TRIAL_FILE, sign_trial
from learnerkit.scheduler.provenance.evaluation import ROUND_PREFIX, ROUND_SUFFIX, round_of
from learnerkit.scheduler.provenance.factsheet import FACTSHEET_JSON
from learnerkit.scheduler.provenance.modelsig import SIGNATURE_FILE
from learnerkit.scheduler.provenance.verify import PROVENANCE_FILE, NoProvenanceError, verify_folder


@dataclass(frozen=True)
class Version:
    """A version as the registry lists it."""

    name: str
    version: str
    """The manifest's digest."""
    job: str | None
    created: str
    attested: bool
    files: list[Blob]
    lineage: dict[str, Any]


@dataclass(frozen=True)
class Store:
    """One tenant's models in one registry."""

    host: str
    tenant: str

    def repo(self, name: str) -> str:
        return repository(self.tenant, name)


def signed_job(folder: Path, keys: Sequence[Key]) -> tuple[dict[str, Any], dict[int, dict[str, Any]]]:
    """The job's provenance statement and its rounds' statements, once the whole folder verifies; CatalogError
    naming each failed check (or the missing signature) otherwise."""
    if not (folder / SIGNATURE_FILE).is_file():
        raise CatalogError(f"{folder}: no model signature ({SIGNATURE_FILE}): not a job's signed model folder")
    try:
        report = verify_folder(folder, keys)
    except NoProvenanceError as e:
        raise CatalogError(str(e)) from e
    if not report.ok:
        failed = "; ".join(f"{c.item}: {c.state.value} {c.detail}".strip() for c in report.failed)
        raise CatalogError(f"{folder}: the job does not verify, nothing registered: {failed}")
    statement, _ = open_signed((folder / PROVENANCE_FILE).read_bytes(), keys, PROVENANCE_FILE)
    rounds = {}
    for path in sorted(folder.glob(f"{ROUND_PREFIX}*{ROUND_SUFFIX}")):
        number = round_of(path.relative_to(folder).as_posix())
        if number is not None:
            rounds[number] = open_signed(path.read_bytes(), keys, path.name)[0]
    return statement, rounds


def framework_of(statement: Mapping[str, Any]) -> str:
    manifest = statement["predicate"]["buildDefinition"]["externalParameters"].get("manifest", {})
    return str((manifest.get("framework") or {}).get("name") or "other")


def register(
    store: Store,
    name: str,
    folder: Path,
    keys: Sequence[Key],
    parent: str | None = None,
    trial: Mapping[str, Any] | None = None,
    owner: tuple[str, str] | None = None,
    signer: Signer | None = None,
) -> Version:
    """Store the job in ``folder`` as a version of ``name``; the same job registered again is the same version.
    ``trial``: the sweep trial the job ran, as the scheduler knows it, signed with ``signer`` (the platform's
    key) into the version's trial statement and named in its lineage (without a signer, no trial is named: the
    lineage gate checks only what is signed); ``owner``: (tenant, job id) the signed statement must name, when
    the folder came from that job's results store (which its tenant can write: another job's signed documents
    copied there are refused, never registered as this job's)."""
    check_name(name)
    if parent is not None:
        ref = Reference.parse(parent)
        if ref.version is None:
            raise CatalogError(f"--parent {parent!r}: name the version it was fine-tuned from, NAME@sha256:...")
        resolve(store, ref)
    statement, rounds = signed_job(folder, keys)
    if owner is not None:
        definition = statement["predicate"]["buildDefinition"]
        signed = (definition["externalParameters"].get("tenant"), definition["internalParameters"].get("jobId"))
        if signed != owner:
            raise CatalogError(
                f"job {owner[1]} of tenant {owner[0]}: its stored provenance is of job {signed[1]} of tenant "
                f"{signed[0]}, nothing registered"
            )
    files = weights(statement)
    if not files:
        raise CatalogError(f"{folder}: the job stored no result files: there is no model to register")
    sheet = json.loads((folder / FACTSHEET_JSON).read_bytes())
    card = render_card(name, sheet, framework_of(statement))
    with tempfile.TemporaryDirectory(prefix="learnerkit-card-") as scratch:
        card_path = Path(scratch) / "README.md"
        card_path.write_text(card, encoding="utf-8")
        sources = {CARD_FILE: card_path}
        if trial is not None and signer is not None:
            sources[TRIAL_FILE] = Path(scratch) / "trial.json"
            sources[TRIAL_FILE].write_bytes(sign_trial(trial, statement, signer))
        return _push(store, name, folder, statement, rounds, files, sources, parent, trial if signer else None)


def _push(
    store: Store,
    name: str,
    folder: Path,
    statement: Mapping[str, Any],
    rounds: Mapping[int, Mapping[str, Any]],
    files: Sequence[str],
    sources: Mapping[str, Path],
    parent: str | None,
    trial: Mapping[str, Any] | None,
) -> Version:
    repo = store.repo(name)

    signed = {s["name"]: "sha256:" + s["digest"]["sha256"] for s in statement["subject"]}

    def blob(path: str) -> Blob:
        # A result was hashed as the folder verified: its signed digest is its digest (the registry checks it
        # again on upload, so a file changed since is refused, never stored under the signed digest).
        source = sources.get(path) or folder / path
        digest = signed.get(path) or oci.file_digest(source)
        oci.put_blob_file(store.host, repo, source, digest)
        return Blob(path, digest, source.stat().st_size)

    weight_blobs = [blob(path) for path in files]
    record = lineage(statement, list(rounds.values()), parent, trial)
    finished = str(statement["predicate"]["runDetails"].get("metadata", {}).get("finishedOn", ""))
    config = canonical(
        {
            "descriptor": {"name": name, "createdAt": finished, "family": framework_of(statement)},
            "config": {"format": "raw"},
            "modelfs": {"type": "layers", "diffIds": [b.digest for b in weight_blobs]},
            "lineage": record,
        }
    )
    config_digest = oci.put_blob(store.host, repo, config)
    annotations = {
        "org.opencontainers.image.title": name,
        "org.opencontainers.image.created": finished,
        "dev.learnerkit.job": str(record["job"]),
        layout.ATTESTED: "true",
    }
    manifest = layout.version_manifest(config, config_digest, weight_blobs, annotations)
    digest = oci.put_manifest(store.host, repo, oci.sha256_digest(manifest), manifest, layout.OCI_MANIFEST)
    subject = layout.descriptor(layout.OCI_MANIFEST, digest, len(manifest))
    empty = oci.put_blob(store.host, repo, layout.EMPTY)
    entries = []
    kinds = documents(folder, statement, rounds)
    if TRIAL_FILE in sources:
        kinds["trial"] = [TRIAL_FILE]
    for kind, paths in kinds.items():
        referrer = layout.referrer_manifest(kind, [blob(p) for p in paths], subject, empty)
        ref_digest = oci.sha256_digest(referrer)
        oci.put_manifest(store.host, repo, ref_digest, referrer, layout.OCI_MANIFEST)
        entries.append(
            {
                "mediaType": layout.OCI_MANIFEST,
                "digest": ref_digest,
                "size": len(referrer),
                "artifactType": layout.ARTIFACT_TYPES.get(kind, layout.DSSE_TYPE),
                "annotations": {layout.DOCUMENT: kind},
            }
        )
    index = layout.referrers_index(entries)
    oci.put_manifest(store.host, repo, layout.tag_schema_tag(digest), index, layout.OCI_INDEX)
    oci.put_manifest(store.host, repo, layout.version_tag(digest), manifest, layout.OCI_MANIFEST)
    return Version(name, digest, record["job"], finished, True, weight_blobs, record)


def _manifest(store: Store, name: str, reference: str) -> tuple[dict[str, Any], str]:
    found = oci.get_manifest(store.host, store.repo(name), reference)
    if found is None:
        raise NotFoundError(f"model {name}: no version {reference} for tenant {store.tenant}")
    return layout.parse_json(found[0], f"{name}@{found[1]}"), found[1]


def resolve(store: Store, ref: Reference) -> str:
    """The version digest ``ref`` names; NotFoundError naming the model, version or alias that is not there."""
    tags = oci.tags(store.host, store.repo(ref.name))
    if not any(tag.startswith("v-") for tag in tags):
        raise NotFoundError(f"no model named {ref.name!r} for tenant {store.tenant}")
    if ref.version is not None:
        if layout.version_tag(ref.version) not in tags:
            raise NotFoundError(f"model {ref.name}: no version {ref.version} for tenant {store.tenant}")
        return ref.version
    alias = ref.pinned()
    found = oci.get_manifest(store.host, store.repo(ref.name), alias) if alias in tags else None
    if found is None:
        raise NotFoundError(f"model {ref.name}: no alias {alias!r}")
    return found[1]


def models(store: Store) -> list[str]:
    prefix = f"{store.tenant}/"
    return sorted(r.removeprefix(prefix) for r in oci.repositories(store.host) if r.startswith(prefix))


def version_digests(store: Store, name: str) -> list[str]:
    return sorted(
        "sha256:" + t.removeprefix("v-") for t in oci.tags(store.host, store.repo(name)) if t.startswith("v-")
    )


def show(store: Store, name: str, digest: str) -> Version:
    manifest, _ = _manifest(store, name, digest)
    config = layout.parse_json(oci.get_blob(store.host, store.repo(name), manifest["config"]["digest"]), "config")
    annotations = manifest.get("annotations") or {}
    return Version(
        name,
        digest,
        annotations.get("dev.learnerkit.job"),
        annotations.get("org.opencontainers.image.created", ""),
        annotations.get(layout.ATTESTED) == "true",
        layout.layers_of(manifest, f"{name}@{digest}"),
        dict(config.get("lineage") or {}),
    )


def referrers(store: Store, name: str, digest: str) -> dict[str, tuple[str, list[Blob]]]:
    """Each document of the version: kind -> (its referrer manifest's digest, its files); only referrers whose
    ``subject`` is this version are taken."""
    repo = store.repo(name)
    found = oci.get_manifest(store.host, repo, layout.tag_schema_tag(digest))
    if found is None:
        return {}
    docs: dict[str, tuple[str, list[Blob]]] = {}
    for entry in layout.parse_json(found[0], "referrers index").get("manifests", []):
        manifest, ref_digest = _manifest(store, name, str(entry["digest"]))
        if (manifest.get("subject") or {}).get("digest") != digest:
            continue
        kind = str((manifest.get("annotations") or {}).get(layout.DOCUMENT, ""))
        docs[kind] = (ref_digest, layout.layers_of(manifest, f"referrer {ref_digest}"))
    return docs


def materialize(
    store: Store, name: str, digest: str, folder: Path, *, weights: bool = True
) -> tuple[Version, dict[str, list[Blob]], list[str]]:
    """The version's files and documents written into ``folder`` as a `job download` folder holds them;
    (the version, its documents, each blob that did not come back as its digest). ``weights=False``: the model's
    files are streamed through their digest check only, not written (a verify hashes each once)."""
    version = show(store, name, digest)
    docs = {kind: files for kind, (_, files) in referrers(store, name, digest).items()}
    broken = []
    for blob in version.files:
        try:
            if weights:
                _download(store, name, blob, folder / blob.path)
            else:
                for _ in oci.stream_blob(store.host, store.repo(name), blob.digest):
                    pass
        except CatalogError as e:
            broken.append(f"{blob.path}: {e}")
    for blob in (b for files in docs.values() for b in files):
        try:
            _download(store, name, blob, folder / blob.path)
        except CatalogError as e:
            broken.append(f"{blob.path}: {e}")
    return version, docs, broken


def _download(store: Store, name: str, blob: Blob, target: Path) -> None:
    """Write the blob atomically; bytes that are not its digest are kept (the checks name what they change) and
    StoreError says so."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    try:
        with os.fdopen(fd, "wb") as out:
            try:
                for chunk in oci.stream_blob(store.host, store.repo(name), blob.digest):
                    out.write(chunk)
            except StoreError:
                out.flush()
                Path(temp).replace(target)
                raise
        Path(temp).replace(target)
    finally:
        Path(temp).unlink(missing_ok=True)
