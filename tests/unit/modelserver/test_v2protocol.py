"""The Open Inference Protocol v2 mapping of the model server: an `infer` body checked against the model's inputs
(one, as learner.save_model's classifier takes, or several of several datatypes, as an ONNX graph may), each
refusal naming its field, and the answers' shapes."""

import json

import pytest
from v2protocol import BadRequest, Signature, Tensor, TensorSpec, infer_response, metadata, parse_infer

DIGITS = Signature(
    "digits",
    "sha256:" + "a" * 64,
    "pytorch_torchscript",
    (TensorSpec("input", "FP32", (-1, 64)),),
    (TensorSpec("logits", "FP32", (-1, 10)),),
)
SCORED = Signature(
    "scored",
    "sha256:" + "b" * 64,
    "onnxruntime_onnx",
    (
        TensorSpec("x", "FP32", (-1, 4), ("batch", None)),
        TensorSpec("shift", "INT64", (-1,), ("batch",)),
        TensorSpec("mask", "BOOL", (2,)),
    ),
    (TensorSpec("logits", "FP32", (-1, 3)), TensorSpec("best", "INT64", (-1,))),
)


def body(**tensor: object) -> bytes:
    base: dict[str, object] = {"name": "input", "shape": [2, 64], "datatype": "FP32", "data": [0.5] * 128}
    return json.dumps({"inputs": [{**base, **tensor}]}).encode()


def refusal(raw: bytes) -> str:
    with pytest.raises(BadRequest) as caught:
        parse_infer(raw, DIGITS)
    return str(caught.value)


def test_a_flat_body_is_the_batch_row_major() -> None:
    request = parse_infer(body(data=[float(i) for i in range(128)]), DIGITS)
    assert request.inputs == (Tensor("input", "FP32", (2, 64), [float(i) for i in range(128)]),)
    assert request.id is None
    assert request.outputs == ("logits",)


def test_nested_data_is_flattened_row_major_and_the_id_kept() -> None:
    rows = [[float(r * 64 + c) for c in range(64)] for r in range(2)]
    raw = json.dumps({"id": "r1", "inputs": [{"name": "input", "shape": [2, 64], "datatype": "FP32", "data": rows}]})
    request = parse_infer(raw.encode(), DIGITS)
    assert request.inputs[0].values == [float(i) for i in range(128)]
    assert request.id == "r1"


@pytest.mark.parametrize(
    ("raw", "named"),
    [
        (b"{not json", "the body is not JSON"),
        (b"[1, 2]", "the body must be a JSON object"),
        (json.dumps({"inputs": []}).encode(), "inputs: digits takes exactly one input ('input'), got 0 inputs"),
        (json.dumps({"id": 3, "inputs": []}).encode(), "id: must be a string"),
        (body(name="x"), "inputs[0].name: 'x' is not an input of digits"),
        (body(datatype="FP64"), "inputs[0].datatype: 'FP64'; digits takes FP32"),
        (body(shape=[2, 63]), "inputs[0].shape: [2, 63] does not fit digits's input [-1, 64]"),
        (body(shape=[0, 64], data=[]), "inputs[0].shape: [0, 64] does not fit"),
        (body(shape="2x64"), "inputs[0].shape: must be a list of sizes"),
        (body(data=[0.5] * 127), "inputs[0].data: 127 values for shape [2, 64] (128 expected)"),
        (body(data=[0.5] * 127 + ["a"]), "inputs[0].data: 'a' is not a finite number"),
        (body(data=[0.5] * 127 + [True]), "inputs[0].data: True is not a finite number"),
    ],
)
def test_a_body_that_does_not_fit_is_refused_naming_the_field(raw: bytes, named: str) -> None:
    assert named in refusal(raw)


def test_missing_data_names_the_binary_extension() -> None:
    raw = json.dumps({"inputs": [{"name": "input", "shape": [1, 64], "datatype": "FP32"}]}).encode()
    assert "inputs[0].data: missing (the binary tensor extension is not spoken" in refusal(raw)


def test_an_output_it_does_not_have_is_named() -> None:
    raw = json.loads(body())
    raw["outputs"] = [{"name": "logits"}, {"name": "probabilities"}]
    assert "outputs[1].name: 'probabilities' is not an output of digits" in refusal(json.dumps(raw).encode())


