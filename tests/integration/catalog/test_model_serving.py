"""`learnerkit model serve` end to end: a registered version served by the real model server image on the Docker
engine, answering Triton's stock v2 client with the outputs of the model called in-process; a wrong body's 400
naming the field; a folder whose signature is broken refused at load; an alias roll-over at the same address that
a polling client sees without one error; production and candidate of one model served side by side, candidate
rolled over without production's client seeing it; `model stop` finishing the request in flight and leaving
nothing."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import requests
import tritonclient.http as v2client
from click.testing import CliRunner

from learnerkit.cli import cli
from learnerkit.common.engine import engine
from learnerkit.scheduler.backends.modelfront import STATUS_PATH
from learnerkit.scheduler.backends.modelservers import (
    FRONT_LABEL,
    MODEL_LABEL,
    SERVER_IMAGE,
    ServingError,
    read_only_for_all,
    run_server,
)
from learnerkit.scheduler.serving.deployment import forget
from learnerkit_build.publish.push import PublishRefused, check_gates
from learnerkit_build.state import state_home
from tests.integration.catalog.modeljob import job_folder
from tests.integration.catalog.test_catalog_registry import storage, tamper_blob
from tests.unit.scheduler.provenance import jobfolder
from tests.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]
SERVER_SPEC = "modelserver:2.13-cpu"

MAKE_MODEL = """
import json, sys, torch, learner
from pathlib import Path
torch.manual_seed(0)
net = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10))
learner.save_model(net, [64], 10, folder=Path('/out/model'))
x = torch.rand(4, 64, generator=torch.Generator().manual_seed(1)) * 16
logits = torch.jit.load('/out/model/model.pt')(x)
json.dump({'x': x.tolist(), 'logits': logits.tolist()}, open('/out/called.json', 'w'))
"""


@pytest.fixture(scope="module")
def digits_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A digits-shaped classifier saved by learner.save_model, and its logits for 4 inputs, called in-process by
    the same torch (the server image's: the host has none)."""
    if not engine().images.list(name=SERVER_IMAGE.split(":")[0]):
        pytest.fail(f"{SERVER_IMAGE} is not built: `learnerkit image build modelserver`")
    try:
        check_gates(SERVER_IMAGE)
    except PublishRefused:
        # A fresh machine: the suite's image tests and scans run after this module, and serve needs their records
        # of this image, so they are made here as a user makes them.
        for verb in ("test", "scan"):
            result = CliRunner().invoke(cli, ["image", verb, SERVER_SPEC])
            assert result.exit_code == 0, result.output
    out = tmp_path_factory.mktemp("digits")
    out.chmod(0o777)
    subprocess.run(
        [
            "docker",
            "run",
            "--rm",
            "--read-only",
            "--tmpfs",
            "/tmp",
            "--network",
            "none",
            "-v",
            f"{out}:/out",
            "--entrypoint",
            "python",
            SERVER_IMAGE,
            "-c",
            MAKE_MODEL,
        ],
        check=True,
        timeout=300,
    )
    return out


def signed_job(
    tmp: Path, digits_model: Path, key: Path | None = None, description_suffix: bytes = b""
) -> tuple[Path, Path]:
    """A job folder whose result is the digits model (``description_suffix`` after its model.json makes another
    version of the same model)."""
    return result_job(
        tmp,
        {
            "results/model/model.pt": (digits_model / "model" / "model.pt").read_bytes(),
            "results/model/model.json": (digits_model / "model" / "model.json").read_bytes() + description_suffix,
        },
        key,
    )


def result_job(tmp: Path, files: dict[str, bytes], key: Path | None = None) -> tuple[Path, Path]:
    """A signed job folder whose results are ``files`` (path in the job: bytes), and its signing key."""
    kept = jobfolder.RESULT_FILES
    jobfolder.RESULT_FILES = files
    try:
        return job_folder(tmp, key=key)
    finally:
        jobfolder.RESULT_FILES = kept


