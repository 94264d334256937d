"""A sidecar killed while it stores the results is started again on the kept /job and stores them again; the job
ends with a status that says which results are complete (issue 27 D5). The real engine, etcd and SeaweedFS, with a
loopback proxy in front of SeaweedFS that holds one upload until the sidecar is killed."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from learnerkit.common import engine
from learnerkit.scheduler.config.policy import SubmitPolicy, origin
from learnerkit.scheduler.core.options import SchedulerOptions
from tests.integration.scheduler.conftest import RESULTS_BUCKET, Harness, leftovers, manifest
from tests.servers.proxy import FaultyProxy

pytestmark = [pytest.mark.integration, pytest.mark.services, pytest.mark.timeout(600)]

NAMES = ("a-first", "b-held", "c-last")
SIZE = 1_000_000
WRITE_RESULTS = "; ".join(f"head -c {SIZE} /dev/urandom > /job/results/{name}.bin" for name in NAMES)


@pytest.fixture
def proxied(
    etcd_server: Any, s3_server: Any, service_options: SchedulerOptions, scheduler_buckets: Any, faulty_s3: FaultyProxy
) -> Iterator[Harness]:
    """A scheduler that also allows the proxy's address as a tenant's object store."""
    stores = (str(origin(s3_server.endpoint_url)), str(origin(faulty_s3.endpoint_url)))
    made = Harness(etcd_server, dataclasses.replace(service_options, submit_policy=SubmitPolicy(object_stores=stores)))
    yield made
    made.kill()


def test_a_sidecar_killed_while_storing_is_started_again_and_stores_every_result(
    proxied: Harness, s3_server: Any, faulty_s3: FaultyProxy, scheduler_buckets: Any
) -> None:
    store = SimpleNamespace(
        endpoint_url=faulty_s3.endpoint_url, access_key=s3_server.access_key, secret_key=s3_server.secret_key
    )
    hold = faulty_s3.hold_requests_matching("PUT", "/results/b-held.bin")
    view = proxied.call(proxied.service.submit("team-a", manifest(store, WRITE_RESULTS)))
    job_id = view.job_id
    try:
        assert hold.reached.wait(120), proxied.call(proxied.service.get("team-a", job_id))
        sidecar = engine.engine().containers.get(f"lk-{job_id}-1-sidecar")
        sidecar.kill()  # SIGKILL while b-held.bin is on its way
        hold.cut = True
        hold.release.set()
        final = proxied.wait_status("team-a", job_id, {"COMPLETED", "FAILED", "HALTED", "CANCELLED"}, timeout=300)
        assert final.status == "COMPLETED", final
        assert final.reason == (
            "learner 1 completed; outputs stored again after 1 interrupted attempt(s): 3 result file(s) complete"
        ), final
        prefix = f"{job_id}/attempt-1/learner-1/results/"
        for name in NAMES:
            head = scheduler_buckets.head_object(Bucket=RESULTS_BUCKET, Key=f"{prefix}{name}.bin")
            assert head["ContentLength"] == SIZE, name
        assert not leftovers(job_id)
    finally:
        hold.release.set()
        if proxied.call(proxied.service.get("team-a", job_id)).status not in {"COMPLETED", "FAILED", "CANCELLED"}:
            proxied.call(proxied.service.cancel("team-a", job_id))
