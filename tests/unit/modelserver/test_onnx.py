"""ONNX versions in the model server: the graph's own signature, its outputs as onnxruntime computes them, ONNX
chosen where a learner saved it beside TorchScript, refused at load when its signature does not verify or its
graph has a tensor the server cannot carry, and a body that does not fit named by input over HTTP."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime
import pytest
import torch
from serve import LoadRefused, load, pick_model
from v2protocol import metadata, parse_infer

from .versions import MODEL_FOLDER, Scored, Server, infer_body, onnx_bytes, signed_version, torchscript_files

pytestmark = pytest.mark.timeout(300)
VERSION = "sha256:" + "a" * 64
X = [[0.5, -1.0, 2.0, 0.25], [3.0, 0.0, -0.5, 1.0]]
SHIFT = [2, -7]


@pytest.fixture(scope="module")
def scored() -> bytes:
    return onnx_bytes(
        Scored(), (torch.zeros(1, 4), torch.zeros(1, dtype=torch.int64)), ["x", "shift"], ["logits", "best"]
    )


def body(**extra: Any) -> bytes:
    return json.dumps({**infer_body(("x", "FP32", [2, 4], X), ("shift", "INT64", [2], SHIFT)), **extra}).encode()


def test_an_onnx_version_answers_with_the_graphs_tensors_as_onnxruntime_computes_them(
    tmp_path: Path, scored: bytes
) -> None:
    folder, key = signed_version(tmp_path, {f"{MODEL_FOLDER}/model.onnx": scored})
    served = load(folder, [key], "m", VERSION)
    assert metadata(served.signature) == {
        "name": "m",
        "versions": [VERSION],
        "platform": "onnxruntime_onnx",
        "inputs": [
            {"name": "x", "datatype": "FP32", "shape": [-1, 4]},
            {"name": "shift", "datatype": "INT64", "shape": [-1]},
        ],
        "outputs": [
            {"name": "logits", "datatype": "FP32", "shape": [-1, 3]},
            {"name": "best", "datatype": "INT64", "shape": [-1]},
        ],
    }
    logits, best = served.run(parse_infer(body(), served.signature))

    session = onnxruntime.InferenceSession(scored, providers=["CPUExecutionProvider"])
    expected = session.run(None, {"x": np.array(X, dtype=np.float32), "shift": np.array(SHIFT, dtype=np.int64)})
    assert (logits.name, logits.datatype, logits.shape) == ("logits", "FP32", (2, 3))
    assert logits.values == expected[0].ravel().tolist()  # as computed, bit for bit
    assert (best.name, best.datatype, best.shape, best.values) == ("best", "INT64", (2,), expected[1].tolist())
    with torch.no_grad():
        in_torch = Scored()(torch.tensor(X), torch.tensor(SHIFT))
    assert np.allclose(logits.values, in_torch[0].ravel().numpy(), atol=1e-6) and best.values == in_torch[1].tolist()
    (only_best,) = served.run(parse_infer(body(outputs=[{"name": "best"}]), served.signature))
    assert only_best.name == "best" and only_best.values == best.values


def test_onnx_beside_torchscript_is_served_and_the_last_attempts_first_learner_chosen(
    tmp_path: Path, scored: bytes
) -> None:
    files = {**torchscript_files(tmp_path), f"{MODEL_FOLDER}/model.onnx": scored}
    folder, key = signed_version(tmp_path, files)
    assert load(folder, [key], "m", VERSION).signature.platform == "onnxruntime_onnx"
    signed = [
        "attempt-1/learner-1/results/model/model.onnx",
        "attempt-2/learner-2/results/model/model.onnx",
        "attempt-2/learner-1/results/model/model.pt",
        "attempt-2/learner-1/results/model/model.json",
    ]
    assert pick_model(signed, "m") == "attempt-2/learner-1/results/model/model.pt"
    assert pick_model([*signed, "attempt-2/learner-1/results/model/model.onnx"], "m").endswith(
        "learner-1/results/model/model.onnx"
    )
    with pytest.raises(LoadRefused) as refused:
        pick_model(["attempt-1/learner-1/results/model/model.pt", "attempt-1/learner-1/results/model.onnx"], "m")
    assert "no signed results/model/model.onnx, nor results/model/model.pt with its model.json" in str(refused.value)


def test_an_onnx_version_whose_signature_does_not_verify_is_refused_before_loading(
    tmp_path: Path, scored: bytes
) -> None:
    folder, key = signed_version(tmp_path, {f"{MODEL_FOLDER}/model.onnx": scored})
    model = folder / MODEL_FOLDER / "model.onnx"
    data = bytearray(model.read_bytes())
    data[len(data) // 2] ^= 1
    model.write_bytes(bytes(data))
    with pytest.raises(LoadRefused) as refused:
        load(folder, [key], "m", VERSION)
    assert str(refused.value) == (
        f"m@{VERSION}: the model signature does not verify: "
        f"{MODEL_FOLDER}/model.onnx: changed (its SHA-256 is not the signed one)"
    )


def test_a_graph_the_server_cannot_carry_or_load_is_refused_naming_it(tmp_path: Path) -> None:
    text = onnx.helper.make_tensor_value_info("text", onnx.TensorProto.STRING, [None])
    echoed = onnx.helper.make_tensor_value_info("echoed", onnx.TensorProto.STRING, [None])
    graph = onnx.helper.make_graph([onnx.helper.make_node("Identity", ["text"], ["echoed"])], "g", [text], [echoed])
    strings = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])
    strings.ir_version = 8
    folder, key = signed_version(tmp_path / "strings", {f"{MODEL_FOLDER}/model.onnx": strings.SerializeToString()})
    with pytest.raises(LoadRefused) as refused:
        load(folder, [key], "m", VERSION)
    assert f"{MODEL_FOLDER}/model.onnx: input 'text' is tensor(string); this server serves" in str(refused.value)
    folder, key = signed_version(tmp_path / "garbage", {f"{MODEL_FOLDER}/model.onnx": b"not a graph"})
    with pytest.raises(LoadRefused) as refused:
        load(folder, [key], "m", VERSION)
    assert f"{MODEL_FOLDER}/model.onnx: onnxruntime cannot load it" in str(refused.value)


def post(url: str, data: bytes) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=data), timeout=60) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_over_http_an_infer_body_that_does_not_fit_the_graph_is_a_400_naming_the_input(
    tmp_path: Path, scored: bytes
) -> None:
    server = Server(*signed_version(tmp_path, {f"{MODEL_FOLDER}/model.onnx": scored}))
    try:
        url = f"http://127.0.0.1:{server.port}/v2/models/m/infer"
        status, answer = post(url, body())
        assert status == 200 and [o["name"] for o in answer["outputs"]] == ["logits", "best"], answer
        wrong = json.loads(body())
        wrong["inputs"][1]["shape"], wrong["inputs"][1]["data"] = [3], [1, 2, 3]
        status, answer = post(url, json.dumps(wrong).encode())
        assert status == 400
        assert answer["error"] == "inputs[1].shape: [3]: dimension 0 ('batch') is 3, but inputs[0] has 'batch' 2"
        wrong["inputs"][1] = {"name": "offset", "shape": [2], "datatype": "INT64", "data": [1, 2]}
        status, answer = post(url, json.dumps(wrong).encode())
        assert status == 400 and answer["error"] == "inputs[1].name: 'offset' is not an input of m ('x', 'shift')"
    finally:
        server.stop()