@contextmanager
def registered_tenant(registry: str, folder: Path, key: Path) -> Iterator[dict[str, str]]:
    """A tenant of its own with the job folder's model registered as `digits` and aliased `production`: the
    variables the CLI needs; what it served is removed after."""
    tenant = f"team-{uuid.uuid4().hex[:8]}"
    variables = {
        "LEARNERKIT_CATALOG_REGISTRY": registry,
        "LEARNERKIT_TENANT": tenant,
        "LEARNERKIT_SIGNING_KEY": str(key),
    }
    code, out = model("register-folder", str(folder), "--name", "digits", env=variables)
    assert code == 0, out
    code, out = model("alias", "digits", "production", json.loads(out)["version"], env=variables)
    assert code == 0, out
    yield variables
    containers, networks = leftovers(tenant)
    for container in containers:
        container.remove(force=True)
    for network in networks:  # once the containers on it are gone
        network.remove()
    forget(state_home() / "serving", tenant, "digits")


@pytest.fixture
def env(registry: str, tmp_path: Path, digits_model: Path) -> Iterator[dict[str, str]]:
    """A tenant of its own with the digits model registered and aliased `production`."""
    with registered_tenant(registry, *signed_job(tmp_path / "job", digits_model)) as variables:
        yield variables


def leftovers(tenant: str) -> tuple[list[Any], list[Any]]:
    """The containers (servers and front) and the network of the tenant's digits still on the engine."""
    containers = [
        c
        for label in (MODEL_LABEL, FRONT_LABEL)
        for c in engine().containers.list(all=True, filters={"label": f"{label}={tenant}/digits"})
    ]
    return containers, list(engine().networks.list(filters={"label": f"{FRONT_LABEL}={tenant}/digits"}))


def left_behind(tenant: str) -> list[str]:
    """The names of what of the tenant's digits is still there."""
    containers, networks = leftovers(tenant)
    return [str(thing.name) for thing in (*containers, *networks)]


def model(*args: str, env: dict[str, str]) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["model", *args, "--output", "json"], env=env)
    return result.exit_code, result.output


def called(digits_model: Path) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    reference = json.loads((digits_model / "called.json").read_text(encoding="utf-8"))
    return np.array(reference["x"], dtype=np.float32), np.array(reference["logits"], dtype=np.float32)


def test_a_version_served_answers_a_stock_v2_client_as_the_model_in_process(
    env: dict[str, str], digits_model: Path, tmp_path: Path
) -> None:
    code, out = model("serve", "digits@production", env=env)
    assert code == 0, out
    served = json.loads(out)
    assert served["url"].startswith("http://127.0.0.1:"), served
    container = engine().containers.get(served["container"])
    config = container.attrs["HostConfig"]
    assert config["ReadonlyRootfs"] and config["CapDrop"] == ["ALL"] and container.attrs["Config"]["User"] == "1000:0"
    assert not [e for e in container.attrs["Config"]["Env"] if "KEY" in e or "SECRET" in e or "TOKEN" in e]
    assert all(m["RW"] is False for m in container.attrs["Mounts"])

    client = v2client.InferenceServerClient(served["url"].removeprefix("http://"))
    assert client.is_server_live() and client.is_server_ready() and client.is_model_ready("digits")
    metadata = client.get_model_metadata("digits")
    assert metadata["inputs"] == [{"name": "input", "datatype": "FP32", "shape": [-1, 64]}]
    assert metadata["versions"] == [served["version"]]
    x, logits = called(digits_model)
    tensor = v2client.InferInput("input", list(x.shape), "FP32")
    tensor.set_data_from_numpy(x, binary_data=False)
    answer = client.infer("digits", [tensor])
    assert answer.as_numpy("logits").shape == (4, 10)
    assert np.array_equal(answer.as_numpy("logits"), logits)  # the logits as computed, bit for bit

    plain = tmp_path / "batch.json"  # a plain JSON tensor (a batch of the same size: torch's float sums differ by
    plain.write_text(json.dumps(x.tolist()), encoding="utf-8")  # batch size in their last bits)
    code, out = model("predict", "digits@production", "--input", str(plain), env=env)
    assert code == 0, out
    outputs = json.loads(out)["outputs"][0]
    assert outputs["shape"] == [4, 10] and np.array_equal(np.array(outputs["data"], dtype=np.float32), logits.ravel())

    wrong = {"inputs": [{"name": "input", "shape": [1, 63], "datatype": "FP32", "data": [0.0] * 63}]}
    refused = requests.post(f"{served['url']}/v2/models/digits/infer", json=wrong, timeout=30)
    assert refused.status_code == 400
    assert refused.json()["error"].startswith("inputs[0].shape: [1, 63] does not fit digits's input [-1, 64]")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([[1.0, 2.0], [3.0]]), encoding="utf-8")
    code, out = model("predict", "digits@production", "--input", str(bad), env=env)
    assert code != 0 and "[1]: shape [1], but [0] has [2]" in out, out

    code, out = model("stop", "digits", env=env)
    assert code == 0 and json.loads(out)["stopped"] == [served["version"]], out
    assert not (state_home() / "serving" / env["LEARNERKIT_TENANT"]).joinpath("digits").exists()
    assert not left_behind(env["LEARNERKIT_TENANT"])
    code, out = model("predict", "digits@production", "--input", str(plain), env=env)
    assert code != 0 and "not served" in out, out


