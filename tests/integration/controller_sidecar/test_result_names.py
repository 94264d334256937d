"""Every result name the learner can make is stored under a key of its own, or refused by name while the
rest are still stored (issue 27: D4, D14, D15), against the real S3 (SeaweedFS)."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest

from controller_sidecar.outputs import SHOWN_REASON_CHARS, store_tree
from controller_sidecar.prom import SidecarMetrics
from controller_sidecar.resultkeys import original_name
from controller_sidecar.s3store import S3Store
from controller_sidecar.settings import S3Location, load_settings
from tests.servers.s3 import SeaweedServer

pytestmark = pytest.mark.services

BUCKET = "learnerkit-result-names"
LONG_FOLDERS = [f"{'d' * 200}{i}" for i in range(6)]
"""Six segments of 201 bytes: a key of about 1,320 bytes, past S3's 1,024."""


def write(results: Path, name: bytes, data: bytes) -> None:
    path = results / os.fsdecode(name)  # surrogate escapes: the exact bytes on disk
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def test_every_result_is_stored_under_its_own_key_or_refused_by_name(s3_server: SeaweedServer, tmp_path: Path) -> None:
    results = tmp_path / "results"
    names: dict[bytes, bytes] = {
        b"model.onnx": b"onnx",
        b"caf\xe9-latin1.txt": b"not utf-8",  # D4: botocore cannot encode this name
        b"x\\y.txt": b"backslash",  # D15: must not overwrite x/y.txt
        b"x/y.txt": b"slash",
        b"line\nbreak.txt": b"newline",
        b"100%.txt": b"percent",
        "ünïcödé.txt".encode(): b"utf-8",
    }
    for name, data in names.items():
        write(results, name, data)
    long_name = "/".join(LONG_FOLDERS) + "/weights.bin"  # D14
    write(results, os.fsencode(long_name), b"too long a key")
    settings = load_settings(
        {
            "ETCD_ENDPOINTS": "127.0.0.1:2379",
            "AWS_ACCESS_KEY_ID": "k",
            "AWS_SECRET_ACCESS_KEY": "s",
            "LEARNERKIT_SIDECAR_CONFIG_JSON": json.dumps(
                {
                    "job_id": "job-1",
                    "learner_id": 1,
                    "results": {"bucket": BUCKET},
                    "data": {"mode": "mount"},
                    "job_dir": str(tmp_path),
                }
            ),
        }
    )
    store = S3Store(s3_server.settings())
    store.ensure_bucket(BUCKET)
    location = S3Location(BUCKET, "job-1/results/")

    outcome = asyncio.run(store_tree(settings, store, SidecarMetrics("job-1", 1), results, location, "results"))

    stored = {obj.key.removeprefix(location.prefix): obj for obj in store.list(location)}
    assert {original_name(key): store.get_bytes(BUCKET, obj.key) for key, obj in stored.items()} == names
    assert sorted(stored) == sorted(
        ["model.onnx", "caf%E9-latin1.txt", "x%5Cy.txt", "x/y.txt", "line%0Abreak.txt", "100%25.txt", "ünïcödé.txt"]
    )
    assert [refusal.name for refusal in outcome.refused] == [long_name]
    summary = outcome.summary()
    assert "bytes; S3 allows 1,024" in summary
    assert summary.startswith(f"'{'d' * 60}'... ({len(long_name):,} characters)")
    assert len(summary) < SHOWN_REASON_CHARS
