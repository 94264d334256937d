"""The Open Inference Protocol v2 (KServe, Triton) as JSON: an `infer` body checked against the model's inputs,
and the answers' bodies. Standard library only, so it is tested without torch or onnxruntime.

A model is its `Signature`: named input and output tensors, each with a v2 datatype and a shape where -1 is a
dimension of any size (the batch, or an ONNX graph's symbolic dimension). Only the JSON tensor form is spoken: a
body of the binary tensor extension (`Inference-Header-Content-Length`) is refused by name. Every refusal names
the field that is wrong, as a 400 whose body is `{"error": ...}`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

FLOATS = frozenset({"FP16", "FP32", "FP64"})
INTEGERS = {
    "INT8": (-(2**7), 2**7 - 1),
    "INT16": (-(2**15), 2**15 - 1),
    "INT32": (-(2**31), 2**31 - 1),
    "INT64": (-(2**63), 2**63 - 1),
    "UINT8": (0, 2**8 - 1),
    "UINT16": (0, 2**16 - 1),
    "UINT32": (0, 2**32 - 1),
    "UINT64": (0, 2**64 - 1),
}
"""Each integer datatype's least and greatest value."""
DATATYPES = frozenset({*FLOATS, *INTEGERS, "BOOL"})
"""The tensor datatypes spoken (BYTES, strings, is not: no model this server loads takes them)."""
ANY = -1


class BadRequest(ValueError):
    """An `infer` body the model cannot take; the message names the field (`inputs[0].shape`)."""


class ModelFailed(RuntimeError):
    """The model failed on inputs that fit its signature: a 500 with the model's own words."""


@dataclass(frozen=True)
class TensorSpec:
    """One input or output of a model: its name, v2 datatype and shape (-1: any size of at least 1)."""

    name: str
    datatype: str
    shape: tuple[int, ...]
    symbols: tuple[str | None, ...] = ()
    """The name of each dimension of any size where the model names it (an ONNX graph's `batch`): dimensions of
    one name must be of one size across the inputs. Empty: none named."""


@dataclass(frozen=True)
class Signature:
    """One served model: its catalog name and version, the platform that runs it, its tensors."""

    name: str
    version: str
    platform: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]


@dataclass(frozen=True)
class Tensor:
    """A tensor of a request or an answer: values row-major as JSON numbers or booleans, the shape in full."""

    name: str
    datatype: str
    shape: tuple[int, ...]
    values: list[Any]


@dataclass(frozen=True)
class Request:
    """An `infer` request made ready for the model: its inputs in the signature's order, the outputs asked for
    (every output where the body names none)."""

    id: str | None
    inputs: tuple[Tensor, ...]
    outputs: tuple[str, ...]


class Model(Protocol):
    """A loaded model as the server calls it."""

    @property
    def signature(self) -> Signature: ...

    def run(self, request: Request) -> list[Tensor]:
        """The outputs asked for, as the model computed them; `BadRequest` where the model refused the inputs,
        `ModelFailed` where it failed on them."""
        ...


def metadata(model: Signature) -> dict[str, Any]:
    """`GET /v2/models/{name}`: each tensor's name, datatype and shape (-1: a dimension of any size)."""
    return {
        "name": model.name,
        "versions": [model.version],
        "platform": model.platform,
        "inputs": [_described(t) for t in model.inputs],
        "outputs": [_described(t) for t in model.outputs],
    }


def _described(tensor: TensorSpec) -> dict[str, Any]:
    return {"name": tensor.name, "datatype": tensor.datatype, "shape": list(tensor.shape)}


def parse_infer(body: bytes, model: Signature) -> Request:
    """The body of `POST /v2/models/{name}/infer`, checked against the model's inputs; `BadRequest` names what
    does not fit (the JSON, `id`, `inputs`, `inputs[i].name`, `.datatype`, `.shape`, `.data`, `outputs[i].name`)."""
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
    if not isinstance(inputs, list) or len(inputs) != len(model.inputs):
        got = f"{len(inputs)} inputs" if isinstance(inputs, list) else _kind(inputs)
        count = "exactly one input" if len(model.inputs) == 1 else f"{len(model.inputs)} inputs"
        raise BadRequest(f"inputs: {model.name} takes {count} ({_names(model.inputs)}), got {got}")
    given: dict[str, Tensor] = {}
    sizes: dict[str, tuple[int, str]] = {}
    for index, tensor in enumerate(inputs):
        parsed = _tensor(tensor, f"inputs[{index}]", model, given, sizes)
        given[parsed.name] = parsed
    wanted = []
    for index, asked in enumerate(_list(request.get("outputs", []), "outputs")):
        name = asked.get("name") if isinstance(asked, dict) else None
        if name not in {t.name for t in model.outputs}:
            known = _names(model.outputs)
            raise BadRequest(f"outputs[{index}].name: {name!r} is not an output of {model.name} ({known})")
        wanted.append(str(name))
    outputs = tuple(wanted) if wanted else tuple(t.name for t in model.outputs)
    return Request(request_id, tuple(given[t.name] for t in model.inputs), outputs)


