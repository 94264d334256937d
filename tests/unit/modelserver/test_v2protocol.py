"""The Open Inference Protocol v2 mapping of the model server: an `infer` body checked against the model's input,
each refusal naming its field, and the answers' shapes."""

import json

import pytest
from v2protocol import BadRequest, Signature, infer_response, metadata, parse_infer

DIGITS = Signature("digits", "sha256:" + "a" * 64, (64,), 10)


def body(**tensor: object) -> bytes:
    base: dict[str, object] = {"name": "input", "shape": [2, 64], "datatype": "FP32", "data": [0.5] * 128}
    return json.dumps({"inputs": [{**base, **tensor}]}).encode()


def refusal(raw: bytes) -> str:
    with pytest.raises(BadRequest) as caught:
        parse_infer(raw, DIGITS)
    return str(caught.value)


def test_a_flat_body_is_the_batch_row_major() -> None:
    batch = parse_infer(body(data=[float(i) for i in range(128)]), DIGITS)
    assert batch.shape == (2, 64)
    assert batch.values == [float(i) for i in range(128)]
    assert batch.id is None


def test_nested_data_is_flattened_row_major_and_the_id_kept() -> None:
    rows = [[float(r * 64 + c) for c in range(64)] for r in range(2)]
    raw = json.dumps({"id": "r1", "inputs": [{"name": "input", "shape": [2, 64], "datatype": "FP32", "data": rows}]})
    batch = parse_infer(raw.encode(), DIGITS)
    assert batch.values == [float(i) for i in range(128)]
    assert batch.id == "r1"


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
    answer = json.loads(infer_response(DIGITS, "r1", (1, 3), logits))
    assert answer == {
        "model_name": "digits",
        "model_version": DIGITS.version,
        "id": "r1",
        "outputs": [{"name": "logits", "datatype": "FP32", "shape": [1, 3], "data": logits}],
    }
    assert "id" not in json.loads(infer_response(DIGITS, None, (1, 3), logits))


def test_metadata_names_the_batch_dimension_and_the_tensors() -> None:
    assert metadata(DIGITS, "pytorch_torchscript") == {
        "name": "digits",
        "versions": [DIGITS.version],
        "platform": "pytorch_torchscript",
        "inputs": [{"name": "input", "datatype": "FP32", "shape": [-1, 64]}],
        "outputs": [{"name": "logits", "datatype": "FP32", "shape": [-1, 10]}],
    }
