"""Log reads by range against the real SeaweedFS, every request counted by a loopback proxy in front of it."""

from __future__ import annotations

from typing import Any

from controller_sidecar.logship import part_name
from controller_sidecar.s3store import S3Store
from controller_sidecar.settings import S3Location, S3Settings
from learnerkit.dev.s3 import create_bucket
from learnerkit.scheduler.outputs.logs import list_log
from tests.servers.proxy import FaultyProxy

BUCKET = "log-ranges"
PREFIX = "job-1/attempt-1/learner-1/logs/"


def test_an_offset_in_the_middle_of_a_part_downloads_no_part_before_it(s3_server: Any, faulty_s3: FaultyProxy) -> None:
    client = s3_server.client()
    create_bucket(client, BUCKET)
    parts = [b"".join(b"part %d line %03d\n" % (n, i) for i in range(200)) for n in range(1, 6)]
    for n, data in enumerate(parts, start=1):
        client.put_object(Bucket=BUCKET, Key=f"{PREFIX}{part_name(n)}", Body=data)
    whole = b"".join(parts)
    settings = S3Settings(faulty_s3.endpoint_url, access_key=s3_server.access_key, secret_key=s3_server.secret_key)
    store = S3Store(settings)
    log = list_log(store, S3Location(BUCKET, f"{PREFIX}learner.log.part-"))
    assert log.size == len(whole)

    offset = len(parts[0]) + len(parts[1]) + 1234  # inside part 3
    before = len(faulty_s3.requests)
    assert b"".join(log.chunks(offset)) == whole[offset:]
    fetched = [path for method, path in faulty_s3.requests[before:] if method == "GET"]
    assert [path.rsplit("-", 1)[1] for path in fetched] == ["000003", "000004", "000005"]

    before = len(faulty_s3.requests)
    start = log.tail_start(3)
    assert whole[start:] == b"".join(whole.splitlines(keepends=True)[-3:])
    fetched = [path for method, path in faulty_s3.requests[before:] if method == "GET"]
    assert [path.rsplit("-", 1)[1] for path in fetched] == ["000005"]
