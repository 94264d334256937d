"""Whether a manifest's data stores can run here: the one check `job validate` (through the parser) and the
scheduler's submit and deploy (through `jobs.layout.results_store`) share, so validate refuses everything they would.

The sidecar holds one set of object-store credentials per job: results, logs and checkpoints go to an object
store (`s3_datastore` or `mount_cos`), and training data copied in comes from that same endpoint. A host folder
(`mount_volume`) serves training data only.
"""

from __future__ import annotations

from learnerkit.common.yamlfile import FieldPath
from learnerkit.scheduler.manifest.model import DataStore, JobManifest


def _index(manifest: JobManifest, store: DataStore) -> int:
    return next(i for i, candidate in enumerate(manifest.data_stores) if candidate is store)


def store_problems(manifest: JobManifest) -> list[tuple[FieldPath, str]]:
    """Each reason the job's stores cannot serve it, with the field it is about; empty when they can."""
    results = manifest.training_results_store
    if results is None or not results.training_results:
        return [
            (
                ("data_stores",),
                "no data store has training_results: results, logs and checkpoints need an object store container"
                " (or a scheduler with a default results bucket, LEARNERKIT_RESULTS_BUCKET, and training data on an"
                " object store)",
            )
        ]
    where: FieldPath = ("data_stores", _index(manifest, results), "training_results")
    if results.mode != "copy":
        return [
            (
                where,
                f"a {results.type} store serves training data only; results, logs and checkpoints go to an object"
                " store: add an s3_datastore or mount_cos store with training_results (learnerkit.training_results"
                " names it)",
            )
        ]
    data = manifest.training_data_store
    if data.mode == "copy" and data.connection.get("auth_url") != results.connection.get("auth_url"):
        return [
            (
                ("data_stores", _index(manifest, data), "connection", "auth_url"),
                f"data stores {data.id!r} and {results.id!r}: training data and results must be on one object store",
            )
        ]
    return []