def test_a_version_whose_signature_is_broken_is_refused_at_load(env: dict[str, str], tmp_path: Path) -> None:
    pulled = tmp_path / "pulled"
    code, out = model("pull", "digits@production", str(pulled), env=env)
    assert code == 0, out
    version = json.loads(out)["version"]
    weights = next(pulled.glob("attempt-*/learner-*/results/model/model.pt"))
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 1
    weights.write_bytes(bytes(data))
    read_only_for_all(pulled)
    keys = tmp_path / "keys"
    keys.mkdir()
    shutil.copy(Path(env["LEARNERKIT_SIGNING_KEY"]).with_suffix(".pub"), keys / "platform.pub")
    with pytest.raises(ServingError) as refused:
        run_server(env["LEARNERKIT_TENANT"], "digits", version, pulled, keys)
    message = str(refused.value)
    assert "exited 2" in message and "refused to load" in message, message
    assert "results/model/model.pt: changed (its SHA-256 is not the signed one)" in message, message
    assert not left_behind(env["LEARNERKIT_TENANT"])  # no server, no front, no network


class Poller:
    """A client asking the same address without pause, on one kept-alive connection: each answer's model version,
    each error."""

    def __init__(self, url: str, body: dict[str, Any]) -> None:
        self.url, self.body = url, body
        self.versions: list[str] = []
        self.errors: list[str] = []
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        with requests.Session() as session:
            while not self.stopping.is_set():
                try:
                    answer = session.post(f"{self.url}/v2/models/digits/infer", json=self.body, timeout=60)
                except requests.RequestException as e:
                    self.errors.append(repr(e))
                    continue
                if answer.status_code != 200:
                    self.errors.append(f"{answer.status_code}: {answer.text}")
                else:
                    self.versions.append(answer.json()["model_version"])

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(timeout=120)
        assert not self.thread.is_alive()


def infer_body(x: np.ndarray[Any, Any]) -> dict[str, Any]:
    return {"inputs": [{"name": "input", "shape": list(x.shape), "datatype": "FP32", "data": x.ravel().tolist()}]}


