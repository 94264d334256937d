"""An evaluation data object served to `job verify` to hash again: only one that a round statement of the job,
signed by this scheduler's key, lists, read from the job's results store with the job's account (the account the
evaluation sidecars read it with)."""

from __future__ import annotations

import asyncio
import logging

from controller_sidecar.endpoints import Endpoints
from learnerkit.common.signing import EnvelopeError, open_envelope
from learnerkit.scheduler.core.tracking import Tracked
from learnerkit.scheduler.errors import UnknownFileError
from learnerkit.scheduler.facade import FileStream
from learnerkit.scheduler.outputs.reader import OutputsReader
from learnerkit.scheduler.provenance.evaluation import listed_data, round_of
from learnerkit.scheduler.provenance.writer import ProvenanceWriter

LOGGER = logging.getLogger(__name__)


async def open_evaluation_data(
    reader: OutputsReader, endpoints: Endpoints, tracked: Tracked, writer: ProvenanceWriter | None, uri: str
) -> FileStream:
    """The object ``uri`` (``s3://bucket/key``); UnknownFileError unless a round statement of the job lists it."""
    state, manifest = tracked.state, tracked.manifest
    listed: set[str] = set()
    if writer is not None:
        key = writer.signer.public_key
        for stored in await reader.outputs(endpoints, manifest, state, "provenance"):
            if round_of(stored.path) is None:
                continue
            stream = await reader.open_output(endpoints, manifest, state, stored.path)
            raw = await asyncio.to_thread(stream.read)
            try:
                listed |= listed_data(open_envelope(raw, key, stored.path))
            except EnvelopeError as e:
                LOGGER.warning("job %s: %s: its data is not served to verify: %s", state.job_id, stored.path, e)
    if uri not in listed:
        raise UnknownFileError(f"job {state.job_id}: no evaluation round statement of it lists {uri!r}")
    bucket, _, key_name = uri.removeprefix("s3://").partition("/")
    return await reader.open_object(endpoints, state, bucket, key_name)
