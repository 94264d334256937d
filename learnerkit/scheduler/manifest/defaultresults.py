"""The scheduler's default results store: where a manifest without `training_results` keeps its results.

FfDL put such results in its own internal bucket. Here the sidecar holds one set of object-store credentials per
job, and they also fetch the training data a tenant names: handing it the scheduler's own key would let a tenant
copy any bucket that key reaches into its learner. So the default store is the results bucket of the scheduler's
settings (``ResourceDefaults.results_bucket``) on the tenant's own training-data object store, under the tenant's
credentials, in a folder per tenant (docs/migrating-from-ffdl.md).
"""

from __future__ import annotations

from dataclasses import replace

from learnerkit.scheduler.manifest.model import DataStore, JobManifest

DEFAULT_RESULTS_STORE_ID = "learnerkit-results"
"""The id of the store added for the default results; a manifest that uses this id itself gets none."""


def tenant_results(bucket: str, tenant: str) -> str:
    """The container of a tenant's default results: a folder of its own in the results bucket."""
    return f"{bucket}/tenants/{tenant}"


def with_default_results(manifest: JobManifest, bucket: str | None, tenant: str) -> JobManifest:
    """``manifest`` with the default results store added where it names none and one can be made; else as it is."""
    if bucket is None or manifest.extensions.training_results is not None:
        return manifest
    if any(store.training_results for store in manifest.data_stores):
        return manifest
    if any(store.id == DEFAULT_RESULTS_STORE_ID for store in manifest.data_stores):
        return manifest
    data = manifest.training_data_store
    if data.mode != "copy":
        return manifest
    store = DataStore(
        id=DEFAULT_RESULTS_STORE_ID,
        type=data.type,
        training_data=None,
        training_results=tenant_results(bucket, tenant),
        connection=data.connection,
        credentials=data.credentials,
        scheduler_default=True,
    )
    return replace(manifest, data_stores=(*manifest.data_stores, store))


def default_results(manifest: JobManifest) -> str | None:
    """The container of the default results store where the scheduler added one."""
    store = next((s for s in manifest.data_stores if s.scheduler_default), None)
    return store.training_results if store is not None else None
