"""A served model's Kubernetes objects: valid, hardened, probed, labelled so that `model stop` finds them."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path
from typing import Any

import pytest

from learnerkit.scheduler.backends import k8s_modelobjects as mo
from learnerkit.scheduler.backends.k8s_modelfiles import pack
from learnerkit.scheduler.backends.k8s_objects import validate_objects

DIGEST = "sha256:" + "ab" * 32
OTHER = "sha256:" + "cd" * 32
IMAGE = "learnerkit/modelserver:2.13-cpu-py3.11"
LONG_NAME = "a" * 60 + ".b_c-" + "d" * 35


def pod(name: str = "digits", digest: str = DIGEST) -> dict[str, Any]:
    return dict(mo.server_pod("acme", name, digest, IMAGE, "serving", ["k1.pub", "k2.pub"]))


def test_every_object_validates_even_for_the_longest_name() -> None:
    assert len(LONG_NAME) == 100
    objects = [
        mo.server_pod("acme", LONG_NAME, DIGEST, IMAGE, "serving", ["k.pub"]),
        mo.model_service("acme", LONG_NAME, DIGEST, "serving"),
        mo.model_policy("acme", LONG_NAME, "serving"),
    ]
    validate_objects(objects)
    assert len(mo.service_name("acme", LONG_NAME)) <= 63
    assert all(len(v) <= 63 for obj in objects for v in obj["metadata"]["labels"].values())


def test_names_differ_by_tenant_and_version_but_stay_for_a_name() -> None:
    assert mo.service_name("acme", "digits") != mo.service_name("other", "digits")
    assert mo.service_name("acme", "digits").startswith("lk-model-digits-")
    assert mo.pod_name("acme", "digits", DIGEST) != mo.pod_name("acme", "digits", OTHER)
    assert mo.pod_name("acme", "digits", DIGEST).startswith(mo.service_name("acme", "digits"))


def test_the_pod_runs_non_root_read_only_without_token_or_credentials() -> None:
    spec = pod()["spec"]
    assert spec["automountServiceAccountToken"] is False
    assert spec["enableServiceLinks"] is False
    assert spec["securityContext"]["runAsNonRoot"] is True
    for container in [*spec["initContainers"], *spec["containers"]]:
        context = container["securityContext"]
        assert context["runAsNonRoot"] is True and context["runAsUser"] == 1000
        assert context["readOnlyRootFilesystem"] is True
        assert context["allowPrivilegeEscalation"] is False
        assert context["capabilities"] == {"drop": ["ALL"]}
        assert context["seccompProfile"] == {"type": "RuntimeDefault"}
        assert "env" not in container and "envFrom" not in container
    assert all("secret" not in volume and "hostPath" not in volume for volume in spec["volumes"])


def test_the_server_mounts_the_received_files_read_only_and_is_probed_on_ready() -> None:
    server = pod()["spec"]["containers"][0]
    mounts = {m["mountPath"]: m for m in server["volumeMounts"]}
    assert mounts["/model"] == {"name": "files", "mountPath": "/model", "subPath": "files/model", "readOnly": True}
    assert mounts["/keys"]["readOnly"] is True and mounts["/keys"]["subPath"] == "files/keys"
    assert server["readinessProbe"]["httpGet"] == {"path": "/v2/health/ready", "port": 8080}
    args = server["args"]
    assert args[args.index("--version") + 1] == DIGEST and args[args.index("--name") + 1] == "digits"
    assert [args[i + 1] for i, a in enumerate(args) if a == "--public-key"] == ["/keys/k1.pub", "/keys/k2.pub"]
    receive = pod()["spec"]["initContainers"][0]
    assert receive["volumeMounts"] == [{"name": "files", "mountPath": "/incoming"}]


def test_the_service_selects_one_version_of_one_name() -> None:
    service = mo.model_service("acme", "digits", DIGEST, "serving")
    labels = pod()["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    assert service["spec"]["selector"].items() > {mo.MODEL_LABEL: labels[mo.MODEL_LABEL]}.items()
    assert not service["spec"]["selector"].items() <= pod(digest=OTHER)["metadata"]["labels"].items()
    assert not service["spec"]["selector"].items() <= pod(name="digits2")["metadata"]["labels"].items()
    assert mo.service_url("acme", "digits", "serving") == f"http://{mo.service_name('acme', 'digits')}.serving.svc:8080"


def test_the_receiver_takes_exactly_the_packed_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model, keys = tmp_path / "model", tmp_path / "keys"
    (model / "results").mkdir(parents=True)
    (model / "results" / "model.pt").write_bytes(b"weights")
    keys.mkdir()
    (keys / "k.pub").write_text("key")
    buffer = io.BytesIO()
    size = pack(model, keys, buffer)
    incoming = tmp_path / "incoming"
    (incoming / "files").mkdir(parents=True)
    code = mo.RECEIVE_FILES.replace(mo.INCOMING, str(incoming))
    stdin = io.TextIOWrapper(io.BytesIO(buffer.getvalue() + b"trailing bytes are not read"))
    monkeypatch.setattr("sys.stdin", stdin)
    monkeypatch.setattr("sys.argv", ["-c", str(size)])
    exec(compile(code, "receive", "exec"), {"__name__": "__main__"})
    assert (incoming / "files" / "model" / "results" / "model.pt").read_bytes() == b"weights"
    assert (incoming / "files" / "keys" / "k.pub").read_text() == "key"
    assert (incoming / mo.COMPLETE_FILE).exists()


def test_the_receiver_refuses_a_member_outside_its_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        info = tarfile.TarInfo("../escape")
        info.size = 1
        archive.addfile(info, io.BytesIO(b"x"))
    incoming = tmp_path / "incoming"
    (incoming / "files").mkdir(parents=True)
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(buffer.getvalue())))
    monkeypatch.setattr("sys.argv", ["-c", str(len(buffer.getvalue()))])
    with pytest.raises(SystemExit, match=r"refused: \.\./escape"):
        exec(compile(mo.RECEIVE_FILES.replace(mo.INCOMING, str(incoming)), "receive", "exec"), {})
    assert not (tmp_path / "escape").exists() and not (incoming / mo.COMPLETE_FILE).exists()


def test_the_policy_denies_every_egress_of_the_names_pods_and_lets_clients_reach_the_port() -> None:
    policy = mo.model_policy("acme", "digits", "serving")["spec"]
    assert policy["policyTypes"] == ["Ingress", "Egress"] and policy["egress"] == []
    assert policy["ingress"] == [{"ports": [{"protocol": "TCP", "port": 8080}]}]
    assert policy["podSelector"]["matchLabels"].items() <= pod()["metadata"]["labels"].items()
    assert not policy["podSelector"]["matchLabels"].items() <= pod(name="digits2")["metadata"]["labels"].items()
