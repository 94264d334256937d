"""The model server: one catalog version, its signature verified, served over the Open Inference Protocol v2.

    python /opt/learner/server/serve.py --model-dir /model --public-key /keys/platform.pub --name digits \
        --version sha256:... [--port 8080]

The folder is a `learnerkit model pull` of the version (mounted read-only). Nothing in it is read as a model
before its OpenSSF model signature verifies with the platform's public key(s): a folder that fails is refused,
the reason on stderr, exit 2, and the server never listens. The model is an ONNX graph the job saved
(`results/model/model.onnx`), run by onnxruntime, or else the TorchScript `learner.save_model` wrote
(`results/model/model.pt` and `model.json`), loaded by `torch.jit.load`: no pickled Python object either way.
The standard library's threading HTTP server answers; HTTP/1.1 keeps a client's connection open. On SIGTERM it
stops accepting, closes the idle kept-alive connections, answers the requests it has read with
`Connection: close`, and exits once they are answered, or after `--drain-seconds` (20) whatever is left.
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import sys
import threading
import time
from collections.abc import Iterable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from connections import Connections
from modelsignature import SignatureError, verify_folder
from v2protocol import BadRequest, Model, ModelFailed, error, infer_response, metadata, parse_infer

MODEL_FOLDER = "results/model/"
"""Where a job's learner saves its model (``$RESULT_DIR/model/``): TorchScript (`model.pt` with `model.json`,
`learner.save_model`), ONNX (`model.onnx`), or both."""
ONNX_FILE = "model.onnx"
TORCHSCRIPT_FILE = "model.pt"
DESCRIPTION_FILE = "model.json"
MAX_BODY = 64 << 20
DRAIN_SECONDS = 20.0
"""On SIGTERM (`docker stop`, a roll-over): how long the requests being answered may take to finish (below the
30 s `docker stop` grants, learnerkit/scheduler/backends/modelservers.py STOP_TIMEOUT)."""
MODEL_ROUTE = re.compile(r"^/v2/models/(?P<name>[^/]+)(?:/versions/(?P<version>[^/]+))?(?P<verb>/ready|/infer)?$")


class LoadRefused(Exception):
    """The version cannot be loaded: its signature does not verify, or it holds no model this server runs."""


def load(folder: Path, keys: list[Path], name: str, version: str) -> Model:
    """The version's model, once its signature verifies: ONNX by onnxruntime where the chosen learner saved
    `model.onnx`, else its TorchScript; each runtime is imported only when its model is served."""
    try:
        signed = verify_folder(folder, keys)
    except SignatureError as e:
        raise LoadRefused(f"{name}@{version}: the model signature does not verify: {e}") from e
    path = pick_model(signed, name)
    try:
        if path.endswith(ONNX_FILE):
            import onnxmodel

            return onnxmodel.OnnxModel(folder / path, name, version)
        import torchscript

        return torchscript.TorchScriptModel(folder / path, name, version)
    except (ImportError, ValueError) as e:
        raise LoadRefused(f"{path}: {e}") from e


def pick_model(signed: Iterable[str], name: str) -> str:
    """The signed model file to serve: in the model folder of the first learner of the last attempt that saved
    one (every learner of a data-parallel job saves the same model), `model.onnx` where it is there, else
    `model.pt` with its `model.json`."""

    def order(path: str) -> tuple[int, int, int]:
        numbers = [int(n) for n in re.findall(r"(?:attempt|learner)-(\d+)", path)] + [0, 0]
        return (-numbers[0], numbers[1], 0 if path.endswith(ONNX_FILE) else 1)

    files = set(signed)
    found = sorted(
        (
            p
            for p in files
            if p.endswith(MODEL_FOLDER + ONNX_FILE)
            or (
                p.endswith(MODEL_FOLDER + TORCHSCRIPT_FILE)
                and p.removesuffix(TORCHSCRIPT_FILE) + DESCRIPTION_FILE in files
            )
        ),
        key=order,
    )
    if not found:
        raise LoadRefused(
            f"{name}: no signed {MODEL_FOLDER}{ONNX_FILE}, nor {MODEL_FOLDER}{TORCHSCRIPT_FILE} with its "
            f"{DESCRIPTION_FILE} (saved by learner.save_model)"
        )
    return found[0]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    """Headers and body go out in two writes: with Nagle's algorithm the body waits for the client's delayed ACK
    of the headers, 40 ms an answer (measured: 44 ms p50 for one client before, bench/model_serving.py)."""
    served: Model
    connections = Connections()
    """The process's connections (one server a process); `ModelHTTPServer` registers each as it accepts it."""

    def handle_one_request(self) -> None:
        self.connections.waiting(self.connection)
        super().handle_one_request()

    def parse_request(self) -> bool:
        """Called once a request line is read: from here the request is answered, even by a stopping server."""
        self.connections.taken(self.connection)
        return super().parse_request()

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
                self._json(HTTPStatus.OK, metadata(signature))
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
            self._infer(body)

    def _infer(self, body: bytes) -> None:
        try:
            request = parse_infer(body, self.served.signature)
            outputs = self.served.run(request)
        except BadRequest as e:
            self._send(HTTPStatus.BAD_REQUEST, error(str(e)))
            return
        except ModelFailed as e:
            self._send(HTTPStatus.INTERNAL_SERVER_ERROR, error(str(e)))
            return
        self._send(HTTPStatus.OK, infer_response(self.served.signature, request.id, outputs))

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
        if self.connections.stopping:
            self.close_connection = True
            self.send_header("Connection", "close")
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        """A line per answered request on stderr would cost more than an `infer`: refusals only."""
        if str(code).startswith(("4", "5")):
            super().log_request(code, size)


class ModelHTTPServer(ThreadingHTTPServer):
    """A thread a connection, each connection counted from its accept (in the accepting thread): once `shutdown`
    has returned, every connection a stop must wait for is known."""

    daemon_threads = True

    def process_request(self, request: Any, client_address: Any) -> None:
        Handler.connections.opened(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        Handler.connections.closed(request)
        super().shutdown_request(request)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--model-dir", type=Path, required=True)
    parser.add_argument("--public-key", type=Path, action="append", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--version", required=True)
    parser.add_argument("--host", default="0.0.0.0")  # noqa: S104 (inside its container; published on 127.0.0.1)
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--drain-seconds", type=float, default=DRAIN_SECONDS)
    args = parser.parse_args(argv)
    try:
        served = load(args.model_dir, args.public_key, args.name, args.version)
    except LoadRefused as e:
        print(f"modelserver: refused to load: {e}", file=sys.stderr)
        return 2
    Handler.served = served
    server = ModelHTTPServer((args.host, args.port), Handler)
    serving = f"{args.name}@{args.version} ({served.signature.platform})"
    print(f"modelserver: serving {serving} on port {server.server_address[1]}", file=sys.stderr, flush=True)
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    threading.Thread(target=server.serve_forever, daemon=True).start()
    stopping.wait()
    started = time.monotonic()
    idle = Handler.connections.stop()  # before the listener closes: every answer from now on closes its connection
    server.shutdown()
    server.server_close()
    drained = Handler.connections.drain(args.drain_seconds)
    print(
        f"modelserver: stopped; {idle} idle connection(s) closed; {'drained' if drained else 'NOT drained'} in "
        f"{time.monotonic() - started:.2f} s",
        file=sys.stderr,
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