def test_an_alias_moved_rolls_the_served_version_over_at_the_same_address_without_an_error(
    env: dict[str, str], digits_model: Path, tmp_path: Path
) -> None:
    code, out = model("serve", "digits@production", env=env)
    assert code == 0, out
    first = json.loads(out)
    poller = Poller(first["url"], infer_body(called(digits_model)[0]))
    wait_until(lambda: poller.versions or poller.errors, timeout=60, message="the first answer")
    folder, _ = signed_job(tmp_path / "job2", digits_model, Path(env["LEARNERKIT_SIGNING_KEY"]), b" ")
    code, out = model("register-folder", str(folder), "--name", "digits", env=env)
    assert code == 0, out
    second = json.loads(out)["version"]
    assert second != first["version"]
    code, out = model("alias", "digits", "production", second, env=env)
    assert code == 0, out
    plain = tmp_path / "batch.json"
    plain.write_text(json.dumps(called(digits_model)[0].tolist()), encoding="utf-8")
    code, out = model("predict", "digits@production", "--input", str(plain), env=env)
    assert code != 0 and f"but digits@production serves {first['version']}: serve it first" in out, out

    code, out = model("serve", "digits@production", env=env)
    assert code == 0, out
    rolled = json.loads(out)
    assert rolled["version"] == second and rolled["container"] != first["container"]
    assert rolled["url"] == first["url"] and rolled["front"] == first["front"]
    seen_after = len(poller.versions)
    wait_until(lambda: len(poller.versions) > seen_after + 5, timeout=60, message="answers after the roll-over")
    poller.stop()
    assert not poller.errors, poller.errors[:5]
    switched = poller.versions.index(second)
    assert set(poller.versions[:switched]) == {first["version"]}, "the old version answered first"
    assert set(poller.versions[switched:]) == {second}, "never the old version once the new one answered"
    running = engine().containers.list(all=True, filters={"label": f"{MODEL_LABEL}={env['LEARNERKIT_TENANT']}/digits"})
    assert [c.name for c in running] == [rolled["container"]]
    code, out = model("predict", "digits@production", "--input", str(plain), env=env)
    assert code == 0 and json.loads(out)["model_version"] == second, out
    assert np.array_equal(
        np.array(json.loads(out)["outputs"][0]["data"], dtype=np.float32), called(digits_model)[1].ravel()
    )


def version_of(url: str, x: np.ndarray[Any, Any]) -> str:
    answer = requests.post(f"{url}/v2/models/digits/infer", json=infer_body(x), timeout=60)
    assert answer.status_code == 200, answer.text
    return str(answer.json()["model_version"])


def test_production_and_candidate_are_served_side_by_side_and_roll_over_apart(
    env: dict[str, str], digits_model: Path, tmp_path: Path
) -> None:
    """Two aliases of one model at two addresses, each answering its own version under the catalog name; moving
    candidate rolls over only candidate's endpoint while a client polling production sees no change."""
    tenant, x = env["LEARNERKIT_TENANT"], called(digits_model)[0]
    versions = []
    for number, suffix in ((2, b" "), (3, b"  ")):
        folder, _ = signed_job(tmp_path / f"job{number}", digits_model, Path(env["LEARNERKIT_SIGNING_KEY"]), suffix)
        code, out = model("register-folder", str(folder), "--name", "digits", env=env)
        assert code == 0, out
        versions.append(json.loads(out)["version"])
    code, out = model("alias", "digits", "candidate", versions[0], env=env)
    assert code == 0, out

    code, out = model("serve", "digits@production", env=env)
    assert code == 0, out
    production = json.loads(out)
    code, out = model("serve", "digits@candidate", env=env)
    assert code == 0, out
    candidate = json.loads(out)
    assert (production["alias"], candidate["alias"]) == ("production", "candidate")
    assert production["url"] != candidate["url"] and production["front"] != candidate["front"]
    assert candidate["version"] == versions[0] != production["version"]
    for served in (production, candidate):
        assert version_of(served["url"], x) == served["version"]
        metadata = requests.get(f"{served['url']}/v2/models/digits", timeout=30).json()
        assert metadata["name"] == "digits" and metadata["versions"] == [served["version"]], metadata
    code, out = model("serve", "digits@production", env=env)  # served already: its address again, nothing new
    assert code == 0 and json.loads(out) == production, out
    code, out = model("served", "digits", env=env)
    assert code == 0 and json.loads(out) == [candidate, production], out
    code, out = model("show", "digits@production", env=env)
    assert code == 0 and json.loads(out)["served"] == [production], out

    poller = Poller(production["url"], infer_body(x))
    wait_until(lambda: poller.versions or poller.errors, timeout=60, message="production's first answer")
    code, out = model("alias", "digits", "candidate", versions[1], env=env)
    assert code == 0, out
    code, out = model("serve", "digits@candidate", env=env)
    assert code == 0, out
    rolled = json.loads(out)
    assert rolled["version"] == versions[1] and rolled["container"] != candidate["container"]
    assert rolled["url"] == candidate["url"] and rolled["front"] == candidate["front"]
    assert version_of(candidate["url"], x) == versions[1]
    seen_after = len(poller.versions)
    wait_until(lambda: len(poller.versions) > seen_after + 5, timeout=60, message="production's answers after")
    poller.stop()
    assert not poller.errors, poller.errors[:5]
    assert set(poller.versions) == {production["version"]}, "production answered its own version throughout"
    servers = engine().containers.list(all=True, filters={"label": f"{MODEL_LABEL}={tenant}/digits"})
    assert sorted(c.name for c in servers) == sorted([production["container"], rolled["container"]])

    code, out = model("stop", "digits@candidate", env=env)
    assert code == 0, out
    assert json.loads(out) == {"name": "digits", "stopped": [versions[1]], "references": ["digits@candidate"]}
    assert version_of(production["url"], x) == production["version"]
    with pytest.raises(requests.ConnectionError):
        requests.get(f"{candidate['url']}/v2/health/ready", timeout=10)
    code, out = model("stop", "digits@candidate", env=env)
    assert code == 1 and "digits@candidate is not served for tenant" in out and "digits@production" in out, out
    code, out = model("stop", "digits", env=env)
    assert code == 0 and json.loads(out)["references"] == ["digits@production"], out
    assert not left_behind(tenant)


