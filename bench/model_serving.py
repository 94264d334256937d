"""What serving a model costs: `infer` of the digits model over the Open Inference Protocol v2, served by the real
model server image on the local Docker engine, beside the same model called in-process, in one run.

The model is the digits example's network (examples/digits-evaluated: 64 -> 64 -> ReLU -> 10; its weights do not
change its cost), saved by learner.save_model and signed by the platform's model signature writer; the server
verifies it and loads it as `model serve` starts it (`run_server`: the same container, the pull left out). Each
request is one example (shape [1, 64], JSON), over a kept-alive connection:

- **1 client**: ``--requests`` requests one after another;
- **8 clients**: 8 threads, each its own connection, ``--requests`` requests each;
- **... , front**: the same through the name's front (its stable address, `backends.modelfront`: one more hop);
- **in-process**: the TorchScript program called on the same one-example tensor, ``--requests`` times, in a
  Python process of the same image (the same torch, threads and CPU limits as the server), no HTTP.

Prints requests per second and the p50 and p99 latency of each, and the ratios of the served to the in-process
figures. Usage: python bench/model_serving.py [--requests 2000]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import requests

from controller_sidecar.provenancerecord import Digested
from learnerkit.common.signing import create_signer, public_key_path
from learnerkit.scheduler.backends.modelservers import (
    SERVER_IMAGE,
    Endpoint,
    read_only_for_all,
    roll_over,
    server_url,
    stop,
)
from learnerkit.scheduler.provenance.modelsig import SIGNATURE_FILE, model_signature

TENANT = "bench"
NAME = "digits"
MODEL = "attempt-1/learner-1/results/model"
IN_PROCESS = """
import json, sys, time, torch
program = torch.jit.load('/model/{model}/model.pt')
x = torch.rand(1, 64)
seconds = []
with torch.inference_mode():
    for _ in range(200):
        program(x)
    started = time.perf_counter()
    for _ in range({n}):
        t = time.perf_counter()
        program(x).tolist()
        seconds.append(time.perf_counter() - t)
    total = time.perf_counter() - started
print(json.dumps({{"total": total, "seconds": seconds}}))
"""
SAVE = """
import torch, learner
from pathlib import Path
net = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
learner.save_model(net, [64], 10, folder=Path('/out/{model}'))
"""


def docker_python(code: str, *mounts: str) -> str:
    volumes = [arg for mount in mounts for arg in ("-v", mount)]
    argv = ["docker", "run", "--rm", "--read-only", "--tmpfs", "/tmp", "--network", "none", *volumes]
    return subprocess.run(
        [*argv, "--entrypoint", "python", SERVER_IMAGE, "-c", code], check=True, capture_output=True, text=True
    ).stdout


def signed_version(root: Path) -> tuple[Path, Path]:
    """(the version's folder, the public keys' folder): the digits network saved and signed by the platform."""
    folder = root / "version"
    folder.mkdir()
    folder.chmod(0o777)  # the image writes as its user, 1000
    docker_python(SAVE.format(model=MODEL), f"{folder}:/out")
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    digested = [
        Digested(p.relative_to(folder).as_posix(), hashlib.sha256(p.read_bytes()).hexdigest(), 0) for p in files
    ]
    key = root / "platform.pem"
    signature = model_signature(NAME, digested, create_signer(key))
    (folder / SIGNATURE_FILE).parent.mkdir()
    (folder / SIGNATURE_FILE).write_text(json.dumps(signature), encoding="utf-8")
    read_only_for_all(folder)
    keys = root / "keys"
    keys.mkdir()
    (keys / "platform.pub").write_bytes(public_key_path(key).read_bytes())
    return folder, keys


def body() -> bytes:
    data = [float(i % 17) for i in range(64)]
    return json.dumps({"inputs": [{"name": "input", "shape": [1, 64], "datatype": "FP32", "data": data}]}).encode()


def client(url: str, n: int, latencies: list[float]) -> None:
    session = requests.Session()
    payload = body()
    for _ in range(n):
        started = time.perf_counter()
        answer = session.post(url, data=payload, headers={"Content-Type": "application/json"}, timeout=60)
        latencies.append(time.perf_counter() - started)
        if answer.status_code != 200:
            raise SystemExit(f"infer answered {answer.status_code}: {answer.text}")


def served(url: str, clients: int, n: int) -> dict[str, float]:
    client(url, 50, [])  # warm the connection and the program
    latencies: list[list[float]] = [[] for _ in range(clients)]
    threads = [threading.Thread(target=client, args=(url, n, latencies[i])) for i in range(clients)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return figures([s for each in latencies for s in each], time.perf_counter() - started)


def figures(seconds: list[float], total: float) -> dict[str, float]:
    cuts = statistics.quantiles(seconds, n=100)
    return {"rps": len(seconds) / total, "p50_ms": cuts[49] * 1000, "p99_ms": cuts[98] * 1000}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--requests", type=int, default=2000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="lk-bench-serving-") as tmp:
        folder, keys = signed_version(Path(tmp))
        baseline = json.loads(docker_python(IN_PROCESS.format(model=MODEL, n=args.requests), f"{folder}:/model:ro"))
        in_process = figures(baseline["seconds"], baseline["total"])
        digest = "sha256:" + "0" * 64
        server = roll_over(
            Endpoint(TENANT, NAME, digest), digest, folder, keys, SERVER_IMAGE, Path(tmp) / "front", None
        )
        try:
            direct = f"{server_url(server)}/v2/models/{NAME}/infer"
            front = f"{server.url}/v2/models/{NAME}/infer"
            rows: dict[str, Any] = {
                "in-process": in_process,
                "1 client": served(direct, 1, args.requests),
                "8 clients": served(direct, 8, args.requests // 8),
                "1 client, front": served(front, 1, args.requests),
                "8 clients, front": served(front, 8, args.requests // 8),
            }
        finally:
            stop(TENANT, NAME)
    print(f"{'':<18}{'req/s':>10}{'p50 ms':>10}{'p99 ms':>10}{'req/s ratio':>13}{'p50 ratio':>11}")
    for label, row in rows.items():
        rps_ratio = row["rps"] / in_process["rps"]
        p50_ratio = row["p50_ms"] / in_process["p50_ms"]
        print(
            f"{label:<18}{row['rps']:>10.1f}{row['p50_ms']:>10.3f}{row['p99_ms']:>10.3f}{rps_ratio:>13.4f}{p50_ratio:>11.1f}"
        )
    for clients in ("1 client", "8 clients"):
        near, far = rows[clients], rows[f"{clients}, front"]
        print(
            f"the front, {clients}: req/s {far['rps'] / near['rps']:.2f}x, p50 {far['p50_ms'] / near['p50_ms']:.2f}x, "
            f"p99 {far['p99_ms'] / near['p99_ms']:.2f}x of the server's own address"
        )
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
