"""`learnerkit sidecar halt` against a real etcd: it halts pairs run by hand, and refuses the scheduler's jobs."""

from __future__ import annotations

import asyncio
import threading

import pytest

from controller_sidecar import keys
from controller_sidecar.etcdstore import EtcdStore
from learnerkit.common.errors import ConfigError
from learnerkit.pair.etcd import request_halt
from tests.servers.etcd import EtcdServer

pytestmark = pytest.mark.services


def read(server: EtcdServer, key: str) -> bytes | None:
    async def get() -> bytes | None:
        store = await EtcdStore.connect(server.settings())
        try:
            found = await store.get(key)
        finally:
            await store.close()
        return None if found is None else found[0]

    return asyncio.run(get())


def put(server: EtcdServer, key: str, value: str) -> None:
    async def write() -> None:
        store = await EtcdStore.connect(server.settings())
        try:
            await store.put(key, value)
        finally:
            await store.close()

    asyncio.run(write())


def test_halt_of_a_pair_run_by_hand_writes_the_halt_key(etcd_server: EtcdServer, job_id: str) -> None:
    request_halt(etcd_server.settings(), job_id)
    assert read(etcd_server, keys.halt_key(job_id)) == b"halt"


def test_halt_of_a_scheduler_job_is_refused_and_names_the_job_command(etcd_server: EtcdServer, job_id: str) -> None:
    put(etcd_server, keys.spec_key(job_id), "{}")
    with pytest.raises(ConfigError, match=f"learnerkit job halt {job_id}"):
        request_halt(etcd_server.settings(), job_id)
    assert read(etcd_server, keys.halt_key(job_id)) is None


def test_halt_waits_out_an_etcd_restart(etcd_server: EtcdServer, job_id: str) -> None:
    """The host's etcd calls retry transient errors like the sidecar: a restarting etcd is waited out."""
    etcd_server.stop()
    restart = threading.Timer(1.0, etcd_server.start)
    restart.start()
    try:
        request_halt(etcd_server.settings(), job_id)
    finally:
        restart.join()
        etcd_server.start()
    assert read(etcd_server, keys.halt_key(job_id)) == b"halt"
