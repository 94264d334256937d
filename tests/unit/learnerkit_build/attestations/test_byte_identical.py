"""The SBOM, VEX and SLSA provenance of one image are the same bytes on any machine: made twice, in two processes
with other temporary folders, time zones, umasks, working folders and scan histories, they compare equal byte
for byte. Each is valid by its published definition: CycloneDX 1.6 (cyclonedx-python-lib's validator and bundled
schema), OpenVEX 0.2.0 (its JSON schema), in-toto Statement v1 and SLSA provenance v1 (in-toto-attestation)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from google.protobuf import json_format
from in_toto_attestation.predicates.provenance.v1 import provenance_pb2
from in_toto_attestation.v1 import resource_descriptor_pb2, statement_pb2
from in_toto_attestation.v1.resource_descriptor import ResourceDescriptor
from in_toto_attestation.v1.statement import Statement

from learnerkit_build.attestations.documents import ImageRecords, statements
from learnerkit_build.attestations.envelope import canonical
from learnerkit_build.scan.layers import index_archive
from learnerkit_build.scan.packages import deb_packages, python_dists, wanted
from learnerkit_build.scan.records import REPORT, SBOM, scans_home
from learnerkit_build.scan.sbom import build_sbom, read_image_lock, validate_sbom
from learnerkit_build.state import write_json
from tests.schemas import assert_valid_openvex
from tests.unit.learnerkit_build.scan.conftest import ImageSpecT, base_layer, write_archive
from tests.unit.learnerkit_build.scan.test_sbom import PACKAGES, lock_file

REMOTE = "127.0.0.1:5000/learnerkit/pytorch"
DIGEST = "sha256:" + "a" * 64
KINDS = ("sbom", "vex", "provenance")


def report(image_id: str) -> dict[str, Any]:
    evidence = [{"message": "libssl3 3.0.17", "ids": ["libssl3", "src:openssl", "CVE-2024-0001"], "severity": None}]
    check = {"id": "vuln.debian-security", "title": "t", "status": "FAIL", "severity": "high", "evidence": evidence}
    return {"reference": "learnerkit/pytorch:2.13-cpu", "image_id": image_id, "passed": False, "checks": [check]}


def make_documents(archive: Path, lock: Path, out: Path) -> None:
    """Write the canonical statements (sbom, vex, provenance) of the image in `archive` into `out`."""
    index = index_archive(archive, "learnerkit/pytorch:2.13-cpu", wanted=wanted)
    image_id = index.config_digest
    sbom = build_sbom(index, image_id, deb_packages(index) or [], python_dists(index), lock=read_image_lock(lock))
    labels = {str(k): str(v) for k, v in (index.container_config.get("Labels") or {}).items()}
    records = ImageRecords(image_id, labels, sbom, report(image_id), {"checks": []})
    made = statements(records, REMOTE, DIGEST, Path("/nonexistent"))
    out.mkdir(parents=True, exist_ok=True)
    for kind in KINDS:
        (out / f"{kind}.json").write_bytes(canonical(made[kind]))


def run_elsewhere(archive: Path, lock: Path, out: Path, work: Path, env: dict[str, str], umask: int) -> None:
    work.mkdir(parents=True)
    code = (
        f"import os; os.umask({umask}); from pathlib import Path; "
        "from tests.unit.learnerkit_build.attestations.test_byte_identical import make_documents; "
        f"make_documents(Path({str(archive)!r}), Path({str(lock)!r}), Path({str(out)!r}))"
    )
    root = Path(__file__).parents[4]
    environment = {**os.environ, "PYTHONPATH": str(root), "TMPDIR": str(work), **env}
    environment.pop("SOURCE_DATE_EPOCH", None)
    subprocess.run([sys.executable, "-c", code], cwd=work, env=environment, check=True, timeout=120)


def test_sbom_vex_and_provenance_are_byte_identical_across_machines_and_valid(tmp_path: Path) -> None:
    spec = ImageSpecT(layers=[base_layer(), PACKAGES])
    spec.config["Labels"]["org.opencontainers.image.created"] = "2026-01-01T00:00:00+00:00"
    archive, lock = write_archive(spec, tmp_path / "image.tar"), lock_file(tmp_path)
    here_home, there_home = tmp_path / "home-1", tmp_path / "home-2"
    # The second machine scanned an earlier image of the same reference: its history must not reach the VEX.
    os.environ["LEARNERKIT_HOME"], saved = str(there_home), os.environ.get("LEARNERKIT_HOME")
    try:
        earlier = scans_home() / "sha256_old"
        write_json(scans_home() / "sha256_old.json", {"reference": "learnerkit/pytorch:2.13-cpu", "image_id": "x"})
        write_json(earlier / REPORT, report("sha256:old"))
        write_json(earlier / SBOM, {"components": [{"name": "libssl3", "version": "3.0.11-1", "purl": "pkg:x"}]})
    finally:
        os.environ.pop("LEARNERKIT_HOME")
        if saved is not None:
            os.environ["LEARNERKIT_HOME"] = saved
    one, two = tmp_path / "one", tmp_path / "two"
    run_elsewhere(archive, lock, one, tmp_path / "w1", {"TZ": "UTC", "LEARNERKIT_HOME": str(here_home)}, 0o022)
    run_elsewhere(archive, lock, two, tmp_path / "w2", {"TZ": "Asia/Tokyo", "LEARNERKIT_HOME": str(there_home)}, 0o077)
    for kind in KINDS:
        assert (one / f"{kind}.json").read_bytes() == (two / f"{kind}.json").read_bytes(), kind
    made = {kind: json.loads((one / f"{kind}.json").read_bytes()) for kind in KINDS}
    for statement in made.values():
        Statement.copy_from_pb(json_format.ParseDict(statement, statement_pb2.Statement())).validate()
    validate_sbom(made["sbom"]["predicate"])
    assert_valid_openvex(made["vex"]["predicate"])
    json_format.ParseDict(made["provenance"]["predicate"], provenance_pb2.Provenance())
    for dependency in made["provenance"]["predicate"]["buildDefinition"]["resolvedDependencies"]:
        rd = json_format.ParseDict(dependency, resource_descriptor_pb2.ResourceDescriptor())
        ResourceDescriptor.copy_from_pb(rd).validate()
    resolved = made["provenance"]["predicate"]["buildDefinition"]["resolvedDependencies"]
    packages = {d["name"]: d.get("digest") for d in resolved if d.get("uri", "").startswith("pkg:")}
    assert packages["libssl3"] == {"sha256": "0" * 63 + "2"}
    assert packages["requests"] == {"sha256": "0" * 63 + "4"}
    assert packages["tini"] is None  # the lock names another version
