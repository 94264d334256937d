"""Inputs that cannot be placed end the job FAILED, naming the member or key: a real pair, etcd and SeaweedFS."""

from __future__ import annotations

import io
import uuid
import zipfile

import pytest

from controller_sidecar.status import ErrorCode, Phase
from tests.integration.controller_sidecar.conftest import DATA_BUCKET, Pairs

pytestmark = [pytest.mark.integration, pytest.mark.services, pytest.mark.timeout(600)]

FINISH_S = 120.0
"""A refused input ends the job within seconds; this is only the wait's bound."""


def model_zip(members: dict[str, bytes]) -> bytes:
    raw = io.BytesIO()
    with zipfile.ZipFile(raw, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return raw.getvalue()


def test_a_model_archive_with_a_file_and_a_folder_of_one_name_fails_naming_the_member(pairs: Pairs) -> None:
    key = f"models/{uuid.uuid4().hex[:8]}/model.zip"
    pairs.s3_client.put_object(Bucket=DATA_BUCKET, Key=key, Body=model_zip({"pkg": b"a file", "pkg/util.py": b"x"}))
    spec = pairs.spec(("true",), data_prefix=None, config={"model": {"bucket": DATA_BUCKET, "key": key}})
    handle = pairs.start(spec)
    final = pairs.wait_terminal(handle, spec.job_id, timeout=FINISH_S)
    assert (final.phase, final.error_code) == (Phase.FAILED, ErrorCode.BAD_INPUT), pairs.describe(handle, spec.job_id)
    assert "member 'pkg/util.py': clashes with another member" in final.message


def test_data_keys_that_are_a_file_and_a_folder_fail_naming_the_keys(pairs: Pairs) -> None:
    prefix = f"clash-{uuid.uuid4().hex[:8]}/"
    pairs.s3_client.put_object(Bucket=DATA_BUCKET, Key=f"{prefix}a", Body=b"a file")
    pairs.s3_client.put_object(Bucket=DATA_BUCKET, Key=f"{prefix}a/b", Body=b"below the file")
    spec = pairs.spec(("true",), data_prefix=prefix)
    handle = pairs.start(spec)
    final = pairs.wait_terminal(handle, spec.job_id, timeout=FINISH_S)
    assert (final.phase, final.error_code) == (Phase.FAILED, ErrorCode.BAD_INPUT), pairs.describe(handle, spec.job_id)
    assert f"s3://{DATA_BUCKET}/{prefix}a/b: " in final.message
    assert f"s3://{DATA_BUCKET}/{prefix}a " in final.message
