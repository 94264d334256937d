"""Where a job's objects live in S3, in one place (the S3 twin of ``controller_sidecar/keys.py``).

Everything of a job lies under ``<results bucket>/<prefix><job_id>/``: its model code at ``model/model.zip``,
and the outputs of attempt ``k`` at ``attempt-<k>/learner-<n>/`` (results, logs, checkpoints).
"""

from __future__ import annotations

from learnerkit.common.errors import ConfigError
from learnerkit.scheduler.manifest.model import DataStore, JobManifest
from learnerkit.scheduler.manifest.storecheck import store_problems


def split_container(container: str) -> tuple[str, str]:
    """FfDL's `container` is a bucket; `bucket/prefix` narrows it to a folder."""
    bucket, _, prefix = container.partition("/")
    return bucket, (prefix.rstrip("/") + "/" if prefix else "")


def results_store(manifest: JobManifest) -> DataStore:
    """The store results go to; `ConfigError` where `store_problems` finds one (the parser's check, again)."""
    problems = store_problems(manifest)
    store = manifest.training_results_store
    if problems or store is None:
        raise ConfigError("; ".join(message for _, message in problems) or "no results store")
    return store


def job_location(manifest: JobManifest, job_id: str) -> tuple[str, str]:
    """The bucket and key prefix (ending in ``/``) under which everything of the job is stored."""
    bucket, prefix = split_container(results_store(manifest).training_results or "")
    return bucket, f"{prefix}{job_id}/"


def outputs_prefix(manifest: JobManifest, job_id: str, attempt: int, learner_id: int) -> tuple[str, str]:
    """The bucket and key prefix of one learner's outputs in one attempt."""
    bucket, prefix = job_location(manifest, job_id)
    return bucket, f"{prefix}attempt-{attempt}/learner-{learner_id}/"


def model_location(manifest: JobManifest, job_id: str) -> tuple[str, str]:
    """Where a job's model code archive is stored: beside its attempts, in the results store the tenant named."""
    bucket, prefix = job_location(manifest, job_id)
    return bucket, f"{prefix}model/model.zip"