def test_the_answer_carries_the_logits_exactly_with_the_id_and_version() -> None:
    logits = [0.1, -2.5, 3.0000001192092896]
    answer = json.loads(infer_response(DIGITS, "r1", [Tensor("logits", "FP32", (1, 3), logits)]))
    assert answer == {
        "model_name": "digits",
        "model_version": DIGITS.version,
        "id": "r1",
        "outputs": [{"name": "logits", "datatype": "FP32", "shape": [1, 3], "data": logits}],
    }
    assert "id" not in json.loads(infer_response(DIGITS, None, [Tensor("logits", "FP32", (1, 3), logits)]))


def test_metadata_names_the_batch_dimension_and_the_tensors() -> None:
    assert metadata(DIGITS) == {
        "name": "digits",
        "versions": [DIGITS.version],
        "platform": "pytorch_torchscript",
        "inputs": [{"name": "input", "datatype": "FP32", "shape": [-1, 64]}],
        "outputs": [{"name": "logits", "datatype": "FP32", "shape": [-1, 10]}],
    }


def scored(**changed: object) -> bytes:
    tensors: list[dict[str, object]] = [
        {"name": "mask", "shape": [2], "datatype": "BOOL", "data": [True, False]},
        {"name": "x", "shape": [2, 4], "datatype": "FP32", "data": [[0.5] * 4, [1.5] * 4]},
        {"name": "shift", "shape": [2], "datatype": "INT64", "data": [3, -(2**63)]},
    ]
    return json.dumps({"inputs": tensors, **changed}).encode()


def with_input(index: int, **field: object) -> bytes:
    raw = json.loads(scored())
    raw["inputs"][index].update(field)
    return json.dumps(raw).encode()


def test_several_inputs_are_taken_by_name_in_any_order_each_of_its_datatype() -> None:
    request = parse_infer(scored(outputs=[{"name": "best"}]), SCORED)
    assert request.inputs == (
        Tensor("x", "FP32", (2, 4), [0.5] * 4 + [1.5] * 4),
        Tensor("shift", "INT64", (2,), [3, -(2**63)]),
        Tensor("mask", "BOOL", (2,), [True, False]),
    )
    assert request.outputs == ("best",)
    assert parse_infer(scored(), SCORED).outputs == ("logits", "best")


@pytest.mark.parametrize(
    ("raw", "named"),
    [
        (json.dumps({"inputs": []}).encode(), "inputs: scored takes 3 inputs ('x', 'shift', 'mask'), got 0 inputs"),
        (with_input(2, name="x"), "inputs[2].name: 'x' is given twice"),
        (with_input(2, name="offset"), "inputs[2].name: 'offset' is not an input of scored ('x', 'shift', 'mask')"),
        (with_input(2, datatype="INT32"), "inputs[2].datatype: 'INT32'; scored takes INT64 as 'shift'"),
        (with_input(1, shape=[2, 5]), "inputs[1].shape: [2, 5] does not fit scored's input 'x' [-1, 4]"),
        (with_input(0, shape=[3], data=[True] * 3), "inputs[0].shape: [3] does not fit scored's input 'mask' [2]"),
        (
            with_input(2, shape=[3], data=[1, 2, 3]),
            "inputs[2].shape: [3]: dimension 0 ('batch') is 3, but inputs[1] has 'batch' 2",
        ),
        (with_input(2, data=[1, 2.5]), "inputs[2].data: 2.5 is not a whole number (INT64)"),
        (with_input(2, data=[1, 2**63]), f"inputs[2].data: {2**63} is out of INT64's range"),
        (with_input(2, data=[1, True]), "inputs[2].data: True is not a finite number"),
        (with_input(0, data=[1, 0]), "inputs[0].data: 1 is not a boolean (BOOL takes true or false)"),
        (scored(outputs=[{"name": "probabilities"}]), "outputs[0].name: 'probabilities' is not an output of scored"),
    ],
)
def test_a_body_that_does_not_fit_one_of_several_inputs_names_it(raw: bytes, named: str) -> None:
    with pytest.raises(BadRequest) as caught:
        parse_infer(raw, SCORED)
    assert named in str(caught.value)


def test_metadata_gives_each_tensor_with_its_datatype() -> None:
    assert metadata(SCORED)["inputs"] == [
        {"name": "x", "datatype": "FP32", "shape": [-1, 4]},
        {"name": "shift", "datatype": "INT64", "shape": [-1]},
        {"name": "mask", "datatype": "BOOL", "shape": [2]},
    ]
    assert metadata(SCORED)["outputs"][1] == {"name": "best", "datatype": "INT64", "shape": [-1]}
