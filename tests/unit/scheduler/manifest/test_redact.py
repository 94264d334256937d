"""A finished job's manifest without its credentials: it parses again, with nothing of the keys left."""

from __future__ import annotations

from learnerkit.scheduler.manifest.parser import parse_manifest
from learnerkit.scheduler.manifest.redact import REDACTED, redact_credentials

MANIFEST = """\
name: redact  # a comment
memory: 1Gb
data_stores:
  - id: store
    type: s3_datastore
    training_data: {container: data}
    training_results: {container: results}
    connection: &conn
      auth_url: http://127.0.0.1:9000
      user_name: AKIAEXAMPLEUSER
      password: s3cr3t-pa55
  - id: other
    type: mount_cos
    training_data: {container: more}
    connection: *conn
framework:
  name: pytorch
  version: "2.13"
  command: python train.py
"""


def test_redacted_manifest_parses_the_same_without_a_trace_of_the_keys() -> None:
    text = redact_credentials(MANIFEST)
    assert "AKIAEXAMPLEUSER" not in text and "s3cr3t-pa55" not in text
    before, after = parse_manifest(MANIFEST, "m.yml"), parse_manifest(text, "m.yml")
    assert after.to_dict() == before.to_dict()
    assert {store.id: dict(store.credentials) for store in after.data_stores} == {
        "store": {"user_name": REDACTED, "password": REDACTED},
        "other": {"user_name": REDACTED, "password": REDACTED},
    }
    assert all(not store.credentials for store in after.without_credentials().data_stores)