def _tensor(
    tensor: Any, where: str, model: Signature, given: dict[str, Tensor], sizes: dict[str, tuple[int, str]]
) -> Tensor:
    """One of the body's inputs against the model's input of its name; ``sizes``: each named dimension's size so
    far, and where it was set."""
    if not isinstance(tensor, dict):
        raise BadRequest(f"{where}: must be an object with name, shape, datatype and data, got {_kind(tensor)}")
    name = tensor.get("name")
    spec = next((t for t in model.inputs if t.name == name), None)
    if spec is None:
        raise BadRequest(f"{where}.name: {name!r} is not an input of {model.name} ({_names(model.inputs)})")
    if spec.name in given:
        raise BadRequest(f"{where}.name: {spec.name!r} is given twice")
    one = len(model.inputs) == 1
    datatype = tensor.get("datatype")
    if datatype != spec.datatype:
        as_name = "" if one else f" as {spec.name!r}"
        raise BadRequest(f"{where}.datatype: {datatype!r}; {model.name} takes {spec.datatype}{as_name}")
    shape = _shape(tensor.get("shape"), where, spec, f"{model.name}'s input" + ("" if one else f" {spec.name!r}"))
    for axis, symbol in enumerate(spec.symbols):
        if symbol is None:
            continue
        size, set_by = sizes.setdefault(symbol, (shape[axis], where))
        if size != shape[axis]:
            raise BadRequest(
                f"{where}.shape: {list(shape)}: dimension {axis} ({symbol!r}) is {shape[axis]}, but {set_by} has "
                f"{symbol!r} {size}"
            )
    if "data" not in tensor:
        raise BadRequest(f"{where}.data: missing (the binary tensor extension is not spoken: send JSON data)")
    values = _flatten(tensor["data"], f"{where}.data", spec.datatype)
    expected = math.prod(shape)
    if len(values) != expected:
        raise BadRequest(f"{where}.data: {len(values)} values for shape {list(shape)} ({expected} expected)")
    return Tensor(spec.name, spec.datatype, shape, values)


def _shape(shape: Any, where: str, spec: TensorSpec, label: str) -> tuple[int, ...]:
    if (
        not isinstance(shape, list)
        or not shape
        or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape)
    ):
        raise BadRequest(f"{where}.shape: must be a list of sizes, got {shape!r}")
    fits = len(shape) == len(spec.shape) and all(
        n >= 1 if wanted == ANY else n == wanted for n, wanted in zip(shape, spec.shape, strict=True)
    )
    if not fits:
        raise BadRequest(f"{where}.shape: {shape} does not fit {label} {list(spec.shape)} (-1: any size of at least 1)")
    return tuple(shape)


def _flatten(data: Any, where: str, datatype: str) -> list[Any]:
    """Row-major values of flat or nested lists, as the protocol allows both, each of the datatype: finite
    numbers for FP*, whole numbers in range for (U)INT*, true or false for BOOL."""
    out: list[Any] = []
    stack = [data]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(reversed(item))
        else:
            out.append(_value(item, where, datatype))
    return out


def _value(item: Any, where: str, datatype: str) -> Any:
    if datatype == "BOOL":
        if not isinstance(item, bool):
            raise BadRequest(f"{where}: {item!r} is not a boolean (BOOL takes true or false)")
        return item
    if isinstance(item, bool) or not isinstance(item, int | float):
        raise BadRequest(f"{where}: {item!r} is not a finite number")
    if datatype in FLOATS:
        if not math.isfinite(item):
            raise BadRequest(f"{where}: {item!r} is not a finite number")
        return float(item)
    least, greatest = INTEGERS[datatype]
    if not isinstance(item, int):
        raise BadRequest(f"{where}: {item!r} is not a whole number ({datatype})")
    if not least <= item <= greatest:
        raise BadRequest(f"{where}: {item} is out of {datatype}'s range [{least}, {greatest}]")
    return item


def _list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise BadRequest(f"{where}: must be a list, got {_kind(value)}")
    return value


def _names(tensors: Sequence[TensorSpec]) -> str:
    return ", ".join(repr(t.name) for t in tensors)


def _kind(value: Any) -> str:
    return "nothing" if value is None else type(value).__name__


def infer_response(model: Signature, request_id: str | None, outputs: Sequence[Tensor]) -> bytes:
    """The answer to `infer`: the outputs as the model computed them, row-major, floating-point values as JSON
    numbers (exact: every float32 and float16 is a double, and JSON carries doubles exactly)."""
    answer: dict[str, Any] = {"model_name": model.name, "model_version": model.version}
    if request_id is not None:
        answer["id"] = request_id
    answer["outputs"] = [
        {"name": t.name, "datatype": t.datatype, "shape": list(t.shape), "data": t.values} for t in outputs
    ]
    return json.dumps(answer).encode()


def error(message: str) -> bytes:
    """Every refusal's body, as the protocol gives it."""
    return json.dumps({"error": message}).encode()
