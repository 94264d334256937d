"""`learnerkit dev upload` against the real SeaweedFS behind a proxy that answers 503 first."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller_sidecar.settings import S3Location
from learnerkit.dev.s3 import SeaweedServer
from learnerkit.dev.upload import upload_folder
from tests.servers.proxy import FaultyProxy

pytestmark = pytest.mark.services


def test_upload_retries_a_store_that_answers_503(
    s3_server: SeaweedServer, faulty_s3: FaultyProxy, tmp_path: Path
) -> None:
    (tmp_path / "data" / "sub").mkdir(parents=True)
    (tmp_path / "data" / "a.csv").write_text("x,y\n1,2\n")
    (tmp_path / "data" / "sub" / "b.csv").write_text("x,y\n3,4\n")
    faulty_s3.fail_next(3)
    result = upload_folder(
        s3_server.settings(faulty_s3.endpoint_url), tmp_path / "data", S3Location("dev-upload", "set/"), lambda *_: None
    )
    assert sorted(o.key for o in result.objects) == ["set/a.csv", "set/sub/b.csv"]
    client = s3_server.client()
    assert client.get_object(Bucket="dev-upload", Key="set/sub/b.csv")["Body"].read() == b"x,y\n3,4\n"
