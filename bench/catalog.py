"""What the model catalog costs: registering a version beside copying its bytes, and verifying it beside
`sha256sum`, against a Debian docker-registry of the benchmark's own (loopback), in one run.

A job of one result file of ``--mib`` MiB (default 1024), signed by the platform's real provenance and evaluation
writers (two evaluation rounds). Each run, on a fresh registry:

- **copy**: the weights file copied on the same disk (`shutil.copyfile`), and **push**: the same bytes pushed to
  the registry as one blob, the baselines of a register;
- **register**: `model register` of the job folder (it verifies the folder first: every file hashed, every
  signature checked; then the blobs, config, manifest, referrers and tags pushed);
- **sha256sum**: `sha256sum` of the same bytes, the registry's own file of the weights blob, right after the
  verify read it (as warm in the page cache), the baseline of a verify, and **hashlib**: the same file hashed
  in-process by Python's `hashlib` (OpenSSL's SHA-256, which the catalog hashes with; coreutils' own is slower
  on CPUs with SHA extensions);
- **verify**: `model verify NAME@ALIAS` after an alias move: every blob fetched and hashed as it streams, written,
  hashed again by `job verify`'s checks, every signature, the card and lineage rendered again, the alias log's
  chain. Target: at most 10 s for 1 GiB.

Prints the medians of ``--runs`` runs and the ratios; exits 1 when verify is over the target.
Usage: python bench/catalog.py [--mib 1024] [--runs 1]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import requests
from catalogjob import job_folder

from learnerkit.common.signing import load_public_key, load_signer, public_key_path
from learnerkit.dev.ports import free_port
from learnerkit.dev.registry import registry_binary
from learnerkit.scheduler.catalog import oci
from learnerkit.scheduler.catalog.service import move_alias, verify
from learnerkit.scheduler.catalog.versions import Store, register

TARGET_VERIFY_S = 10.0
WEIGHTS = "attempt-1/learner-1/results/model.bin"


def start_registry(folder: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    folder.mkdir(parents=True)
    config = folder / "config.yml"
    config.write_text(
        f"version: 0.1\nlog: {{level: warn}}\nstorage:\n  filesystem: {{rootdirectory: {folder / 'data'}}}\n"
        f"http:\n  addr: 127.0.0.1:{port}\n",
        encoding="utf-8",
    )
    argv = [registry_binary(), "serve", str(config)]
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    host = f"127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if requests.get(f"http://{host}/v2/", timeout=1).status_code == 200:
                return process, host
        except requests.RequestException:
            time.sleep(0.1)
    process.kill()
    raise SystemExit(f"docker-registry on {host} did not answer within 30 s")


def timed(action: object) -> float:
    start = time.perf_counter()
    action()  # type: ignore[operator]
    return time.perf_counter() - start


def one_run(root: Path, folder: Path, key: Path) -> dict[str, float]:
    keys = [load_public_key(public_key_path(key))]
    weights = folder / WEIGHTS
    storage = root / f"registry-{uuid.uuid4().hex[:6]}"
    process, host = start_registry(storage)
    try:
        figures = {"copy": timed(lambda: shutil.copyfile(weights, root / "copy.bin"))}
        (root / "copy.bin").unlink()
        digest = oci.file_digest(weights)
        figures["push"] = timed(lambda: oci.put_blob_file(host, "baseline/blob", weights, digest))
        store = Store(host, "bench")
        versions: list[str] = []
        figures["register"] = timed(lambda: versions.append(register(store, "digits", folder, keys).version))
        move_alias(store, "digits", "production", versions[0], keys, load_signer(key), "bench", "2026-01-01T00:00:00Z")
        results = []
        figures["verify"] = timed(lambda: results.append(verify(store, "digits@production", keys)))
        if not results[0].ok:
            raise SystemExit(f"the version does not verify: {results[0].to_dict()}")
        # The same bytes verify read, as warm in the page cache: the registry's own file of the blob.
        stored = storage / "data/docker/registry/v2/blobs/sha256" / digest[7:9] / digest[7:] / "data"
        argv = ["sha256sum", str(stored)]
        figures["sha256sum"] = timed(lambda: subprocess.run(argv, check=True, capture_output=True))
        figures["hashlib"] = timed(lambda: oci.file_digest(stored))
        return figures
    finally:
        process.kill()
        process.wait(timeout=10)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=1024, help="the weights' size in MiB")
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="learnerkit-bench-catalog-", dir=Path.home()) as scratch:
        root = Path(scratch)
        folder, key = job_folder(root / "job", weights=bytes(args.mib << 20))
        runs = [one_run(root, folder, key) for _ in range(args.runs)]
    median = {name: statistics.median(run[name] for run in runs) for name in runs[0]}
    print(f"model catalog, one version of {args.mib} MiB, medians of {args.runs} run(s):")
    for name, seconds in median.items():
        print(f"  {name:<10} {seconds:8.2f} s")
    print(f"  register / copy      {median['register'] / median['copy']:6.2f}")
    print(f"  register / push      {median['register'] / median['push']:6.2f}")
    print(f"  verify / sha256sum   {median['verify'] / median['sha256sum']:6.2f}")
    print(f"  verify / hashlib     {median['verify'] / median['hashlib']:6.2f}")
    verdict = "met" if median["verify"] <= TARGET_VERIFY_S * args.mib / 1024 else "MISSED"
    print(f"  verify {median['verify']:.2f} s, target {TARGET_VERIFY_S * args.mib / 1024:.1f} s: {verdict}")
    return 0 if verdict == "met" else 1


if __name__ == "__main__":
    sys.exit(main())
