"""A job's store credentials in etcd: kept while a resume needs them, deleted once it can never run again.

etcd is read directly (every key of the job, its credentials key included), not through the scheduler.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from controller_sidecar import keys
from learnerkit.scheduler.errors import JobStateError
from learnerkit.scheduler.jobs.store import credentials_key
from tests.integration.scheduler.conftest import TERMINAL, Harness, manifest
from tests.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.services, pytest.mark.timeout(600)]


def holding_secret(harness: Harness, job_id: str, secret: str) -> list[str]:
    """The job's keys in etcd whose value holds ``secret``."""

    async def read() -> dict[str, bytes]:
        etcd = harness.service.shared.store.etcd
        found = dict(await etcd.get_prefix(keys.job_prefix(job_id, harness.root)))
        stored = await etcd.get(credentials_key(job_id))
        if stored is not None:
            found[credentials_key(job_id)] = stored[0]
        return found

    return sorted(key for key, value in harness.call(read()).items() if secret.encode() in value)


def test_credentials_stay_for_a_resume_and_go_when_the_job_can_never_run_again(
    harness: Harness, s3_server: Any, scheduler_buckets: Any, etcd_server: Any
) -> None:
    secret = s3_server.secret_key
    submit = harness.service.submit
    completed = harness.call(submit("team-a", manifest(s3_server, "true")))
    failed = harness.call(submit("team-a", manifest(s3_server, "exit 3")))
    cancelled = harness.call(submit("team-a", manifest(s3_server, "sleep 300")))
    assert holding_secret(harness, completed.job_id, secret) == [credentials_key(completed.job_id)]

    harness.call(harness.service.cancel("team-a", cancelled.job_id))
    assert harness.wait_status("team-a", completed.job_id, TERMINAL).status == "COMPLETED"
    assert harness.wait_status("team-a", failed.job_id, TERMINAL).status == "FAILED"
    # A job's end is saved first, its provenance made due, then its credentials deleted: shortly after.
    for gone in (completed.job_id, cancelled.job_id):
        wait_until(lambda j=gone: holding_secret(harness, j, secret) == [], 30, message=f"{gone}'s credentials deleted")
    assert holding_secret(harness, failed.job_id, secret) == [credentials_key(failed.job_id)], "a resume needs them"
    log = harness.call(harness.service.logs("team-a", completed.job_id))  # kept in memory until a restart
    assert log.finished
    # A job that ended for good under an older scheduler (or just before a crash) keeps them: the start deletes them.
    older = {"manifest": manifest(s3_server, "true"), "source": "manifest.yml"}
    harness.call(harness.service.shared.store.etcd.put(credentials_key(cancelled.job_id), json.dumps(older)))

    harness.kill()
    again = Harness(etcd_server, harness.options)
    try:
        view = again.call(again.service.get("team-a", completed.job_id))
        assert view.status == "COMPLETED" and view.results and view.results.startswith("s3://"), view
        with pytest.raises(JobStateError, match="deleted its store's credentials"):
            again.call(again.service.logs("team-a", completed.job_id))
        assert holding_secret(again, completed.job_id, secret) == []
        assert holding_secret(again, cancelled.job_id, secret) == []
        assert again.call(again.service.get("team-a", cancelled.job_id)).status == "CANCELLED"
        record = json.loads(again.call(again.service.shared.store.etcd.get(credentials_key(completed.job_id)))[0])
        assert record["credentials"] == "deleted"
        deleted = again.call(again.service.delete("team-a", failed.job_id))  # `job delete`
        assert deleted.status == "FAILED"
        assert holding_secret(again, failed.job_id, secret) == []
        assert again.call(again.service.shared.store.etcd.get(credentials_key(failed.job_id))) is None
        assert failed.job_id not in [job.job_id for job in again.call(again.service.list_jobs("team-a"))]
    finally:
        again.kill()
