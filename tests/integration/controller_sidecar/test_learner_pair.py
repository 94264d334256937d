"""The whole learner lifecycle through a real pair: PyTorch smoke learner + sidecar container, real etcd,
real SeaweedFS, the real Docker engine. Each test is one job, followed through etcd to its end."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from controller_sidecar.status import ErrorCode, Phase
from learnerkit.common import engine
from learnerkit.pair.docker import PairHandle, exit_code
from learnerkit.pair.etcd import request_halt
from tests.integration.controller_sidecar.conftest import SMOKE, Pairs
from tests.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.services, pytest.mark.timeout(900)]

LIFECYCLE = [Phase.PENDING, Phase.DOWNLOADING, Phase.PROCESSING, Phase.STORING]


def phases(pairs: Pairs, job_id: str) -> list[Phase]:
    return [record.phase for record in pairs.history(job_id)]


def volume_path(handle: PairHandle) -> Path:
    """The pair's /job volume as seen from this host (a local engine)."""
    return Path(engine.engine().volumes.get(handle.volume).attrs["Mountpoint"])


def metrics_lines(handle: PairHandle) -> int:
    """Training steps logged so far, read from the learner's metrics.jsonl in the volume."""
    try:
        return (volume_path(handle) / "logs" / "metrics.jsonl").read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def test_full_run_completes_with_results_logs_metrics_and_checkpoint(pairs: Pairs) -> None:
    spec = pairs.spec((*SMOKE, "--steps", "30", "--checkpoint-every", "10"))
    handle = pairs.start(spec)
    final = pairs.wait_terminal(handle, spec.job_id)
    assert final.phase is Phase.COMPLETED, pairs.describe(handle, spec.job_id)
    assert final.exit_code == 0
    assert phases(pairs, spec.job_id) == [*LIFECYCLE, Phase.COMPLETED]
    stored = pairs.objects(f"{spec.job_id}/learner-1/")
    summary = json.loads(stored[f"{spec.job_id}/learner-1/results/summary.json"])
    assert (summary["start_step"], summary["final_step"]) == (1, 30)
    assert f"{spec.job_id}/learner-1/results/model.pt" in stored
    assert f"{spec.job_id}/learner-1/checkpoints/ckpt-0000000030/.complete" in stored
    assert b"done: steps 1..30" in pairs.shipped_log(spec.job_id)
    metrics_lines = stored[f"{spec.job_id}/learner-1/logs/metrics.jsonl"].splitlines()
    assert len(metrics_lines) == 30
    latest = pairs.metrics(spec.job_id)
    assert {"loss", "accuracy"} <= set(latest)
    assert latest["loss"] == json.loads(metrics_lines[-1])["values"]["loss"]
    assert exit_code(handle.sidecar) == 0 and exit_code(handle.learner) == 0


def test_halt_mid_run_then_resume_continues_from_the_checkpoint(pairs: Pairs) -> None:
    paced = {"SMOKE_MIN_STEP_SECONDS": "0.15"}
    first = pairs.spec((*SMOKE, "--steps", "60", "--checkpoint-every", "10"), learner_env=paced)
    handle = pairs.start(first)
    wait_until(lambda: metrics_lines(handle) >= 12, timeout=240, interval=0.1, message="training to pass step 12")
    request_halt(pairs.etcd_settings, first.job_id)
    halted = pairs.wait_terminal(handle, first.job_id)
    assert halted.phase is Phase.HALTED, pairs.describe(handle, first.job_id)
    assert phases(pairs, first.job_id) == [*LIFECYCLE, Phase.HALTED]
    stored = pairs.objects(f"{first.job_id}/learner-1/checkpoints/")
    markers = sorted(key for key in stored if key.endswith("/.complete"))
    assert markers, "no complete checkpoint was stored on halt"
    halted_step = int(markers[-1].split("ckpt-")[1].split("/")[0])
    assert 12 <= halted_step < 60

    second = pairs.spec(
        (*SMOKE, "--steps", "60", "--checkpoint-every", "10"),
        config={"resume_from": {"bucket": "lk-results", "prefix": f"{first.job_id}/learner-1/checkpoints/"}},
    )
    resumed = pairs.start(second)
    final = pairs.wait_terminal(resumed, second.job_id)
    assert final.phase is Phase.COMPLETED, pairs.describe(resumed, second.job_id)
    processing = [r for r in pairs.history(second.job_id) if r.phase is Phase.PROCESSING]
    assert processing[0].message == f"resumed from step {halted_step}"
    summary = json.loads(pairs.stored(second.job_id, "results/summary.json"))
    assert (summary["start_step"], summary["final_step"]) == (halted_step + 1, 60)


def test_learner_crash_ends_failed_with_its_exit_code(pairs: Pairs) -> None:
    spec = pairs.spec(("python", "-c", "import sys; print('boom', flush=True); sys.exit(3)"))
    handle = pairs.start(spec)
    final = pairs.wait_terminal(handle, spec.job_id)
    assert (final.phase, final.error_code, final.exit_code) == (Phase.FAILED, ErrorCode.LEARNER_FAILED, 3)
    assert b"boom" in pairs.shipped_log(spec.job_id)
    assert exit_code(handle.sidecar) == 1


