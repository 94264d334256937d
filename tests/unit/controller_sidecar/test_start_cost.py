"""The sidecar's start: what it imports before its first status write (boto3 and gRPC cost most)."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("boto3", "botocore", "s3transfer", "grpc", "google.protobuf", "aetcd")


def test_starting_the_sidecar_imports_neither_boto3_nor_grpc() -> None:
    probe = f"import sys, controller_sidecar.cli; print(' '.join(m for m in {HEAVY!r} if m in sys.modules))"
    loaded = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True, text=True).stdout
    assert loaded.split() == []
