"""The job's results signed in the OpenSSF model signing format (``model-signing`` 1.x, key mode), offline.

A Sigstore bundle (v0.3, no transparency log entries) around a DSSE envelope of an in-toto statement whose
predicate ``https://model_signing/signature/v1.0`` lists every result file with its SHA-256. The stock command
verifies a `job download` folder with the platform's public key::

    model_signing verify key --signature DIR/provenance/model.sig --public_key platform.pub DIR

The digests are the sidecar's, taken from the bytes it uploaded, so nothing is read again to sign; the envelope is
made by the one signer (`learnerkit.common.signing`), whose DSSE encoding is the format's. The folders a download
holds beside the results (provenance, model code, evaluations, each learner's logs and checkpoints) are in the
signature's ``ignore_paths``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any

from securesystemslib.signer import CryptoSigner

from controller_sidecar.provenancerecord import Digested
from learnerkit.common.signing import STATEMENT_TYPE, public_pem, sign_statement

PREDICATE_TYPE = "https://model_signing/signature/v1.0"
BUNDLE_MEDIA_TYPE = "application/vnd.dev.sigstore.bundle.v0.3+json"
SIGNATURE_FILE = "provenance/model.sig"


def model_statement(model_name: str, results: Iterable[Digested], ignore_paths: Iterable[str]) -> dict[str, Any]:
    """The format's statement: one subject, the SHA-256 over the files' digests in name order."""
    ordered = sorted(results, key=lambda item: item.name)
    root = hashlib.sha256(b"".join(bytes.fromhex(item.sha256) for item in ordered)).hexdigest()
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": model_name, "digest": {"sha256": root}}],
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "serialization": {
                "method": "files",
                "hash_type": "sha256",
                "allow_symlinks": False,
                "ignore_paths": sorted(set(ignore_paths)),
            },
            "resources": [{"name": item.name, "algorithm": "sha256", "digest": item.sha256} for item in ordered],
        },
    }


def download_extras(results: Iterable[Digested]) -> list[str]:
    """What a `job download` folder holds that is not a result: the folders the signature ignores."""
    learners = {"/".join(item.name.split("/")[:2]) for item in results if item.name.startswith("attempt-")}
    extras = ["provenance", "model", "evaluations"]
    for learner in sorted(learners):
        extras += [f"{learner}/logs", f"{learner}/checkpoints"]
    return extras


def model_signature(model_name: str, results: Iterable[Digested], signer: CryptoSigner) -> dict[str, Any]:
    """The bundle `model_signing verify key` reads: the envelope, and the public key's hint (SHA-256 of its PEM)."""
    listed = list(results)
    envelope = sign_statement(model_statement(model_name, listed, download_extras(listed)), signer)
    signatures = [{"sig": s["sig"], "keyid": ""} for s in envelope["signatures"]]
    hint = hashlib.sha256(public_pem(signer).encode()).hexdigest()
    return {
        "mediaType": BUNDLE_MEDIA_TYPE,
        "verificationMaterial": {"publicKey": {"hint": hint}, "tlogEntries": []},
        "dsseEnvelope": {
            "payload": envelope["payload"],
            "payloadType": envelope["payloadType"],
            "signatures": signatures,
        },
    }
