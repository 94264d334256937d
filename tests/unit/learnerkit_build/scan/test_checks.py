"""Every check has a fixture that makes it fail, and the good synthetic image passes it."""

from __future__ import annotations

from typing import Any

import pytest

from learnerkit_build.scan.checks_config import ConfigPolicy, config_checks
from learnerkit_build.scan.checks_fs import fs_checks
from learnerkit_build.scan.checks_history import history_checks
from learnerkit_build.scan.model import CheckResult, Status
from learnerkit_build.scan.secrets import secret_checks
from tests.unit.learnerkit_build.scan.conftest import F, LayerSpec, MakeIndex

RSA_KEY = "-----BEGIN RSA PRIVATE KEY-----\n" + "MIIEpAIBAAKCAQEA7planted" * 4 + "\n-----END RSA PRIVATE KEY-----\n"


def all_checks(make_index: MakeIndex, *layers: LayerSpec, **kwargs: Any) -> dict[str, CheckResult]:
    index, scanner = make_index(*layers, **kwargs)
    results = [
        *config_checks(index, ConfigPolicy()),
        *history_checks(index),
        *fs_checks(index, 1),
        *secret_checks(index, scanner.hits),
    ]
    return {r.id: r for r in results}


def test_good_image_passes_every_check(make_index: MakeIndex) -> None:
    results = all_checks(make_index, LayerSpec([F("/opt/app/run.py", "print('hi')\n")], "COPY run.py /opt/app/"))
    assert {cid: r.status for cid, r in results.items() if r.status is not Status.PASS} == {}


FAILING: list[tuple[str, dict[str, Any]]] = [
    ("config.root-user", {"config": {"User": ""}}),
    ("config.root-user", {"config": {"User": "root"}}),
    ("config.healthcheck", {"config": {"Healthcheck": None}}),
    ("config.secret-env", {"config": {"Env": ["DB_PASSWORD=hunter2"]}}),
    ("config.port-22", {"config": {"ExposedPorts": {"22/tcp": {}}}}),
    ("config.sensitive-volume", {"config": {"Volumes": {"/proc/sys": {}}}}),
    ("config.oci-labels", {"config": {"Labels": {}}}),
    ("history.add-url", {"layers": [LayerSpec([F("/x")], "ADD http://127.0.0.1:8000/x /x # buildkit")]}),
    ("history.add-archive", {"layers": [LayerSpec([F("/opt/a")], "ADD tool.tar.gz /opt/ # buildkit")]}),
    ("history.apt-update-alone", {"history": [{"created_by": "RUN /bin/sh -c apt-get update", "empty_layer": True}]}),
    ("history.dist-upgrade", {"history": [{"created_by": "RUN apt-get -y dist-upgrade", "empty_layer": True}]}),
    ("history.sudo", {"history": [{"created_by": "RUN sudo make install", "empty_layer": True}]}),
    (
        "history.no-install-recommends",
        {"history": [{"created_by": "RUN apt-get update && apt-get install -y curl", "empty_layer": True}]},
    ),
    (
        "history.apt-lists-left",
        {"layers": [LayerSpec([F("/var/lib/apt/lists/deb.debian.org_dists_bookworm_InRelease", "x")], "RUN apt")]},
    ),
    ("history.pip-cache-left", {"layers": [LayerSpec([F("/root/.cache/pip/http/a/b", "x")], "RUN pip install x")]}),
    (
        "history.curl-pipe-sh",
        {"history": [{"created_by": "RUN curl -fsSL https://x.example/i.sh | bash", "empty_layer": True}]},
    ),
    ("fs.setuid", {"layers": [LayerSpec([F("/usr/local/bin/helper", b"\x7fELF\0", mode=0o4755)])]}),
    ("fs.setuid", {"layers": [LayerSpec([F("/usr/local/bin/helper", b"\x7fELF\0", mode=0o2755)])]}),
    ("fs.world-writable", {"layers": [LayerSpec([F("/shared", kind="dir", mode=0o777)])]}),
    ("fs.world-writable", {"layers": [LayerSpec([F("/etc/app.conf", "a", mode=0o666)])]}),
    ("fs.package-cache", {"layers": [LayerSpec([F("/var/cache/apt/archives/curl_8.deb", "x")])]}),
    ("fs.empty-password", {"layers": [LayerSpec([F("/etc/shadow", "root::19000:0:99999:7:::\n")])]}),
    ("fs.duplicate-ids", {"layers": [LayerSpec([F("/etc/passwd", "root:x:0:0::/:/bin/sh\ntoor:x:0:0::/:/bin/sh\n")])]}),
    ("fs.unowned-files", {"layers": [LayerSpec([F("/usr/bin/dropped", b"\x7fELF\0", mode=0o755)])]}),
    ("secrets.present", {"layers": [LayerSpec([F("/root/.aws/credentials", "key = AKIAZ7Q4PLANTEDK3Y9X\n")])]}),
    ("secrets.present", {"config": {"Env": ["HF_HOME=/x", "TOKEN_URL=ghp_" + "a1B2" * 9]}}),
    (
        "secrets.deleted",
        {
            "layers": [
                LayerSpec([F("/root/id_rsa", RSA_KEY)], "COPY id_rsa /root/"),
                LayerSpec([F("/root/id_rsa", whiteout=True)], "RUN rm /root/id_rsa"),
            ]
        },
    ),
]


