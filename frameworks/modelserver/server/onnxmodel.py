"""An ONNX model (`model.onnx`, as a job exports it with `torch.onnx.export`), run by onnxruntime on the CPU.

The signature is the graph's own: each input and output by name, its element type as a v2 datatype, its shape
with -1 for a dimension of any size (a symbolic one, such as the `batch` of `dynamic_axes`, whose name
onnxruntime gives). A graph with a tensor this server cannot carry as JSON (strings, bfloat16, sequences, maps)
is refused at load, naming it. Nothing of the job's Python runs: onnxruntime reads the graph and its weights.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime
from onnxruntime.capi.onnxruntime_pybind11_state import InvalidArgument
from v2protocol import ANY, BadRequest, ModelFailed, Request, Signature, Tensor, TensorSpec

PLATFORM = "onnxruntime_onnx"
DATATYPES = {
    "tensor(float16)": "FP16",
    "tensor(float)": "FP32",
    "tensor(double)": "FP64",
    "tensor(int8)": "INT8",
    "tensor(int16)": "INT16",
    "tensor(int32)": "INT32",
    "tensor(int64)": "INT64",
    "tensor(uint8)": "UINT8",
    "tensor(uint16)": "UINT16",
    "tensor(uint32)": "UINT32",
    "tensor(uint64)": "UINT64",
    "tensor(bool)": "BOOL",
}
"""ONNX element types (as onnxruntime names them) to the v2 protocol's datatypes."""
NUMPY = {
    "FP16": np.float16,
    "FP32": np.float32,
    "FP64": np.float64,
    "INT8": np.int8,
    "INT16": np.int16,
    "INT32": np.int32,
    "INT64": np.int64,
    "UINT8": np.uint8,
    "UINT16": np.uint16,
    "UINT32": np.uint32,
    "UINT64": np.uint64,
    "BOOL": np.bool_,
}


class FormatError(ValueError):
    """The file is not an ONNX model onnxruntime loads, or has a tensor the server cannot carry."""


class OnnxModel:
    """An onnxruntime session of the graph and its signature; `run` feeds the request's inputs by name."""

    def __init__(self, model_file: Path, name: str, version: str) -> None:
        options = onnxruntime.SessionOptions()
        options.log_severity_level = 3  # errors only: onnxruntime's warnings would come once a request
        try:
            self.session = onnxruntime.InferenceSession(
                str(model_file), sess_options=options, providers=["CPUExecutionProvider"]
            )
        except Exception as e:  # onnxruntime's errors share no base but Exception
            raise FormatError(f"onnxruntime cannot load it: {e}") from e
        self.signature = Signature(
            name,
            version,
            PLATFORM,
            tuple(_spec(arg, "input") for arg in self.session.get_inputs()),
            tuple(_spec(arg, "output") for arg in self.session.get_outputs()),
        )

    def run(self, request: Request) -> list[Tensor]:
        feeds = {t.name: np.array(t.values, dtype=NUMPY[t.datatype]).reshape(t.shape) for t in request.inputs}
        try:
            computed = self.session.run(list(request.outputs), feeds)
        except (InvalidArgument, ValueError) as e:  # what the signature does not say (a size the graph fixes later)
            raise BadRequest(f"inputs: {self.signature.name} refused them: {e}") from e
        except Exception as e:  # a node that failed (Fail, RuntimeException, ...)
            raise ModelFailed(f"{self.signature.name}: onnxruntime failed: {e}") from e
        datatypes = {t.name: t.datatype for t in self.signature.outputs}
        return [
            Tensor(name, datatypes[name], tuple(array.shape), np.asarray(array).reshape(-1).tolist())
            for name, array in zip(request.outputs, computed, strict=True)
        ]


def _spec(arg: Any, kind: str) -> TensorSpec:
    datatype = DATATYPES.get(arg.type)
    if datatype is None:
        raise FormatError(
            f"{kind} {arg.name!r} is {arg.type}; this server serves tensors of "
            f"{', '.join(sorted(set(DATATYPES.values())))}"
        )
    dims = [d if isinstance(d, int) and d >= 0 else None for d in arg.shape]
    return TensorSpec(
        arg.name,
        datatype,
        tuple(ANY if d is None else d for d in dims),
        tuple(s if isinstance(s, str) and d is None else None for s, d in zip(arg.shape, dims, strict=True)),
    )
