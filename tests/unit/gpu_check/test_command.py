"""`scripts/gpu-check.sh` as a user runs it, on a machine without a GPU: it must fail, saying why."""

import shutil
import subprocess
import sys

import pytest

from tests.unit.gpu_check.scripts import ROOT

pytestmark = pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="this machine has an NVIDIA GPU")


def gpu_check(*args: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "PYTHON": sys.executable}
    command = [str(ROOT / "scripts" / "gpu-check.sh"), *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, check=False)


def test_without_a_gpu_the_check_fails_on_nvml_and_skips_what_is_not_installed() -> None:
    done = gpu_check("caffe", "mxnet")
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout.splitlines() == [
        f"skip caffe: caffe is not installed in {sys.executable}",
        f"skip mxnet: mxnet is not installed in {sys.executable}",
        "FAIL nvml: no NVML: install nvidia-ml-py (the sidecar image's pin) on a host with the NVIDIA driver",
    ]


@pytest.mark.parametrize(("args", "message"), [(["keras"], "unknown framework keras"), (["--rounds", "0"], "--rounds")])
def test_bad_arguments_are_named(args: list[str], message: str) -> None:
    done = gpu_check(*args)
    assert done.returncode == 2
    assert message in done.stderr
