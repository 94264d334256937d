"""The in-image inspection: fatbinary architectures read from ELF headers alone, `ldd`'s misses, the checks' rules."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import pytest

from learnerkit_build.imagetest import contentchecks
from learnerkit_build.imagetest.checks import CheckContext, CheckFailure, CheckSkipped
from learnerkit_build.imagetest.image_inspect import FATBIN_MAGIC, fatbin_architectures, missing_libraries
from learnerkit_build.imagetest.smoke import check_smoke
from learnerkit_build.recipes.matrix import load_matrix
from tests.unit.conftest import REPO, MakeProject


def fatbin(entries: list[tuple[int, int, bytes]]) -> bytes:
    """A fatbinary container: (kind, arch, payload) entries, kind 1 for PTX and 2 for an ELF cubin."""
    body = b""
    for kind, arch, payload in entries:
        header = struct.pack("<HHIQII", kind, 1, 64, len(payload), 0, 0) + struct.pack("<HHI", 0, 0, arch)
        body += header + b"\0" * (64 - len(header)) + payload
    return struct.pack("<IHHQ", FATBIN_MAGIC, 1, 16, len(body)) + body


def elf_with_section(name: bytes, data: bytes) -> bytes:
    """A 64-bit little-endian ELF holding sections: null, .shstrtab and `name` with `data`."""
    names = b"\0.shstrtab\0" + name + b"\0"
    names_at, data_at = 64, 64 + len(names)
    sections_at = data_at + len(data) + (-(data_at + len(data)) % 8)
    header = b"\x7fELF" + bytes([2, 1, 1]) + b"\0" * 9
    header += struct.pack("<HHIQQQIHHHHHH", 3, 62, 1, 0, 0, sections_at, 0, 64, 0, 0, 64, 3, 1)
    section = "<IIQQQQIIQQ"
    table = struct.pack(section, *([0] * 10))
    table += struct.pack(section, 1, 3, 0, 0, names_at, len(names), 0, 0, 1, 0)
    table += struct.pack(section, 11, 1, 0, 0, data_at, len(data), 0, 0, 8, 0)
    padding = b"\0" * (sections_at - data_at - len(data))
    return header + names + data + padding + table


def test_fatbin_architectures_lists_sass_and_ptx_of_every_container(tmp_path: Path) -> None:
    library = tmp_path / "libk.so"
    data = fatbin([(2, 80, b"cubin" * 10), (1, 75, b"ptx")]) + b"\0" * 8 + fatbin([(2, 90, b"c")])
    library.write_bytes(elf_with_section(b".nv_fatbin", data))
    assert fatbin_architectures(library) == ["compute_75", "sm_80", "sm_90"]


def test_a_library_without_fatbinaries_has_no_architectures(tmp_path: Path) -> None:
    library = tmp_path / "libplain.so"
    library.write_bytes(elf_with_section(b".text", b"\x90" * 16))
    assert fatbin_architectures(library) == []


def test_ldd_misses_are_read_from_its_output() -> None:
    out = (
        "\tlinux-vdso.so.1 (0x00007ffd)\n\tlibcuda.so.1 => not found\n"
        "\tlibm.so.6 => /lib/x86_64-linux-gnu/libm.so.6 (0x00007f)\n\tlibmlx5.so.1 => not found\n"
    )
    assert missing_libraries(out) == ["libcuda.so.1", "libmlx5.so.1"]


def context(image: Any, tmp_path: Path, gpus: bool = False) -> CheckContext:
    return CheckContext(image=image, reference="sha256:x", scratch=tmp_path, say=lambda line: None, gpus=gpus)


def test_a_cpu_image_holding_cuda_packages_fails(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # What the 5.1 GB "cpu" image of torch==2.13.0 from PyPI held.
    held = ["numpy", "torch", "triton", "nvidia-cublas", "nvidia_cudnn_cu13", "cuda-bindings"]
    monkeypatch.setattr(contentchecks, "inspect", lambda ctx, *args: {"distributions": held})
    image = load_matrix(REPO).select(["pytorch:2.13-cpu"])[0]
    with pytest.raises(CheckFailure, match="a cpu image holds CUDA packages: triton, nvidia-cublas, nvidia_cudnn_cu13"):
        contentchecks.check_variant_content(context(image, tmp_path))


def cuda_image(make_project: MakeProject) -> Any:
    return load_matrix(make_project()).select(["toy:1.0-cuda"])[0]


def fake_content(monkeypatch: pytest.MonkeyPatch, probe: dict[str, Any], capabilities: list[str]) -> None:
    report = {
        "distributions": ["six", "nvidia-cuda-runtime-cu12"],
        "library": "/x/libtoy.so",
        "capabilities": capabilities,
    }
    monkeypatch.setattr(contentchecks, "inspect", lambda ctx, *args: report)
    monkeypatch.setattr(contentchecks, "probe", lambda ctx: (probe, ""))


@pytest.mark.parametrize(
    ("probe", "capabilities", "message"),
    [
        ({"cuda": None, "cudnn": None, "gpus": 0}, ["sm_80", "compute_80"], "toy was not built with CUDA"),
        ({"cuda": "12.8", "cudnn": None, "gpus": 0}, ["sm_80", "compute_80"], "built with CUDA 12.8, .* says 12.9"),
        ({"cuda": "12.9", "cudnn": "9.1", "gpus": 0}, ["sm_80", "compute_80"], "uses cuDNN 9.1, .* says none"),
        (
            {"cuda": "12.9.1", "cudnn": None, "gpus": 0},
            ["sm_80"],
            "carries sm_80; framework.yaml says sm_80 compute_80",
        ),
    ],
)
def test_a_cuda_image_unlike_its_framework_yaml_fails(
    make_project: MakeProject,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    probe: dict[str, Any],
    capabilities: list[str],
    message: str,
) -> None:
    fake_content(monkeypatch, probe, capabilities)
    with pytest.raises(CheckFailure, match=message):
        contentchecks.check_variant_content(context(cuda_image(make_project), tmp_path))


def test_a_cuda_image_as_declared_passes_and_must_see_the_gpus_it_was_given(
    make_project: MakeProject, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake_content(monkeypatch, {"cuda": "12.9.1", "cudnn": None, "gpus": 0}, ["compute_80", "sm_80"])
    image = cuda_image(make_project)
    assert contentchecks.check_variant_content(context(image, tmp_path)).startswith("CUDA 12.9.1, cuDNN none")
    with pytest.raises(CheckFailure, match="the engine gave the container GPUs, but toy sees none"):
        contentchecks.check_variant_content(context(image, tmp_path, gpus=True))


def test_only_the_drivers_library_may_stay_unresolved(
    make_project: MakeProject, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    image = cuda_image(make_project)
    unresolved = {"/opt/a.so": ["libcuda.so.1"]}
    monkeypatch.setattr(contentchecks, "inspect", lambda ctx, *args: {"unresolved": unresolved})
    assert "1 need the host's driver (libcuda.so.1)" in contentchecks.check_shared_libraries(context(image, tmp_path))
    unresolved["/opt/b.so"] = ["libcuda.so.1", "libcudnn.so.9"]
    with pytest.raises(CheckFailure, match=r"1 shared libraries do not resolve: /opt/b.so: libcudnn.so.9"):
        contentchecks.check_shared_libraries(context(image, tmp_path))


def test_the_framework_is_its_pip_packages_but_the_cuda_ones() -> None:
    image = load_matrix(REPO).select(["pytorch:2.13-cuda"])[0]
    assert contentchecks.framework_distributions(image) == ["torch", "numpy", "tensorboard"]


def test_cuda_training_without_gpus_is_a_skip_with_its_reason(make_project: MakeProject, tmp_path: Path) -> None:
    with pytest.raises(CheckSkipped, match=r"GPU training not run: no GPUs asked for \(`image test --gpus`"):
        check_smoke(context(cuda_image(make_project), tmp_path))
