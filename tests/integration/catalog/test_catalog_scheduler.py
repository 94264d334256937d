"""`learnerkit model` against a real scheduler that has restarted: the REST API's app (uvicorn on 127.0.0.1) over a
real Scheduler restored from jobs written to the real etcd as JobStore writes them, a COMPLETED job's outputs and
signed documents (the platform's real writers) in the real SeaweedFS, Debian's docker-registry as the catalog:
`model register JOB`; `model list|alias|verify` through the scheduler saying what they say straight to the
registry; two alias moves at once serialised by the model's lock in etcd. Nothing is deployed. The registration
of a job a real learner pair ran is tests/integration/scheduler/test_catalog_register_docker.py."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from click.testing import CliRunner

from controller_sidecar.etcdstore import EtcdStore
from learnerkit.cli import cli
from learnerkit.common.errors import LearnerkitError
from learnerkit.common.keyring import PublishedKey
from learnerkit.common.signing import load_public_key, load_signer, public_key_path
from learnerkit.dev.s3 import create_bucket
from learnerkit.scheduler.admission.stage import Stage
from learnerkit.scheduler.api.app import create_app
from learnerkit.scheduler.api.auth import add_token
from learnerkit.scheduler.backends.docker import DockerBackend
from learnerkit.scheduler.catalog import aliaslog
from learnerkit.scheduler.catalog.errors import ConflictError
from learnerkit.scheduler.catalog.versions import Store, register
from learnerkit.scheduler.client.http import SchedulerClient
from learnerkit.scheduler.config.policy import SubmitPolicy, origin
from learnerkit.scheduler.core.options import SchedulerOptions
from learnerkit.scheduler.core.planning import Platform
from learnerkit.scheduler.core.scheduler import Scheduler
from learnerkit.scheduler.errors import ModelBusyError
from learnerkit.scheduler.images.catalog import ImageCatalog
from learnerkit.scheduler.jobs.state import JobState, JobStatus
from learnerkit.scheduler.jobs.store import JobStore
from learnerkit.scheduler.manifest.parser import parse_manifest
from tests.integration.catalog.modeljob import evaluated_job, job_folder
from tests.integration.conftest import REPO
from tests.unit.scheduler.provenance.jobfolder import JOB
from tests.waiting import wait_until

pytestmark = [pytest.mark.integration]


@dataclass(frozen=True)
class Served:
    url: str
    token: str
    """team-a's: the tenant the job's provenance names."""
    other_token: str
    """team-b's."""
    queued: str
    """A job of team-a that has not run."""
    registry: str
    key: Path
    """The platform's signing key (the scheduler's)."""
    store_keys: dict[str, str]
    """team-a's keys of the job's results store, as the AWS tools read them."""


def _manifest(s3: Any, bucket: str) -> str:
    return f"""\
name: mnist
cpus: 0.01
memory: 16Mb
learners: 1
data_stores:
  - id: s3
    type: s3_datastore
    training_data: {{container: {bucket}}}
    training_results: {{container: {bucket}}}
    connection: {{auth_url: "{s3.endpoint_url}", user_name: "{s3.access_key}", password: "{s3.secret_key}"}}
framework:
  name: pytorch
  version: "2.13"
  command: python train.py
"""


async def _create(store: JobStore, text: str, job_id: str, status: JobStatus) -> None:
    spec = {"manifest": parse_manifest(text, "manifest.yml", None).to_dict(), "tenant": "team-a", "job_id": job_id}
    state = JobState(job_id, "team-a", "mnist", 1_800_000_000.0)
    await store.create(state, spec, text, "manifest.yml")
    if status is JobStatus.COMPLETED:
        await store.save(state.evolve(status=status, stage=Stage.DONE))
    else:
        await store.save(state.evolve(not_before=4e9, reason="waiting for 1 GPU(s): 0 free"))


