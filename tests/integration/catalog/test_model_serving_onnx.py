"""ONNX through onnxruntime, and the server's own SIGTERM, with the real model server image: a job whose learner
saved `results/model/model.onnx` registered, aliased and served by `learnerkit model serve`, answering Triton's
stock v2 client with the graph's metadata and the outputs onnxruntime computes in the same image, a body naming
an input the graph lacks refused by name, a changed byte of the graph refused at load; and a client connected to
the server container itself, on kept-alive connections, told to close when the container is stopped."""

from __future__ import annotations

import http.client
import json
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import requests
import torch
import tritonclient.http as v2client
from click.testing import CliRunner

from learnerkit.cli import cli
from learnerkit.common.engine import engine
from learnerkit.scheduler.backends.modelservers import SERVER_IMAGE, ServingError, read_only_for_all, run_server
from learnerkit_build.publish.push import PublishRefused, check_gates
from tests.integration.catalog.test_model_serving import (
    SERVER_SPEC,
    left_behind,
    model,
    registered_tenant,
    result_job,
)
from tests.unit.modelserver.versions import onnx_bytes
from tests.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

REFERENCE = """
import json, numpy, onnxruntime
session = onnxruntime.InferenceSession('/out/model.onnx', providers=['CPUExecutionProvider'])
x = numpy.array(json.load(open('/out/x.json')), dtype=numpy.float32)
(logits,) = session.run(None, {'input': x})
json.dump({'logits': logits.tolist(), 'onnxruntime': onnxruntime.__version__}, open('/out/called.json', 'w'))
"""


@pytest.fixture(scope="module")
def digits_onnx(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A digits-shaped classifier exported to ONNX as a job exports it, and its logits for 4 inputs computed by
    the server image's onnxruntime, in-process (no server)."""
    if not engine().images.list(name=SERVER_IMAGE.split(":")[0]):
        pytest.fail(f"{SERVER_IMAGE} is not built: `learnerkit image build modelserver`")
    try:
        check_gates(SERVER_IMAGE)
    except PublishRefused:  # as test_model_serving.py: serve needs the image's test and scan records
        for verb in ("test", "scan"):
            result = CliRunner().invoke(cli, ["image", verb, SERVER_SPEC])
            assert result.exit_code == 0, result.output
    out = tmp_path_factory.mktemp("digits-onnx")
    out.chmod(0o777)
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10))
    (out / "model.onnx").write_bytes(onnx_bytes(net, (torch.zeros(1, 64),), ["input"], ["logits"]))
    x = torch.rand(4, 64, generator=torch.Generator().manual_seed(1)) * 16
    (out / "x.json").write_text(json.dumps(x.tolist()), encoding="utf-8")
    argv = ["docker", "run", "--rm", "--read-only", "--tmpfs", "/tmp", "--network", "none", "-v", f"{out}:/out"]
    argv += ["--entrypoint", "python", SERVER_IMAGE, "-c", REFERENCE]
    subprocess.run(argv, check=True, timeout=300)
    return out


def called(digits_onnx: Path) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    x = json.loads((digits_onnx / "x.json").read_text(encoding="utf-8"))
    reference = json.loads((digits_onnx / "called.json").read_text(encoding="utf-8"))
    return np.array(x, dtype=np.float32), np.array(reference["logits"], dtype=np.float32)


@pytest.fixture
def env(registry: str, tmp_path: Path, digits_onnx: Path) -> Iterator[dict[str, str]]:
    """A tenant of its own with the ONNX digits registered (its only model file) and aliased `production`."""
    folder, key = result_job(tmp_path / "job", {"results/model/model.onnx": (digits_onnx / "model.onnx").read_bytes()})
    with registered_tenant(registry, folder, key) as variables:
        yield variables


