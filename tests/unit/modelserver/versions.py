"""Catalog versions as the model server reads them, made on the host: a tiny model saved as a job saves it
(TorchScript by learner.save_model, ONNX by torch.onnx.export), in a `model pull`'s layout, signed by the
platform's own signer; and the server itself started as a process of this Python, on a port it picks."""

from __future__ import annotations

import hashlib
import io
import json
import re
import subprocess
import sys
import threading
import warnings
from pathlib import Path
from typing import Any

import torch

import learner
from controller_sidecar.provenancerecord import Digested
from learnerkit.common.signing import create_signer, public_key_path
from learnerkit.scheduler.provenance.modelsig import SIGNATURE_FILE, model_signature
from tests.waiting import wait_until

SERVER = Path(__file__).resolve().parents[3] / "frameworks" / "modelserver" / "server"

MODEL_FOLDER = "attempt-1/learner-1/results/model"


class Scored(torch.nn.Module):
    """Two inputs, two outputs, two datatypes: logits of ``x`` shifted by a whole number per example, and the
    class each example scores highest (INT64)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))

    def forward(self, x: torch.Tensor, shift: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.net(x) + shift.to(torch.float32).unsqueeze(1)
        return logits, logits.argmax(dim=1)


def classifier() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3)).eval()


def onnx_bytes(
    model: torch.nn.Module, example: tuple[torch.Tensor, ...], inputs: list[str], outputs: list[str]
) -> bytes:
    """The model as a job exports it: torch's TorchScript-based exporter (`dynamo=False`: it needs the `onnx`
    package only, where the default one needs onnxscript too), every tensor's first dimension a named `batch`."""
    out = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torch says the default exporter is the dynamo one
        torch.onnx.export(
            model.eval(),
            example,
            out,
            input_names=inputs,
            output_names=outputs,
            dynamic_axes={name: {0: "batch"} for name in [*inputs, *outputs]},
            dynamo=False,
        )
    return out.getvalue()


def torchscript_files(tmp: Path) -> dict[str, bytes]:
    """`model.pt` and `model.json` of the classifier, written by learner.save_model."""
    learner.save_model(classifier(), [4], 3, folder=tmp / "saved")
    return {f"{MODEL_FOLDER}/{name}": (tmp / "saved" / name).read_bytes() for name in ("model.pt", "model.json")}


def signed_version(tmp: Path, files: dict[str, bytes]) -> tuple[Path, Path]:
    """A version folder holding ``files`` (paths in the job) and their model signature; and the public key."""
    folder = tmp / "version"
    for name, data in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
    key = tmp / "platform.key"
    signer = create_signer(key)
    digested = [Digested(n, hashlib.sha256(d).hexdigest(), len(d)) for n, d in files.items()]
    (folder / SIGNATURE_FILE).parent.mkdir()
    (folder / SIGNATURE_FILE).write_text(json.dumps(model_signature("m", digested, signer)), encoding="utf-8")
    return folder, public_key_path(key)


class Server:
    """serve.py as a process of this Python on 127.0.0.1, its port read from its log line."""

    def __init__(self, folder: Path, key: Path, *extra: str) -> None:
        argv = [sys.executable, str(SERVER / "serve.py"), "--model-dir", str(folder), "--public-key", str(key)]
        argv += ["--name", "m", "--version", "sha256:" + "a" * 64, "--host", "127.0.0.1", "--port", "0", *extra]
        self.process = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True)
        self.log: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        wait_until(lambda: self.port or self.process.poll() is not None, timeout=120, message="the server's port")
        assert self.port, self.log

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.log.append(line)

    @property
    def port(self) -> int:
        found = [re.search(r" on port (\d+)$", line.strip()) for line in self.log]
        return next((int(m[1]) for m in found if m), 0)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=60)


def infer_body(*tensors: tuple[str, str, list[int], list[Any]]) -> dict[str, Any]:
    return {"inputs": [{"name": n, "datatype": d, "shape": s, "data": v} for n, d, s, v in tensors]}
