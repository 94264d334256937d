"""The model server: one catalog version, its signature verified, served over the Open Inference Protocol v2.

    python /opt/learner/server/serve.py --model-dir /model --public-key /keys/platform.pub --name digits \
        --version sha256:... [--port 8080]

The folder is a `learnerkit model pull` of the version (mounted read-only). Nothing in it is read as a model
before its OpenSSF model signature verifies with the platform's public key(s): a folder that fails is refused,
the reason on stderr, exit 2, and the server never listens. The model is the TorchScript `learner.save_model`
wrote (`results/model/model.pt` and `model.json`), loaded by `torch.jit.load` (no pickled Python objects).
The standard library's threading HTTP server answers; HTTP/1.1 keeps a client's connection open.
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import sys
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import torch
from modelsignature import SignatureError, verify_folder
from v2protocol import BadRequest, Signature, error, infer_response, metadata, parse_infer

MODEL_FILE = "results/model/model.pt"
DESCRIPTION_FILE = "results/model/model.json"
PLATFORM = "pytorch_torchscript"
MAX_BODY = 64 << 20
DRAIN_SECONDS = 20.0
"""On SIGTERM (`docker stop`, a roll-over): how long the requests being answered may take to finish."""
MODEL_ROUTE = re.compile(r"^/v2/models/(?P<name>[^/]+)(?:/versions/(?P<version>[^/]+))?(?P<verb>/ready|/infer)?$")


class LoadRefused(Exception):
    """The version cannot be loaded: its signature does not verify, or it holds no TorchScript model."""


class Served:
    """The one loaded model: its signature (name, version, tensors) and the TorchScript program."""

    def __init__(self, folder: Path, keys: list[Path], name: str, version: str) -> None:
        try:
            signed = verify_folder(folder, keys)
        except SignatureError as e:
            raise LoadRefused(f"{name}@{version}: the model signature does not verify: {e}") from e
        model_file = _pick_model(signed, name)
        description = json.loads((folder / model_file).with_name("model.json").read_text(encoding="utf-8"))
        if description.get("format") != "torchscript":
            raise LoadRefused(f"{model_file}: format {description.get('format')!r}, this server loads torchscript")
        self.signature = Signature(
            name, version, tuple(int(n) for n in description["input_shape"]), int(description["classes"])
        )
        self.program = torch.jit.load(str(folder / model_file), map_location="cpu")
        self.program.eval()

    def run(self, shape: tuple[int, ...], values: list[float]) -> tuple[tuple[int, ...], list[float]]:
        with torch.inference_mode():
            out = self.program(torch.tensor(values, dtype=torch.float32).reshape(shape))
        return tuple(out.shape), out.reshape(-1).tolist()


def _pick_model(signed: dict[str, str], name: str) -> str:
    """The signed TorchScript file with its signed description beside it: the first learner's of the last attempt
    (every learner of a data-parallel job saves the same model)."""

    def order(path: str) -> tuple[int, int]:
        numbers = [int(n) for n in re.findall(r"(?:attempt|learner)-(\d+)", path)] + [0, 0]
        return (-numbers[0], numbers[1])

    found = sorted(
        (p for p in signed if p.endswith(MODEL_FILE) and p.replace("model.pt", "model.json") in signed), key=order
    )
    if not found:
        raise LoadRefused(f"{name}: no signed {MODEL_FILE} with its model.json (saved by learner.save_model)")
    return found[0]


class InFlight:
    """How many `infer` requests are being answered: a stopping server waits for them, not for idle connections."""

    def __init__(self) -> None:
        self.count = 0
        self.changed = threading.Condition()

    def __enter__(self) -> None:
        with self.changed:
            self.count += 1

    def __exit__(self, *_: object) -> None:
        with self.changed:
            self.count -= 1
            self.changed.notify_all()

    def drain(self, seconds: float) -> None:
        with self.changed:
            self.changed.wait_for(lambda: self.count == 0, timeout=seconds)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    """Headers and body go out in two writes: with Nagle's algorithm the body waits for the client's delayed ACK
    of the headers, 40 ms an answer (measured: 44 ms p50 for one client before, bench/model_serving.py)."""
    served: Served
    in_flight = InFlight()

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path in ("/v2/health/live", "/v2/health/ready"):
            self._json(HTTPStatus.OK, {path.rsplit("/", 1)[1]: True})
        elif path == "/v2":
            self._json(HTTPStatus.OK, {"name": "learnerkit-modelserver", "version": "2", "extensions": []})
        elif (route := self._model_route(path)) is not None:
            signature = self.served.signature
            if route == "/ready":
                self._json(HTTPStatus.OK, {"name": signature.name, "ready": True})
            elif route == "":
                self._json(HTTPStatus.OK, metadata(signature, PLATFORM))
            else:
                self._send(HTTPStatus.METHOD_NOT_ALLOWED, error("infer is a POST"))

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if 0 < length <= MAX_BODY else b""
        route = self._model_route(self.path.split("?", 1)[0])
        if route is None:
            return
        if route != "/infer":
            self._send(HTTPStatus.METHOD_NOT_ALLOWED, error(f"{self.path}: GET only"))
        elif length > MAX_BODY:
            self.close_connection = True
            self._send(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, error(f"the body is over {MAX_BODY} bytes"))
        elif self.headers.get("Inference-Header-Content-Length") is not None:
            self._send(HTTPStatus.BAD_REQUEST, error("the binary tensor extension is not spoken: send JSON data"))
        else:
            with self.in_flight:
                self._infer(body)

    def _infer(self, body: bytes) -> None:
        try:
            batch = parse_infer(body, self.served.signature)
        except BadRequest as e:
            self._send(HTTPStatus.BAD_REQUEST, error(str(e)))
            return
        shape, values = self.served.run(batch.shape, batch.values)
        self._send(HTTPStatus.OK, infer_response(self.served.signature, batch.id, shape, values))

    def _model_route(self, path: str) -> str | None:
        """The verb after `/v2/models/{name}[/versions/{v}]` (`""`, `/ready`, `/infer`), or None once a 404 is sent."""
        match = MODEL_ROUTE.match(path)
        signature = self.served.signature
        if match is None:
            self._send(HTTPStatus.NOT_FOUND, error(f"{path}: not a route of the v2 protocol"))
            return None
        if match["name"] != signature.name:
            self._send(HTTPStatus.NOT_FOUND, error(f"model {match['name']!r}: not served here ({signature.name!r} is)"))
            return None
        if match["version"] not in (None, signature.version):
            self._send(HTTPStatus.NOT_FOUND, error(f"version {match['version']!r}: not served ({signature.version})"))
            return None
        return match["verb"] or ""

    def _json(self, status: HTTPStatus, body: dict[str, Any]) -> None:
        self._send(status, json.dumps(body).encode())

    def _send(self, status: HTTPStatus, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        """A line per answered request on stderr would cost more than an `infer`: refusals only."""
        if str(code).startswith(("4", "5")):
            super().log_request(code, size)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--model-dir", type=Path, required=True)
    parser.add_argument("--public-key", type=Path, action="append", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--version", required=True)
    parser.add_argument("--host", default="0.0.0.0")  # noqa: S104 (inside its container; published on 127.0.0.1)
    parser.add_argument("--port", type=int, default=8080)
    args = parser.parse_args(argv)
    try:
        served = Served(args.model_dir, args.public_key, args.name, args.version)
    except LoadRefused as e:
        print(f"modelserver: refused to load: {e}", file=sys.stderr)
        return 2
    Handler.served = served
    server = ThreadingHTTPServer((args.host, args.port), Handler)
    server.daemon_threads = True
    print(f"modelserver: serving {args.name}@{args.version} on port {args.port}", file=sys.stderr, flush=True)
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    threading.Thread(target=server.serve_forever, daemon=True).start()
    stopping.wait()
    server.shutdown()
    started = time.monotonic()
    Handler.in_flight.drain(DRAIN_SECONDS)
    print(f"modelserver: stopped; drained in {time.monotonic() - started:.2f} s", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