def test_a_version_whose_weights_changed_in_the_registry_is_not_served(
    env: dict[str, str], digits_model: Path, tmp_path: Path
) -> None:
    """Its own model.json bytes (tabs after it): the registry keeps one blob for every repository."""
    folder, _ = signed_job(tmp_path / "job2", digits_model, Path(env["LEARNERKIT_SIGNING_KEY"]), b"\t\t\t")
    code, out = model("register-folder", str(folder), "--name", "digits", env=env)
    assert code == 0, out
    version = json.loads(out)["version"]
    description = next(folder.glob("attempt-*/learner-*/results/model/model.json")).read_bytes()
    tamper_blob(storage(env["LEARNERKIT_CATALOG_REGISTRY"]), "sha256:" + hashlib.sha256(description).hexdigest())
    code, out = model("serve", f"digits@{version}", env=env)
    assert code == 1, out
    refusal = json.loads(out)
    assert refusal["refused"] is True and refusal["failed"] == ["weights signature"], out
    assert "weights signature: blob attempt-1/learner-1/results/model/model.json: changed" in refusal["message"], out
    assert not left_behind(env["LEARNERKIT_TENANT"])  # no server, no front, no network


def test_model_stop_finishes_the_request_in_flight_then_removes_everything(
    env: dict[str, str], digits_model: Path
) -> None:
    """A batch large enough to take a while; `model stop` is asked once the front counts it in flight."""
    code, out = model("serve", "digits@production", env=env)
    assert code == 0, out
    served = json.loads(out)
    x = np.tile(called(digits_model)[0], (2000, 1))
    answers: list[requests.Response | Exception] = []

    def send() -> None:
        try:
            answers.append(requests.post(f"{served['url']}/v2/models/digits/infer", json=infer_body(x), timeout=300))
        except requests.RequestException as e:
            answers.append(e)

    sender = threading.Thread(target=send, daemon=True)
    sender.start()

    def in_flight() -> bool:
        status = requests.get(f"{served['url']}{STATUS_PATH}", timeout=10).json()
        return bool(status["in_flight"]) or bool(answers)

    wait_until(in_flight, timeout=120, interval=0.005, message="the large request in flight at the front")
    assert not answers, "the request ended before the stop: it must take longer"
    code, out = model("stop", "digits", env=env)
    assert code == 0, out
    sender.join(timeout=300)
    assert len(answers) == 1 and isinstance(answers[0], requests.Response), answers
    assert answers[0].status_code == 200, answers[0].text[:500]
    assert answers[0].json()["outputs"][0]["shape"] == [8000, 10]
    assert not left_behind(env["LEARNERKIT_TENANT"])
    with pytest.raises(requests.ConnectionError):
        requests.get(f"{served['url']}/v2/health/ready", timeout=10)
