"""Signed documents checked by the standard tools (securesystemslib, in-toto, in-toto-attestation), and
cosign's layouts compared with fixtures written by hand from its published formats."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from google.protobuf import json_format
from in_toto.models.metadata import Metadata
from in_toto_attestation.predicates.provenance.v1 import provenance_pb2
from in_toto_attestation.v1 import statement_pb2
from in_toto_attestation.v1.statement import Statement
from securesystemslib.dsse import Envelope
from securesystemslib.signer import SSlibKey

from learnerkit_build.attestations import envelope as attest
from learnerkit_build.attestations.key import load_or_create_signer, load_public_key, public_key_path
from learnerkit_build.attestations.slsa import SourceFile, provenance

DIGEST = "sha256:" + "a" * 64

# cosign's classic attestation manifest (`sha256-<hex>.att`), written from its published layout: one DSSE
# envelope per layer, an empty signature annotation marking it, the predicate type beside it.
COSIGN_ATT_FIXTURE: dict[str, Any] = {
    "schemaVersion": 2,
    "mediaType": "application/vnd.oci.image.manifest.v1+json",
    "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "size": 0, "digest": "sha256:0"},
    "layers": [
        {
            "mediaType": "application/vnd.dsse.envelope.v1+json",
            "size": 0,
            "digest": "sha256:0",
            "annotations": {"dev.cosignproject.cosign/signature": "", "predicateType": "https://cyclonedx.org/bom"},
        }
    ],
}
# cosign's simple-signing payload, from the containers/image "simple signing" format cosign signs.
COSIGN_PAYLOAD_FIXTURE = {
    "critical": {
        "identity": {"docker-reference": "127.0.0.1:5000/learnerkit/pytorch"},
        "image": {"docker-manifest-digest": DIGEST},
        "type": "cosign container image signature",
    },
    "optional": None,
}


@pytest.fixture
def key_path(tmp_path: Path) -> Path:
    return tmp_path / "signing" / "ecdsa-p256.pem"


def test_envelopes_verify_with_securesystemslib_and_in_toto_given_only_the_public_key(key_path: Path) -> None:
    signer = load_or_create_signer(key_path)
    statement = attest.statement("r/x", DIGEST, "https://openvex.dev/ns", {"statements": []})
    envelope = attest.sign_statement(statement, signer)
    key = SSlibKey.from_crypto(serialization.load_pem_public_key(public_key_path(key_path).read_bytes()))
    assert Envelope.from_dict(json.loads(json.dumps(envelope))).verify([key], 1)
    Metadata.from_dict(json.loads(json.dumps(envelope))).verify_signature({**key.to_dict(), "keyid": key.keyid})
    payload = json.loads(base64.b64decode(envelope["payload"]))
    Statement.copy_from_pb(json_format.ParseDict(payload, statement_pb2.Statement())).validate()
    assert attest.open_envelope(attest.canonical(envelope), key, "here") == statement


def test_a_changed_payload_or_another_key_is_refused(key_path: Path, tmp_path: Path) -> None:
    signer = load_or_create_signer(key_path)
    envelope = attest.sign_statement(attest.statement("r/x", DIGEST, "t", {"a": 1}), signer)
    body = json.loads(base64.b64decode(envelope["payload"]))
    body["predicate"]["a"] = 2
    forged = {**envelope, "payload": base64.b64encode(attest.canonical(body)).decode()}
    key = load_public_key(public_key_path(key_path))
    with pytest.raises(attest.AttestationError, match="no signature verifies"):
        attest.open_envelope(attest.canonical(forged), key, "forged")
    other = load_or_create_signer(tmp_path / "other.pem")
    with pytest.raises(attest.AttestationError, match="no signature verifies"):
        attest.open_envelope(attest.canonical(envelope), other.public_key, "other key")


def test_the_key_is_made_once_and_reloaded(key_path: Path) -> None:
    first = load_or_create_signer(key_path)
    assert load_or_create_signer(key_path).public_key.keyid == first.public_key.keyid
    assert load_public_key(public_key_path(key_path)).keyid == first.public_key.keyid
    assert key_path.stat().st_mode & 0o077 == 0


def test_simple_signing_matches_cosigns_payload_and_a_cosign_style_signature_verifies(key_path: Path) -> None:
    payload = attest.simple_signing_payload("127.0.0.1:5000/learnerkit/pytorch", DIGEST)
    assert json.loads(payload) == COSIGN_PAYLOAD_FIXTURE
    signer = load_or_create_signer(key_path)
    key = load_public_key(public_key_path(key_path))
    # As cosign stores it: base64 of an ASN.1 ECDSA-SHA256 signature over the payload bytes, made here by
    # `cryptography` directly rather than by our signer.
    private = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
    assert isinstance(private, ec.EllipticCurvePrivateKey)
    fixture_payload = json.dumps(COSIGN_PAYLOAD_FIXTURE).encode()
    signature = base64.b64encode(private.sign(fixture_payload, ec.ECDSA(hashes.SHA256()))).decode()
    attest.verify_simple_signing(fixture_payload, signature, key, DIGEST, "fixture")
    attest.verify_simple_signing(payload, attest.sign_bytes(payload, signer), key, DIGEST, "ours")
    with pytest.raises(attest.AttestationError, match="names"):
        attest.verify_simple_signing(fixture_payload, signature, key, "sha256:" + "b" * 64, "other digest")


def test_the_cosign_attestation_layout_matches_the_fixture(monkeypatch: pytest.MonkeyPatch) -> None:
    from learnerkit_build.publish import referrers

    pushed: dict[str, bytes] = {}
    monkeypatch.setattr(referrers.registry, "put_blob", lambda h, r, data: referrers.registry.sha256_digest(data))
    monkeypatch.setattr(referrers.registry, "put_manifest", lambda h, r, tag, body, mt: pushed.setdefault(tag, body))
    referrers.push_cosign_attestations("h", "r", DIGEST, [(b"{}", "https://cyclonedx.org/bom")])
    manifest = json.loads(pushed["sha256-" + "a" * 64 + ".att"])
    shape = {k: v for k, v in manifest.items() if k not in ("config", "layers")}
    assert shape == {k: v for k, v in COSIGN_ATT_FIXTURE.items() if k not in ("config", "layers")}
    assert manifest["config"]["mediaType"] == COSIGN_ATT_FIXTURE["config"]["mediaType"]
    [layer], [expected] = manifest["layers"], COSIGN_ATT_FIXTURE["layers"]
    assert (layer["mediaType"], layer["annotations"]) == (expected["mediaType"], expected["annotations"])


def test_provenance_is_slsa_v1_with_the_recorded_inputs() -> None:
    labels = {
        "org.opencontainers.image.revision": "c" * 40,
        "org.opencontainers.image.base.digest": "sha256:" + "b" * 64,
        "org.opencontainers.image.base.name": "learnerkit/base:debian-bookworm-1",
        "org.opencontainers.image.created": "2026-01-01T00:00:00+00:00",
        "io.learnerkit.inputs-hash": "d" * 64,
        "io.learnerkit.framework": "pytorch",
        "io.learnerkit.base.suite": "bookworm",
    }
    sbom = {"components": [{"name": "libc6", "purl": "pkg:deb/debian/libc6@2.36?arch=amd64"}]}
    predicate = provenance(labels, [SourceFile("learner_base/Dockerfile.j2", "e" * 40)], sbom)
    json_format.ParseDict(predicate, provenance_pb2.Provenance())
    dependencies = predicate["buildDefinition"]["resolvedDependencies"]
    assert dependencies[0] == {"name": "learnerkit", "digest": {"gitCommit": "c" * 40}}
    assert {"name": "learner_base/Dockerfile.j2", "digest": {"gitBlob": "e" * 40}} in dependencies
    assert dependencies[2]["digest"] == {"sha256": "b" * 64}
    assert dependencies[2]["annotations"] == {"suite": "bookworm"}
    assert dependencies[3] == {"name": "libc6", "uri": "pkg:deb/debian/libc6@2.36?arch=amd64"}
    assert predicate["runDetails"]["metadata"] == {"invocationId": "d" * 64, "finishedOn": "2026-01-01T00:00:00Z"}
    dirty = provenance({**labels, "org.opencontainers.image.revision": "c" * 40 + "-dirty"}, [], sbom)
    assert dirty["buildDefinition"]["resolvedDependencies"][0]["annotations"] == {"dirty": True}
