"""The Open Inference Protocol v2 (KServe, Triton) as JSON: an `infer` body checked against the model's input,
and the answers' bodies. Standard library only, so it is tested without torch.

Only the JSON tensor form is spoken: a body of the binary tensor extension (`Inference-Header-Content-Length`)
is refused by name. Every refusal names the field that is wrong, as a 400 whose body is `{"error": ...}`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

DATATYPE = "FP32"
"""What a model saved by learner.save_model takes and returns (float32 tensors)."""
INPUT_NAME = "input"
OUTPUT_NAME = "logits"


class BadRequest(ValueError):
    """An `infer` body the model cannot take; the message names the field (`inputs[0].shape`)."""


@dataclass(frozen=True)
class Signature:
    """One model's tensors: one example's input shape (no batch) and how many logits come out."""

    name: str
    version: str
    input_shape: tuple[int, ...]
    classes: int


@dataclass(frozen=True)
class Batch:
    """An `infer` request made ready for the model: the values row-major, the shape with its batch first."""

    id: str | None
    shape: tuple[int, ...]
    values: list[float]


def metadata(model: Signature, platform: str) -> dict[str, Any]:
    """`GET /v2/models/{name}`: a batch dimension of any size (-1) before one example's shape."""
    return {
        "name": model.name,
        "versions": [model.version],
        "platform": platform,
        "inputs": [{"name": INPUT_NAME, "datatype": DATATYPE, "shape": [-1, *model.input_shape]}],
        "outputs": [{"name": OUTPUT_NAME, "datatype": DATATYPE, "shape": [-1, model.classes]}],
    }


def parse_infer(body: bytes, model: Signature) -> Batch:
    """The body of `POST /v2/models/{name}/infer`, checked against the model's one input; `BadRequest` names what
    does not fit (the JSON, `inputs`, `inputs[0].name`, `.datatype`, `.shape`, `.data`, `outputs[i].name`)."""
    try:
        request = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise BadRequest(f"the body is not JSON: {e}") from e
    if not isinstance(request, dict):
        raise BadRequest(f"the body must be a JSON object with `inputs`, got {_kind(request)}")
    request_id = request.get("id")
    if request_id is not None and not isinstance(request_id, str):
        raise BadRequest(f"id: must be a string, got {_kind(request_id)}")
    inputs = request.get("inputs")
    if not isinstance(inputs, list) or len(inputs) != 1:
        got = f"{len(inputs)} inputs" if isinstance(inputs, list) else _kind(inputs)
        raise BadRequest(f"inputs: {model.name} takes exactly one input ({INPUT_NAME!r}), got {got}")
    shape, values = _tensor(inputs[0], model)
    for index, wanted in enumerate(_list(request.get("outputs", []), "outputs")):
        name = wanted.get("name") if isinstance(wanted, dict) else None
        if name != OUTPUT_NAME:
            raise BadRequest(f"outputs[{index}].name: {name!r} is not an output of {model.name} ({OUTPUT_NAME!r})")
    return Batch(request_id, shape, values)


def _tensor(tensor: Any, model: Signature) -> tuple[tuple[int, ...], list[float]]:
    where = "inputs[0]"
    if not isinstance(tensor, dict):
        raise BadRequest(f"{where}: must be an object with name, shape, datatype and data, got {_kind(tensor)}")
    if tensor.get("name") != INPUT_NAME:
        raise BadRequest(f"{where}.name: {tensor.get('name')!r} is not an input of {model.name} ({INPUT_NAME!r})")
    if tensor.get("datatype") != DATATYPE:
        raise BadRequest(f"{where}.datatype: {tensor.get('datatype')!r}; {model.name} takes {DATATYPE}")
    shape = tensor.get("shape")
    if (
        not isinstance(shape, list)
        or not shape
        or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape)
    ):
        raise BadRequest(f"{where}.shape: must be a list of sizes, got {shape!r}")
    wanted = [-1, *model.input_shape]
    if len(shape) != len(wanted) or tuple(shape[1:]) != model.input_shape or shape[0] < 1:
        raise BadRequest(f"{where}.shape: {shape} does not fit {model.name}'s input {wanted} (batch first, at least 1)")
    if "data" not in tensor:
        raise BadRequest(f"{where}.data: missing (the binary tensor extension is not spoken: send JSON data)")
    values = _flatten(tensor["data"], f"{where}.data")
    expected = math.prod(shape)
    if len(values) != expected:
        raise BadRequest(f"{where}.data: {len(values)} values for shape {shape} ({expected} expected)")
    return tuple(shape), values


def _flatten(data: Any, where: str) -> list[float]:
    """Row-major values of flat or nested lists, as the protocol allows both; booleans and strings are refused."""
    out: list[float] = []
    stack = [data]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(reversed(item))
        elif isinstance(item, int | float) and not isinstance(item, bool) and math.isfinite(item):
            out.append(float(item))
        else:
            raise BadRequest(f"{where}: {item!r} is not a finite number")
    return out


def _list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise BadRequest(f"{where}: must be a list, got {_kind(value)}")
    return value


def _kind(value: Any) -> str:
    return "nothing" if value is None else type(value).__name__


def infer_response(model: Signature, request_id: str | None, shape: tuple[int, ...], values: list[float]) -> bytes:
    """The answer to `infer`: the model's logits as it computed them, row-major, float32 values as JSON numbers
    (exact: every float32 is a double, and JSON carries doubles exactly)."""
    answer: dict[str, Any] = {"model_name": model.name, "model_version": model.version}
    if request_id is not None:
        answer["id"] = request_id
    answer["outputs"] = [{"name": OUTPUT_NAME, "datatype": DATATYPE, "shape": list(shape), "data": values}]
    return json.dumps(answer).encode()


def error(message: str) -> bytes:
    """Every refusal's body, as the protocol gives it."""
    return json.dumps({"error": message}).encode()
