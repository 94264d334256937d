"""deploy/kubernetes mounts the tokens Secret so that the scheduler's pod reads it: the file as the kubelet makes it
from the manifest (owner root, group fsGroup, mode defaultMode | 0440) passes `read_tokens`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from learnerkit.scheduler.api.auth import TokensFileError, add_token, read_tokens

DEPLOYMENT = Path(__file__).resolve().parents[4] / "deploy" / "kubernetes" / "deployment.yaml"
KUBELET_FSGROUP_READ_ONLY = 0o440
"""What the kubelet adds to a read-only volume's files for a pod with fsGroup (pkg/volume SetVolumeOwnership)."""
SECRET_DEFAULT_MODE = 0o644


def pod() -> dict[str, Any]:
    spec: dict[str, Any] = yaml.safe_load(DEPLOYMENT.read_text(encoding="utf-8"))["spec"]["template"]["spec"]
    return spec


def tokens_file_mode(spec: dict[str, Any]) -> tuple[int, int | None]:
    """(mode, group) of the tokens file in the pod, as the kubelet writes it."""
    [volume] = [v for v in spec["volumes"] if v["name"] == "tokens"]
    mode = int(volume["secret"].get("defaultMode", SECRET_DEFAULT_MODE))
    group = spec["securityContext"].get("fsGroup")
    return (mode | KUBELET_FSGROUP_READ_ONLY, group) if group is not None else (mode, None)


def test_the_pods_group_is_the_group_its_secrets_are_given() -> None:
    context = pod()["securityContext"]
    assert context["runAsUser"] != 0 and context["runAsGroup"] == context["fsGroup"]


def test_the_scheduler_reads_its_tokens_as_the_manifest_mounts_them(tmp_path: Path) -> None:
    mode, group = tokens_file_mode(pod())
    assert group is not None and mode & 0o007 == 0
    path = tmp_path / "tokens"
    add_token(path, "team-a")
    path.chmod(mode)  # group: this process's own, as runAsGroup == fsGroup makes it in the pod
    assert [entry.tenant for entry in read_tokens(path).values()] == ["team-a"]


def test_the_secrets_default_mode_or_another_group_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    add_token(path, "team-a")
    path.chmod(SECRET_DEFAULT_MODE)
    with pytest.raises(TokensFileError, match="others may read"):
        read_tokens(path)
    path.chmod(0o440)
    if os.geteuid() != 0:
        pytest.skip("giving the file another group needs root")
    os.chown(path, -1, os.getegid() + 1)
    with pytest.raises(TokensFileError, match="mode 440"):
        read_tokens(path)
