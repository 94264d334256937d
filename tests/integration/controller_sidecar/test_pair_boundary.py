"""The learner <-> sidecar boundary through a real pair: what the learner plants under /job never makes the
sidecar read its own secrets, and the job always ends with a final status."""

from __future__ import annotations

import json

import pytest

from controller_sidecar.status import ErrorCode, Phase
from learnerkit.common import engine
from learnerkit.pair.docker import LEARNER_RUN_AS, PairHandle
from tests.integration.controller_sidecar.conftest import Pairs

pytestmark = [pytest.mark.integration, pytest.mark.services, pytest.mark.timeout(600)]

FINISH_S = 120.0
"""Each job here ends within seconds; this only bounds the wait."""


def assert_no_secret_leaked(pairs: Pairs, handle: PairHandle, job_id: str) -> None:
    """Nothing of the sidecar's environment in the job's objects or in the sidecar's output."""
    secrets = [pairs.s3.secret_key.encode(), pairs.s3.access_key.encode(), b"AWS_SECRET_ACCESS_KEY", b"ETCD_ENDPOINTS"]
    stored = pairs.objects(f"{job_id}/")
    output = engine.engine().containers.get(handle.sidecar).logs()
    for secret in secrets:
        assert not [key for key, body in stored.items() if secret in body or secret in key.encode()], secret
        assert secret not in output, secret


def test_links_in_results_and_checkpoints_are_skipped_and_the_job_completes(pairs: Pairs) -> None:
    plant = (
        "set -e; mkdir -p $RESULT_DIR/sub $CHECKPOINT_DIR/ckpt-0000000001; echo kept > $RESULT_DIR/sub/kept.txt; "
        "ln -s /proc/self/environ $RESULT_DIR/environ; ln -s /proc/self $RESULT_DIR/proc; "
        "ln -s /etc $RESULT_DIR/sub/etc; ln -s /etc/hostname $RESULT_DIR/hostname; "
        "echo weights > $CHECKPOINT_DIR/ckpt-0000000001/model.pt; "
        "ln -s /proc/self/environ $CHECKPOINT_DIR/ckpt-0000000001/environ; "
        "ln -s /proc/self $CHECKPOINT_DIR/ckpt-0000000002; echo planted"
    )
    spec = pairs.spec(plant, data_prefix=None)
    handle = pairs.start(spec)
    final = pairs.wait_terminal(handle, spec.job_id, timeout=FINISH_S)
    assert final.phase is Phase.COMPLETED, pairs.describe(handle, spec.job_id)
    prefix = f"{spec.job_id}/learner-1/"
    stored = {key.removeprefix(prefix) for key in pairs.objects(prefix)}
    assert {key for key in stored if key.startswith(("results/", "checkpoints/"))} == {
        "results/sub/kept.txt",
        "checkpoints/ckpt-0000000001/model.pt",
        "checkpoints/ckpt-0000000001/.complete",
    }
    assert_no_secret_leaked(pairs, handle, spec.job_id)


@pytest.mark.parametrize(
    ("planted", "named"),
    [
        ("rm $LOG_DIR/learner.log; ln -s /proc/self/environ $LOG_DIR/learner.log", "/job/logs/learner.log"),
        ("ln -s /proc/self/environ $LOG_DIR/metrics.jsonl", "/job/logs/metrics.jsonl"),
        ("ln -s /proc/self/environ $JOB_STATE_DIR/learner.exit", "/job/control/learner.exit"),
    ],
    ids=["log", "metrics", "exit-record"],
)
def test_a_link_where_the_sidecar_reads_halts_the_learner_and_fails_the_job(
    pairs: Pairs, planted: str, named: str
) -> None:
    # The swap comes as soon as the line is in the file: the sidecar holds the log open from before start, so the
    # line is shipped however soon after it the learner swaps the file (it was lost when the first read came
    # after). The line goes through learner-run's tee, so `echo` returning does not mean it is in the file yet:
    # swapped before the tee wrote it, it went to the unlinked file after the sidecar had left it (once, 2026-11-29).
    written = 'until [ -s "$LOG_DIR/learner.log" ]; do sleep 0.01; done'
    spec = pairs.spec(f"echo before; {written}; {planted}; echo after; sleep 120", data_prefix=None, halt_grace_s=5)
    handle = pairs.start(spec)
    final = pairs.wait_terminal(handle, spec.job_id, timeout=FINISH_S)
    assert (final.phase, final.error_code) == (Phase.FAILED, ErrorCode.UNSAFE_FILE), pairs.describe(handle, spec.job_id)
    assert final.message.startswith(f"{named}: is a symbolic link, not a regular file")
    assert b"before" in pairs.shipped_log(spec.job_id)
    assert_no_secret_leaked(pairs, handle, spec.job_id)


PROBE = """
import json, os
found = {}
for pid in sorted((p for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()), key=int):
    try:
        with open(f"/proc/{pid}/environ", "rb") as environ:
            found[pid] = environ.read().decode("latin-1")
    except OSError as error:
        found[pid] = f"refused: {error.strerror}"
print(json.dumps(found))
"""


def test_the_learners_user_cannot_read_the_sidecars_environment_in_a_shared_pid_namespace(pairs: Pairs) -> None:
    """As on Kubernetes (shareProcessNamespace): a process of the learner's user beside the sidecar's."""
    spec = pairs.spec(("sleep", "60"), data_prefix=None, halt_grace_s=2)
    handle = pairs.start(spec)
    pairs.wait_phase(spec.job_id, Phase.PROCESSING, timeout=FINISH_S)
    output = engine.engine().containers.run(
        image=spec.learner_image,
        entrypoint=["python", "-c", PROBE],
        user=LEARNER_RUN_AS,
        pid_mode=f"container:{handle.sidecar}",
        network_mode="none",
        read_only=True,
        cap_drop=["ALL"],
        security_opt=["no-new-privileges"],
        remove=True,
    )
    found = json.loads(output.decode().strip().splitlines()[-1])
    assert found, "no sidecar process was visible: nothing tested"
    assert all(text.startswith("refused: Permission denied") for text in found.values()), found
    for secret in (pairs.s3.secret_key, pairs.s3.access_key, "AWS_SECRET_ACCESS_KEY"):
        assert secret.encode() not in output
