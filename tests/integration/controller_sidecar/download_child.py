"""A sidecar's download phase in its own process, so that a test can SIGKILL it mid-way.

Usage: python -m tests.integration.controller_sidecar.download_child ENDPOINT BUCKET PREFIX DEST STATE_FILE
(credentials in $S3_ACCESS_KEY and $S3_SECRET_KEY).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from controller_sidecar.download import download_prefix
from controller_sidecar.retry import Backoff
from controller_sidecar.s3store import S3Store
from controller_sidecar.settings import S3Location, S3Settings


def main(argv: list[str]) -> None:
    endpoint, bucket, prefix, dest, state_file = argv
    settings = S3Settings(
        endpoint_url=endpoint,
        access_key=os.environ["S3_ACCESS_KEY"],
        secret_key=os.environ["S3_SECRET_KEY"],
        max_concurrency=4,
        multipart_threshold_mb=5,
    )
    download_prefix(
        S3Store(settings),
        S3Location(bucket, prefix),
        Path(dest),
        state_file=Path(state_file),
        concurrency=4,
        backoff=Backoff(),
    )


if __name__ == "__main__":
    main(sys.argv[1:])