@pytest.mark.parametrize(("check_id", "fixture"), FAILING, ids=[f"{c}-{n}" for n, (c, _) in enumerate(FAILING)])
def test_fixture_makes_check_fail(make_index: MakeIndex, check_id: str, fixture: dict[str, Any]) -> None:
    results = all_checks(
        make_index, *fixture.get("layers", []), config=fixture.get("config"), history=fixture.get("history")
    )
    outcome = results[check_id]
    assert outcome.status in (Status.FAIL, Status.WARN), outcome
    assert outcome.evidence and outcome.evidence[0].message


def test_user_resolved_through_passwd(make_index: MakeIndex) -> None:
    results = all_checks(
        make_index,
        LayerSpec([F("/etc/passwd", "root:x:0:0::/:/bin/sh\nadmin:x:0:0::/:/bin/sh\n")]),
        config={"User": "admin"},
    )
    assert results["config.root-user"].status is Status.FAIL
    assert all_checks(make_index, config={"User": "ghost"})["config.root-user"].status is Status.UNKNOWN


def test_evidence_names_path_layer_and_history(make_index: MakeIndex) -> None:
    results = all_checks(
        make_index,
        LayerSpec([F("/usr/local/bin/helper", b"\x7fELF\0", mode=0o4755)], "RUN chmod u+s /usr/local/bin/helper"),
    )
    [evidence] = results["fs.setuid"].evidence
    assert (evidence.path, evidence.layer, evidence.history) == (
        "/usr/local/bin/helper",
        1,
        "RUN chmod u+s /usr/local/bin/helper",
    )
    assert "added by this image" in evidence.message


def test_deleted_secret_is_not_in_final_fs_but_reported(make_index: MakeIndex) -> None:
    index, scanner = make_index(LayerSpec([F("/root/id_rsa", RSA_KEY)]), LayerSpec([F("/root/id_rsa", whiteout=True)]))
    assert "/root/id_rsa" not in index.files
    [hit] = scanner.hits
    assert (hit.rule, hit.layer) == ("private-key", 1)


def test_opaque_whiteout_clears_lower_folder(make_index: MakeIndex) -> None:
    index, _ = make_index(
        LayerSpec([F("/opt/a/one", "1"), F("/opt/a/two", "2")]),
        LayerSpec([F("/opt/a/.wh..wh..opq"), F("/opt/a/three", "3")]),
    )
    assert sorted(p for p in index.files if p.startswith("/opt/a/")) == ["/opt/a/three"]


def test_binary_files_are_not_scanned_for_secrets(make_index: MakeIndex) -> None:
    _, scanner = make_index(LayerSpec([F("/usr/lib/blob.so", b"\0\0AKIAZ7Q4PLANTEDK3Y9X")]))
    assert scanner.hits == []
