"""`model predict`'s input file: a v2 body sent as it is, a plain JSON tensor made the model's one input, and a
file that is neither named."""

import json
from pathlib import Path

import pytest

from learnerkit.scheduler.serving.predict import PredictError, request_body

METADATA = {"inputs": [{"name": "input", "datatype": "FP32", "shape": [-1, 2, 3]}]}


def body_of(tmp_path: Path, data: object) -> dict[str, object]:
    path = tmp_path / "input.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return request_body(path, METADATA)


def test_a_v2_body_goes_as_it_is(tmp_path: Path) -> None:
    body = {"id": "a", "inputs": [{"name": "x", "shape": [1], "datatype": "FP64", "data": [1]}]}
    assert body_of(tmp_path, body) == body


def test_one_example_becomes_a_batch_of_one_and_a_batch_keeps_its_shape(tmp_path: Path) -> None:
    example = [[1, 2, 3], [4, 5, 6]]
    assert body_of(tmp_path, example)["inputs"] == [
        {"name": "input", "shape": [1, 2, 3], "datatype": "FP32", "data": [example]}
    ]
    batch = [example, example, example]
    assert body_of(tmp_path, batch)["inputs"] == [
        {"name": "input", "shape": [3, 2, 3], "datatype": "FP32", "data": batch}
    ]


@pytest.mark.parametrize(
    ("data", "named"),
    [
        ({"data": [1]}, "an object must be a v2 infer request with `inputs`"),
        ("text", "expected a v2 infer request or a JSON tensor"),
        ([[1, 2], [3]], "input.json[1]: shape [1], but [0] has [2] (not a rectangular tensor)"),
        ([[]], "input.json[0]: an empty list is no tensor"),
    ],
)
def test_a_file_that_is_no_request_is_named(tmp_path: Path, data: object, named: str) -> None:
    with pytest.raises(PredictError) as refused:
        body_of(tmp_path, data)
    assert named in str(refused.value)


def test_a_file_that_is_not_json_is_named(tmp_path: Path) -> None:
    path = tmp_path / "input.json"
    path.write_text("[1, 2", encoding="utf-8")
    with pytest.raises(PredictError, match=r"input\.json: not a JSON file"):
        request_body(path, METADATA)
