"""Smoke run of the model server image: a tiny model signed, served, asked, and a broken signature refused.

Saves a classifier with learner.save_model in a catalog pull's layout, signs it in the OpenSSF model signing format
with a key made here, starts the image's server on loopback and checks: `infer` equals the model called
in-process, a body of the wrong shape is a 400 naming `inputs[0].shape`, and a folder whose file changed after
signing is refused at load (exit 2, never listening).
"""

import base64
import hashlib
import json
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import torch
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

import learner

SERVER = "/opt/learner/server/serve.py"
MODEL = "attempt-1/learner-1/results/model"


def sign(folder: Path, key: ec.EllipticCurvePrivateKey) -> None:
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    resources = [
        {"name": p.relative_to(folder).as_posix(), "algorithm": "sha256", "digest": hashlib.sha256(p.read_bytes()).hexdigest()}
        for p in files
    ]
    root = hashlib.sha256(b"".join(bytes.fromhex(r["digest"]) for r in resources)).hexdigest()
    statement = {
        "_type": "https://in-toto.io/Statement/v1",
        "subject": [{"name": "smoke", "digest": {"sha256": root}}],
        "predicateType": "https://model_signing/signature/v1.0",
        "predicate": {
            "serialization": {"method": "files", "hash_type": "sha256", "allow_symlinks": False, "ignore_paths": ["provenance"]},
            "resources": resources,
        },
    }
    payload = json.dumps(statement).encode()
    kind = b"application/vnd.in-toto+json"
    signature = key.sign(b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(payload), payload), ec.ECDSA(hashes.SHA256()))
    bundle = {
        "mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json",
        "dsseEnvelope": {
            "payload": base64.b64encode(payload).decode(),
            "payloadType": kind.decode(),
            "signatures": [{"sig": base64.b64encode(signature).decode(), "keyid": ""}],
        },
    }
    (folder / "provenance").mkdir()
    (folder / "provenance" / "model.sig").write_text(json.dumps(bundle), encoding="utf-8")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def call(url: str, body: object = None) -> tuple[int, dict]:
    data = None if body is None else json.dumps(body).encode()
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=data), timeout=10) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def start(folder: Path, key: Path, port: int) -> subprocess.Popen:
    argv = [sys.executable, SERVER, "--model-dir", str(folder), "--public-key", str(key), "--name", "smoke"]
    return subprocess.Popen([*argv, "--version", "sha256:smoke", "--host", "127.0.0.1", "--port", str(port)])


def wait_ready(server: subprocess.Popen, base: str) -> bool:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and server.poll() is None:
        try:
            if call(f"{base}/v2/health/ready")[0] == 200:
                return True
        except OSError:
            time.sleep(0.1)
    return False


def main() -> int:
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    folder = learner.result_dir() / "version"
    learner.save_model(net, [4], 3, folder=folder / MODEL)
    private = ec.generate_private_key(ec.SECP256R1())
    sign(folder, private)
    key = learner.result_dir() / "platform.pub"
    key.write_bytes(private.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))

    problems = []
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    server = start(folder, key, port)
    try:
        if not wait_ready(server, base):
            print(f"smoke: the server never got ready (exit {server.poll()})", file=sys.stderr)
            return 1
        x = torch.randn(5, 4)
        status, answer = call(f"{base}/v2/models/smoke/infer", {"inputs": [{"name": "input", "shape": [5, 4], "datatype": "FP32", "data": x.reshape(-1).tolist()}]})
        expected = torch.jit.load(str(folder / MODEL / "model.pt"))(x).reshape(-1).tolist()
        if status != 200 or answer["outputs"][0]["data"] != expected or answer["outputs"][0]["shape"] != [5, 3]:
            problems.append(f"infer: {status} {answer}, expected {expected}")
        status, answer = call(f"{base}/v2/models/smoke/infer", {"inputs": [{"name": "input", "shape": [1, 5], "datatype": "FP32", "data": [0.0] * 5}]})
        if status != 400 or "inputs[0].shape" not in answer.get("error", ""):
            problems.append(f"a wrong shape: {status} {answer}")
    finally:
        server.terminate()
        server.wait(timeout=30)

    broken = learner.result_dir() / "broken"
    shutil.copytree(folder, broken)
    with (broken / MODEL / "model.json").open("a", encoding="utf-8") as handle:
        handle.write(" ")
    refused = start(broken, key, free_port())
    code = refused.wait(timeout=120)
    if code != 2:
        problems.append(f"a changed file after signing: the server exited {code}, not 2 (refused)")
    for problem in problems:
        print(f"smoke: {problem}", file=sys.stderr)
    if not problems:
        print("smoke: infer equals the model in-process; a wrong shape is a 400; a broken signature is refused")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