@pytest.fixture(scope="module")
def served(
    etcd_server: Any, s3_server: Any, registry: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    folder = tmp_path_factory.mktemp("catalog-scheduler")
    objects, key = evaluated_job(folder / "job")
    keys = [load_public_key(public_key_path(key))]
    published = [PublishedKey(keys[0].keyid, public_key_path(key).read_text(), True)]
    tokens = folder / "tokens.json"
    token, other_token = add_token(tokens, "team-a"), add_token(tokens, "team-b")
    options = SchedulerOptions(
        platform=Platform(etcd_endpoints=etcd_server.endpoint, sidecar_image="unused"),
        catalog=ImageCatalog(REPO).frameworks(),
        resolve_image=lambda _manifest: "unused",
        submit_policy=SubmitPolicy(object_stores=(str(origin(s3_server.endpoint_url)),)),
    )
    bucket = f"catalog-{uuid.uuid4().hex[:8]}"
    s3 = s3_server.client()
    create_bucket(s3, bucket)
    for name, data in objects.objects.items():
        s3.put_object(Bucket=bucket, Key=name, Body=data)
    queued = f"job-{uuid.uuid4().hex[:12]}"
    root = f"/learnerkit-catalog-{uuid.uuid4().hex[:8]}/jobs"
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    async def start() -> tuple[EtcdStore, Scheduler]:
        etcd = await EtcdStore.connect(etcd_server.settings())
        store = JobStore(etcd, root)
        await _create(store, _manifest(s3_server, bucket), JOB, JobStatus.COMPLETED)
        await _create(store, _manifest(s3_server, bucket), queued, JobStatus.QUEUED)
        scheduler = Scheduler(store, DockerBackend(), options)
        await scheduler.loop.rebuild()
        return etcd, scheduler

    etcd, scheduler = asyncio.run_coroutine_threadsafe(start(), loop).result(120)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    app = create_app(scheduler, tokens, keys=published, catalog=registry, signer=load_signer(key))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    serving = asyncio.run_coroutine_threadsafe(server.serve(sockets=[sock]), loop)
    try:
        wait_until(lambda: server.started, timeout=10, message="uvicorn to start")
        store_keys = {"AWS_ACCESS_KEY_ID": s3_server.access_key, "AWS_SECRET_ACCESS_KEY": s3_server.secret_key}
        yield Served(f"http://127.0.0.1:{sock.getsockname()[1]}", token, other_token, queued, registry, key, store_keys)
    finally:
        server.should_exit = True
        serving.result(timeout=30)
        sock.close()
        asyncio.run_coroutine_threadsafe(etcd.delete_prefix(root.rsplit("/", 1)[0] + "/"), loop).result(30)
        asyncio.run_coroutine_threadsafe(etcd.close(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=30)


def _register(
    served: Served, token: str, job: str, name: str, *lend: str, keys: dict[str, str] | None = None
) -> tuple[int, Any]:
    env = {"LEARNERKIT_SCHEDULER_URL": served.url, "LEARNERKIT_TOKEN": token, **(keys or {})}
    return _model(env, "register", job, "--name", name, *lend)


def test_model_register_job_after_a_restart_names_why_and_another_tenant_gets_no_such_job(served: Served) -> None:
    name = f"digits-{uuid.uuid4().hex[:6]}"
    code, restored = _register(served, served.token, JOB, name)
    # An ended job's store credentials leave etcd: a restarted scheduler can no longer read its results.
    assert code == 1 and "deleted its store's credentials" in restored["message"], restored
    code, other = _register(served, served.other_token, JOB, name)
    assert code == 1 and f"no job {JOB!r}" in other["message"], other
    code, queued = _register(served, served.token, served.queued, name)
    assert code == 1 and "is QUEUED" in queued["message"], queued


def test_model_register_after_a_restart_reads_the_job_with_the_store_keys_its_tenant_lends(served: Served) -> None:
    name = f"lent-{uuid.uuid4().hex[:6]}"
    code, registered = _register(served, served.token, JOB, name, "--lend-store-keys", keys=served.store_keys)
    assert code == 0 and registered["job"] == JOB and registered["version"].startswith("sha256:"), registered
    assert {b["path"] for b in registered["files"]} == {"attempt-1/learner-1/results/model.bin"}
    remote, _ = _envs(served)
    assert {"name": name, "versions": [registered["version"]]} in _model(remote, "list")[1]

    wrong = {**served.store_keys, "AWS_SECRET_ACCESS_KEY": "not-the-secret"}
    code, refused = _register(served, served.token, JOB, name, "--lend-store-keys", keys=wrong)
    assert code == 1 and JOB in refused["message"], refused
    code, other = _register(served, served.other_token, JOB, name, "--lend-store-keys", keys=served.store_keys)
    assert code == 1 and f"no job {JOB!r}" in other["message"], other  # keys lend no other tenant's job
    result = CliRunner().invoke(
        cli,
        ["model", "register", JOB, "--name", name, "--lend-store-keys"],
        env={"LEARNERKIT_SCHEDULER_URL": served.url, "LEARNERKIT_TOKEN": served.token, "AWS_ACCESS_KEY_ID": ""},
    )
    assert result.exit_code == 2 and "AWS_SECRET_ACCESS_KEY: set both" in result.output, result.output


def _model(env: dict[str, str], *args: str) -> tuple[int, Any]:
    result = CliRunner().invoke(cli, ["model", *args, "--output", "json"], env=env)
    return result.exit_code, json.loads(result.output)


def _envs(served: Served) -> tuple[dict[str, str], dict[str, str]]:
    """(through the scheduler with team-a's token, straight to the registry as team-a's operator)."""
    remote = {"LEARNERKIT_SCHEDULER_URL": served.url, "LEARNERKIT_TOKEN": served.token, "LEARNERKIT_TENANT": ""}
    local = {
        "LEARNERKIT_CATALOG_REGISTRY": served.registry,
        "LEARNERKIT_TENANT": "team-a",
        "LEARNERKIT_SIGNING_KEY": str(served.key),
        "LEARNERKIT_SCHEDULER_URL": "",
    }
    return remote, local


def _versions(served: Served, tmp: Path, name: str, *fairness: str) -> list[str]:
    keys = [load_public_key(public_key_path(served.key))]
    store = Store(served.registry, "team-a")
    return [
        register(store, name, job_folder(tmp / f"job-{n}", fairness=f, key=served.key)[0], keys).version
        for n, f in enumerate(fairness)
    ]


def test_model_list_alias_and_verify_through_the_scheduler_answer_as_straight_to_the_registry(
    served: Served, tmp_path: Path
) -> None:
    name = f"remote-{uuid.uuid4().hex[:6]}"
    good, unfair = _versions(served, tmp_path, name, "passed", "failed")
    remote, local = _envs(served)
    code, moved = _model(remote, "alias", name, "production", good)
    assert code == 0 and moved["to"] == good and moved["from"] is None and moved["by"] == "tenant team-a", moved
    code, refused = _model(remote, "alias", name, "production", unfair)
    assert code == 1 and refused["refused"] is True, refused
    assert refused == _model(local, "alias", name, "production", unfair)[1]  # the same words, the same gates
    assert "evaluation thresholds" in refused["failed"], refused

    code, listed = _model(remote, "list")
    assert code == 0 and {"name": name, "versions": sorted([good, unfair])} in [
        {"name": row["name"], "versions": sorted(row["versions"])} for row in listed
    ]
    assert listed == _model(local, "list")[1]
    code, verified = _model(remote, "verify", f"{name}@production")
    assert code == 0 and verified["verified"] is True and verified["version"] == good, verified
    assert verified == _model(local, "verify", f"{name}@production")[1]

    other = {**remote, "LEARNERKIT_TOKEN": served.other_token}
    code, hidden = _model(other, "verify", f"{name}@production")
    assert code == 1 and "tenant team-b" in hidden["message"], hidden
    assert name not in {row["name"] for row in _model(other, "list")[1]}


def test_two_alias_moves_at_once_through_the_scheduler_run_one_after_the_other(served: Served, tmp_path: Path) -> None:
    """Each move proves its version for seconds before it appends: without the model's lock both read the same
    log, and one append is lost or refused."""
    name = f"moves-{uuid.uuid4().hex[:6]}"
    first, second = _versions(served, tmp_path, name, "passed", "passed")
    _, local = _envs(served)
    start = threading.Barrier(2)
    answers: dict[str, dict[str, Any] | Exception] = {}

    def move(version: str) -> None:  # the CLI's client (click's test runner swaps sys.stdout: one at a time)
        client = SchedulerClient(served.url, served.token)
        start.wait(timeout=30)
        try:
            answers[version] = client.move_alias(name, "production", version)
        except LearnerkitError as e:
            answers[version] = e
        finally:
            client.close()

    movers = [threading.Thread(target=move, args=(v,)) for v in (first, second)]
    for mover in movers:
        mover.start()
    for mover in movers:
        mover.join(timeout=300)
    assert all(isinstance(a, dict) for a in answers.values()) and len(answers) == 2, answers
    code, history = _model(local, "history", name)
    assert code == 0 and [m["sequence"] for m in history] == [1, 2], history
    assert all(m["check"] == "ok" for m in history), history
    assert history[0]["from"] is None and history[1]["from"] == history[0]["to"], history
    assert {m["to"] for m in history} == {first, second}
    code, verified = _model(local, "verify", f"{name}@production")
    assert code == 0 and verified["version"] == history[1]["to"], verified


def test_a_move_whose_log_changed_after_it_was_read_appends_nothing(served: Served, tmp_path: Path) -> None:
    """Straight to the registry (no lock there): the stored log is read again just before the append."""
    name = f"stale-{uuid.uuid4().hex[:6]}"
    (version,) = _versions(served, tmp_path, name, "passed")
    store, signer = Store(served.registry, "team-a"), load_signer(served.key)
    stale = aliaslog.read_log(store, name)
    aliaslog.append(store, name, stale, "production", None, version, "alice", "now", ["all"], signer)
    with pytest.raises(ConflictError, match="another move ran at once"):
        aliaslog.append(store, name, stale, "candidate", None, version, "bob", "now", ["all"], signer)
    assert len(aliaslog.read_log(store, name)) == 1


def test_a_model_lock_held_too_long_is_a_conflict_naming_its_holder(etcd_server: Any) -> None:
    async def run() -> None:
        etcd = await EtcdStore.connect(etcd_server.settings())
        store = JobStore(etcd, f"/learnerkit-lock-{uuid.uuid4().hex[:8]}/jobs")
        try:
            async with store.model_lock("team-a", "digits", "tenant team-a", 0):
                with pytest.raises(ModelBusyError, match=r"another alias move of digits .*held by tenant team-a"):
                    async with store.model_lock("team-a", "digits", "tenant team-b", 0.3):
                        pass
                async with store.model_lock("team-a", "other", "tenant team-a", 0):
                    pass  # a lock per model
            async with store.model_lock("team-a", "digits", "tenant team-b", 0):
                pass  # released when its block ended
        finally:
            await etcd.close()

    asyncio.run(run())