def test_an_onnx_version_served_answers_a_stock_v2_client_as_onnxruntime_in_process(
    env: dict[str, str], digits_onnx: Path
) -> None:
    code, out = model("serve", "digits@production", env=env)
    assert code == 0, out
    served = json.loads(out)
    client = v2client.InferenceServerClient(served["url"].removeprefix("http://"))
    assert client.is_model_ready("digits")
    metadata = client.get_model_metadata("digits")
    assert metadata["platform"] == "onnxruntime_onnx"
    assert metadata["inputs"] == [{"name": "input", "datatype": "FP32", "shape": [-1, 64]}]
    assert metadata["outputs"] == [{"name": "logits", "datatype": "FP32", "shape": [-1, 10]}]
    x, logits = called(digits_onnx)
    tensor = v2client.InferInput("input", list(x.shape), "FP32")
    tensor.set_data_from_numpy(x, binary_data=False)
    answer = client.infer("digits", [tensor])
    assert answer.as_numpy("logits").shape == (4, 10)
    assert np.array_equal(answer.as_numpy("logits"), logits)  # as onnxruntime computes them, bit for bit

    wrong = {"inputs": [{"name": "pixels", "shape": [1, 64], "datatype": "FP32", "data": [0.0] * 64}]}
    refused = requests.post(f"{served['url']}/v2/models/digits/infer", json=wrong, timeout=30)
    assert refused.status_code == 400
    assert refused.json()["error"] == "inputs[0].name: 'pixels' is not an input of digits ('input')"
    code, out = model("stop", "digits", env=env)
    assert code == 0, out
    assert not left_behind(env["LEARNERKIT_TENANT"])


def pulled(env: dict[str, str], tmp_path: Path) -> tuple[Path, Path, str]:
    """The version pulled and made read-only as `serve` does, and a folder with the platform's public key."""
    folder = tmp_path / "pulled"
    code, out = model("pull", "digits@production", str(folder), env=env)
    assert code == 0, out
    keys = tmp_path / "keys"
    keys.mkdir()
    shutil.copy(Path(env["LEARNERKIT_SIGNING_KEY"]).with_suffix(".pub"), keys / "platform.pub")
    return folder, keys, json.loads(out)["version"]


def test_an_onnx_version_whose_graph_changed_is_refused_at_load(env: dict[str, str], tmp_path: Path) -> None:
    folder, keys, version = pulled(env, tmp_path)
    graph = next(folder.glob("attempt-*/learner-*/results/model/model.onnx"))
    data = bytearray(graph.read_bytes())
    data[len(data) // 2] ^= 1
    graph.write_bytes(bytes(data))
    read_only_for_all(folder)
    with pytest.raises(ServingError) as refused:
        run_server(env["LEARNERKIT_TENANT"], "digits", version, folder, keys)
    message = str(refused.value)
    assert "exited 2" in message and "results/model/model.onnx: changed (its SHA-256 is not the signed one)" in message
    assert not left_behind(env["LEARNERKIT_TENANT"])


def test_stopping_the_server_container_tells_its_direct_kept_alive_clients_to_close(
    env: dict[str, str], digits_onnx: Path, tmp_path: Path
) -> None:
    """One client idle on a kept-alive connection, one whose `infer` the server has read the head of (it answered
    `100 Continue`) but not the body: `docker stop` (SIGTERM through tini) closes the first while the container
    runs, and answers the second whole, with `Connection: close`."""
    folder, keys, version = pulled(env, tmp_path)
    read_only_for_all(folder)
    served = run_server(env["LEARNERKIT_TENANT"], "digits", version, folder, keys)
    container = engine().containers.get(served.container)
    port = int(served.url.rsplit(":", 1)[1])
    idle = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    idle.request("GET", "/v2/health/ready")
    assert idle.getresponse().read() and idle.sock is not None

    x, logits = called(digits_onnx)
    body = json.dumps(
        {"inputs": [{"name": "input", "shape": [4, 64], "datatype": "FP32", "data": x.ravel().tolist()}]}
    ).encode()
    busy = socket.create_connection(("127.0.0.1", port), timeout=60)
    head = f"POST /v2/models/digits/infer HTTP/1.1\r\nHost: m\r\nContent-Length: {len(body)}\r\n"
    head += "Expect: 100-continue\r\n\r\n"
    busy.sendall(head.encode())
    assert busy.recv(1024).startswith(b"HTTP/1.1 100 Continue\r\n")

    container.kill(signal="SIGTERM")  # what `docker stop` sends first
    assert idle.sock.recv(1) == b"", "the idle kept-alive connection was not closed"
    container.reload()
    assert container.status == "running", "the server exited with a request in flight"
    busy.sendall(body)
    answer = http.client.HTTPResponse(busy)
    answer.begin()
    assert answer.status == 200 and answer.getheader("Connection") == "close"
    assert np.array_equal(np.array(json.loads(answer.read())["outputs"][0]["data"], dtype=np.float32), logits.ravel())
    wait_until(lambda: container.reload() or container.status == "exited", timeout=60, message="the server's exit")
    assert container.attrs["State"]["ExitCode"] == 0
    assert "drained" in container.logs().decode() and "NOT drained" not in container.logs().decode()
    container.remove(force=True)
