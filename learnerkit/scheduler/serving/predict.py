"""`model predict`: an input file as an Open Inference Protocol v2 `infer` request to the served model.

The file is a v2 request body (an object with `inputs`) sent as it is, or a plain JSON tensor (nested lists of
numbers: one example, or a batch of them) sent as the model's one input, its shape read from the nesting and
the input's name and datatype from the model's metadata (`GET /v2/models/{name}`).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from learnerkit.scheduler.catalog.errors import CatalogError

TIMEOUT = 60.0


class PredictError(CatalogError):
    """An input file that is no request, or a request the server refused (its error is named)."""


def request_body(path: Path, model_metadata: dict[str, Any]) -> dict[str, Any]:
    """The `infer` body for the input file ``path``."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise PredictError(f"{path}: not a JSON file ({e})") from e
    if isinstance(data, dict):
        if "inputs" not in data:
            raise PredictError(f"{path}: an object must be a v2 infer request with `inputs`")
        return data
    if not isinstance(data, list):
        raise PredictError(f"{path}: expected a v2 infer request or a JSON tensor (nested lists of numbers)")
    shape = _shape(data, str(path))
    declared = model_metadata["inputs"][0]
    example = list(declared["shape"][1:])
    if shape == example:
        shape = [1, *shape]
        data = [data]
    return {"inputs": [{"name": declared["name"], "shape": shape, "datatype": declared["datatype"], "data": data}]}


def _shape(data: Any, where: str) -> list[int]:
    """The shape of a rectangular nest of lists; PredictError naming the first ragged place."""
    if not isinstance(data, list):
        return []
    if not data:
        raise PredictError(f"{where}: an empty list is no tensor")
    inner = [_shape(item, f"{where}[{index}]") for index, item in enumerate(data)]
    for index, item in enumerate(inner):
        if item != inner[0]:
            raise PredictError(f"{where}[{index}]: shape {item}, but [0] has {inner[0]} (not a rectangular tensor)")
    return [len(data), *inner[0]]


def call(url: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    """GET (no body) or POST JSON to the server; PredictError naming the server's `error` on a refusal."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT) as answer:  # noqa: S310 (http to 127.0.0.1)
            return dict(json.loads(answer.read()))
    except urllib.error.HTTPError as e:
        try:
            message = json.loads(e.read()).get("error", e.reason)
        except ValueError:
            message = e.reason
        raise PredictError(f"the model server answered {e.code}: {message}") from e
    except (urllib.error.URLError, OSError) as e:
        raise PredictError(f"no answer from the model server at {url}: {e}") from e


def predict(base_url: str, name: str, path: Path) -> dict[str, Any]:
    """The server's `infer` answer to the input file."""
    body = request_body(path, call(f"{base_url}/v2/models/{name}"))
    return call(f"{base_url}/v2/models/{name}/infer", body)