def test_out_of_memory_kill_ends_failed_as_killed(pairs: Pairs) -> None:
    hog = "b = bytearray(1024 * 1024 * 1024); print('unreachable')"
    spec = pairs.spec(("python", "-c", hog), memory_bytes=128 * 1024 * 1024)
    handle = pairs.start(spec)
    final = pairs.wait_terminal(handle, spec.job_id)
    assert (final.phase, final.error_code, final.exit_code) == (Phase.FAILED, ErrorCode.LEARNER_KILLED, 137)
    assert "out of memory" in final.message


def test_etcd_down_for_ten_seconds_mid_run_loses_no_status(pairs: Pairs) -> None:
    paced = {"SMOKE_MIN_STEP_SECONDS": "0.1"}
    spec = pairs.spec((*SMOKE, "--steps", "150", "--checkpoint-every", "50"), learner_env=paced)
    handle = pairs.start(spec)
    pairs.wait_phase(spec.job_id, Phase.PROCESSING)
    pairs.etcd.stop()
    try:
        # About ten seconds without etcd (100 steps at 0.1 s) while training goes on.
        resume_at = metrics_lines(handle) + 100
        wait_until(lambda: metrics_lines(handle) >= resume_at, timeout=120, interval=0.1, message="100 more steps")
    finally:
        pairs.etcd.start()
    final = pairs.wait_terminal(handle, spec.job_id)
    assert final.phase is Phase.COMPLETED, pairs.describe(handle, spec.job_id)
    history = pairs.history(spec.job_id)
    assert [r.phase for r in history] == [*LIFECYCLE, Phase.COMPLETED]
    assert [r.sequence for r in history] == sorted(r.sequence for r in history)


def test_sidecar_killed_mid_download_then_restarted_completes_with_verified_data(pairs: Pairs) -> None:
    files = {f"many/part-{i:04d}.bin": hashlib.sha256(str(i).encode()).digest() * 16384 for i in range(120)}
    for key, body in files.items():
        pairs.s3_client.put_object(Bucket="lk-data", Key=key, Body=body)
    digest = "cd $DATA_DIR && find . -type f | LC_ALL=C sort | xargs sha256sum > $RESULT_DIR/sha256.txt"
    spec = pairs.spec(digest, data_prefix="many/", config={"s3": {"max_concurrency": 1}})
    handle = pairs.start(spec)
    sidecar = engine.engine().containers.get(handle.sidecar)
    data = volume_path(handle) / "data"
    wait_until(lambda: len(list(data.glob("part-*.bin"))) >= 5, timeout=120, interval=0.02, message="5 files down")
    sidecar.kill()
    assert len(list(data.glob("part-*.bin"))) < len(files), "the download finished before the kill: nothing tested"
    wait_until(lambda: exit_code(handle.sidecar) is not None, timeout=30)
    assert pairs.status(spec.job_id) is not None and pairs.status(spec.job_id).phase is Phase.DOWNLOADING
    sidecar.start()
    final = pairs.wait_terminal(handle, spec.job_id)
    assert final.phase is Phase.COMPLETED, pairs.describe(handle, spec.job_id)
    listing = pairs.stored(spec.job_id, "results/sha256.txt")
    expected = "".join(
        f"{hashlib.sha256(body).hexdigest()}  ./{key.removeprefix('many/')}\n" for key, body in sorted(files.items())
    )
    assert listing.decode() == expected


def test_fifty_megabyte_log_with_binary_bytes_and_a_ten_megabyte_line_is_shipped_intact(pairs: Pairs) -> None:
    writer = (
        "import random, sys; r = random.Random(5); out = sys.stdout.buffer\n"
        "for i in range(40): out.write(bytes(r.getrandbits(8) for _ in range(4096)) + b'\\xff\\xfe\\n')\n"
        "out.write(b'L' * (10 * 1024 * 1024) + b'\\n')\n"
        "for i in range(40 * 1024): out.write(b'line %d \\xc3\\x28 caf\\xe9\\n' % i)\n"
        "out.write(bytes(range(256)) * (40 * 1024 * 1024 // 256)); out.flush()\n"
    )
    spec = pairs.spec(("python", "-c", writer), data_prefix=None)
    handle = pairs.start(spec)
    final = pairs.wait_terminal(handle, spec.job_id)
    assert final.phase is Phase.COMPLETED, pairs.describe(handle, spec.job_id)
    written = (volume_path(handle) / "logs" / "learner.log").read_bytes()
    shipped = pairs.shipped_log(spec.job_id)
    assert len(written) > 50 * 1024 * 1024
    assert hashlib.sha256(shipped).hexdigest() == hashlib.sha256(written).hexdigest()


def test_no_credentials_reach_the_learner(pairs: Pairs) -> None:
    spec = pairs.spec(("python", "-c", "import os, json; print(json.dumps(sorted(os.environ)))"), data_prefix=None)
    handle = pairs.start(spec)
    pairs.wait_terminal(handle, spec.job_id)
    learner = engine.engine().containers.get(handle.learner)
    names = json.loads(learner.logs().decode().strip().splitlines()[-1])
    assert not [name for name in names if name.startswith(("AWS_", "ETCD_", "S3_", "LEARNERKIT_"))]
    attrs = learner.attrs["HostConfig"]
    assert attrs["NetworkMode"] == "none" and attrs["ReadonlyRootfs"] and attrs["CapDrop"] == ["ALL"]
