"""A real pair's sidecar puts its provenance record in the job's etcd records before its final status: the scheduler,
seeing the learner end, finds the digests there (not in the tenant's bucket)."""

from __future__ import annotations

import asyncio
import hashlib
import uuid

import pytest

from controller_sidecar import keys
from controller_sidecar.etcdstore import EtcdStore
from controller_sidecar.provenancerecord import Digested
from controller_sidecar.recordchannel import HEAD, RecordsRead, assemble
from controller_sidecar.status import Phase
from tests.integration.controller_sidecar.conftest import RESULTS_BUCKET, Pairs

pytestmark = [pytest.mark.integration, pytest.mark.services, pytest.mark.timeout(600)]


def test_the_record_reaches_etcd_before_the_final_status(pairs: Pairs) -> None:
    job_id = f"t-{uuid.uuid4().hex[:10]}"
    outputs = {"results": {"bucket": RESULTS_BUCKET, "prefix": f"{job_id}/attempt-1/learner-1/"}}
    spec = pairs.spec(
        ("sh", "-c", "echo weights > /job/results/model.bin"), job_id=job_id, data_prefix=None, config=outputs
    )
    handle = pairs.start(spec)
    final = pairs.wait_terminal(handle, spec.job_id, timeout=180)
    assert final.phase is Phase.COMPLETED, pairs.describe(handle, spec.job_id)

    async def read() -> tuple[RecordsRead, int, int]:
        etcd = await EtcdStore.connect(pairs.etcd_settings)
        try:
            found = await etcd.get_prefix(keys.provenance_prefix(spec.job_id))
            head = await etcd.get(keys.provenance_record_prefix(spec.job_id, 1, 1) + HEAD)
            status = await etcd.get(keys.learner_status_key(spec.job_id, 1))
            assert head is not None and status is not None
            return assemble(found, spec.job_id, keys.ROOT), head[1], status[1]
        finally:
            await etcd.close()

    records, head_revision, status_revision = asyncio.run(read())
    digest = hashlib.sha256(b"weights\n").hexdigest()
    assert records.records[(1, 1)].results == (Digested("results/model.bin", digest, 8),)
    assert head_revision < status_revision, "the record is in etcd before the final status"
