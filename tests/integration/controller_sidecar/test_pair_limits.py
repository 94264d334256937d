"""The limits a multi-tenant node needs, through a real pair on the Docker engine (issue 27 D3)."""

from __future__ import annotations

import dataclasses

import pytest

from controller_sidecar.status import ErrorCode, Phase
from learnerkit.common import engine
from learnerkit.pair.spec import PidsLimits
from tests.integration.controller_sidecar.conftest import Pairs

pytestmark = [pytest.mark.integration, pytest.mark.services, pytest.mark.timeout(600)]

PIDS_LIMIT = 64
FORK_BOMB = """
import os, sys, time
children, refused, deadline = [], 0, time.monotonic() + 3
while len(children) < 2000 and time.monotonic() < deadline:  # retries as bash's fork does, then gives up
    try:
        pid = os.fork()
    except OSError:
        refused += 1
        time.sleep(0.05)
        continue
    if pid == 0:
        time.sleep(600)
        os._exit(0)
    children.append(pid)
print(f"forked {len(children)}, {refused} refused", flush=True)
with open("/job/results/forked.txt", "w") as f:
    f.write(str(len(children)))
for pid in children:
    os.kill(pid, 9)
    os.waitpid(pid, 0)
sys.exit(3 if refused else 0)
"""


def test_a_learner_that_forks_far_past_its_pids_limit_is_held_to_it_and_its_job_says_why(pairs: Pairs) -> None:
    spec = dataclasses.replace(
        pairs.spec(("python", "-c", FORK_BOMB), data_prefix=None), pids=PidsLimits(learner=PIDS_LIMIT)
    )
    handle = pairs.start(spec)
    learner = engine.engine().api.inspect_container(handle.learner)
    sidecar = engine.engine().api.inspect_container(handle.sidecar)
    assert (learner["HostConfig"]["PidsLimit"], sidecar["HostConfig"]["PidsLimit"]) == (PIDS_LIMIT, 512)
    final = pairs.wait_terminal(handle, spec.job_id, timeout=180)
    evidence = pairs.describe(handle, spec.job_id)
    assert (final.phase, final.error_code, final.exit_code) == (Phase.FAILED, ErrorCode.LEARNER_FAILED, 3), evidence
    assert "the learner reached its pids limit" in final.message, evidence
    forked = int(pairs.stored(spec.job_id, "results/forked.txt"))
    assert 0 < forked < PIDS_LIMIT, evidence
