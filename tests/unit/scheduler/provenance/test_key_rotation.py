"""`scheduler key rotate`: the old public key stays published (``GET /v1/keys``) by its id, a job signed before the
rotation still verifies by `job verify` with the keys the scheduler serves, and a job signed after names the new key;
an encrypted key opens only with its passphrase, and says which setting gives it when missing or wrong."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import uvicorn
from click.testing import CliRunner

from learnerkit.cli import cli
from learnerkit.common.errors import ConfigError
from learnerkit.common.keyring import published_keys, retired_folder
from learnerkit.common.passphrase import key_passphrase
from learnerkit.common.signing import create_signer, load_signer, public_key_path
from learnerkit.scheduler.api.app import create_app
from learnerkit.scheduler.client import imagedigest
from learnerkit.scheduler.config.settings import SchedulerSettings
from learnerkit.scheduler.provenance.verify import ImageAnswer
from tests.unit.scheduler.conftest import Tenants
from tests.unit.scheduler.fakefacade import FakeFacade
from tests.unit.scheduler.provenance.jobfolder import download, finished_job
from tests.waiting import wait_until


def serve(fake: FakeFacade, tenants: Tenants, key: Path) -> Iterator[str]:
    """The API publishing ``key`` and the keys it replaced, as `serve` does."""
    signer = load_signer(key)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    app = create_app(
        fake, tenants.path, public_key=signer.public_key.keyval["public"], keys=published_keys(key, signer)
    )
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    wait_until(lambda: server.started, timeout=10, message="uvicorn to start")
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    server.should_exit = True
    thread.join(timeout=10)
    sock.close()


def verify(url: str, folder: Path, *args: str) -> tuple[int, dict[str, object]]:
    env = {"LEARNERKIT_SCHEDULER_URL": url}
    result = CliRunner().invoke(cli, ["job", "verify", str(folder), "-o", "json", *args], env=env)
    return result.exit_code, json.loads(result.output)


def test_a_job_signed_before_a_rotation_still_verifies_and_a_new_job_names_the_new_key(
    tmp_path: Path, fake: FakeFacade, tenants: Tenants, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The jobs name made-up image IDs: this host's engine (which may hold a real sidecar image) is not asked.
    monkeypatch.setattr(imagedigest, "image_answer", lambda reference: ImageAnswer("no engine", problem="not asked"))
    store, key = finished_job(tmp_path / "before")
    before = download(store, tmp_path / "before-job")
    old_id = load_signer(key).public_key.keyid
    rotated = CliRunner().invoke(cli, ["scheduler", "key", "rotate", "--key", str(key), "-o", "json"])
    assert rotated.exit_code == 0, rotated.output
    done = json.loads(rotated.output)
    new_id = load_signer(key).public_key.keyid
    assert done["retired"] == old_id and done["keyid"] == new_id != old_id
    assert (retired_folder(key) / f"{old_id}.pub").is_file()
    store, _ = finished_job(tmp_path / "after", signing_key=key)
    after = download(store, tmp_path / "after-job")

    for url in serve(fake, tenants, key):
        served = httpx.get(f"{url}/v1/keys").json()["keys"]
        assert [(k["keyid"], k["current"]) for k in served] == [(new_id, True), (old_id, False)]
        code, report = verify(url, before)
        assert code == 0 and report["key_id"] == old_id, json.dumps(report)
        code, report = verify(url, after)
        assert code == 0 and report["key_id"] == new_id, report
    only_new = verify("http://127.0.0.1:9", before, "--public-key", str(public_key_path(key)))
    assert only_new[0] == 1, only_new  # the rotation is what the published old key is for


def test_an_encrypted_key_opens_only_with_its_passphrase(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key = tmp_path / "signing-key.pem"
    made = CliRunner().invoke(
        cli,
        ["scheduler", "key", "create", "--key", str(key), "-o", "json"],
        env={"LEARNERKIT_SIGNING_KEY_PASSPHRASE": "correct horse"},
    )
    assert made.exit_code == 0 and json.loads(made.output)["encrypted"] is True, made.output
    assert b"ENCRYPTED PRIVATE KEY" in key.read_bytes()
    with pytest.raises(
        ConfigError, match=r"is encrypted and no passphrase is given .*LEARNERKIT_SIGNING_KEY_PASSPHRASE"
    ):
        load_signer(key, "LEARNERKIT_SIGNING_KEY")
    with pytest.raises(ConfigError, match="does not decrypt the signing key"):
        load_signer(key, "LEARNERKIT_SIGNING_KEY", b"wrong horse")
    secret = tmp_path / "passphrase"
    secret.write_text("correct horse\n")
    settings = SchedulerSettings.from_env(
        {"LEARNERKIT_SIGNING_KEY": str(key), "LEARNERKIT_SIGNING_KEY_PASSPHRASE_FILE": str(secret)}
    )
    assert settings.signing.passphrase == b"correct horse" and "horse" not in repr(settings)
    signer = load_signer(settings.signing.key, passphrase=settings.signing.passphrase)
    assert signer.public_key.keyid == json.loads(made.output)["keyid"]


def test_a_passphrase_setting_that_cannot_be_used_is_named(tmp_path: Path) -> None:
    both = {"LEARNERKIT_SIGNING_KEY_PASSPHRASE": "a", "LEARNERKIT_SIGNING_KEY_PASSPHRASE_FILE": str(tmp_path / "p")}
    with pytest.raises(ConfigError, match="not both"):
        key_passphrase(both)
    with pytest.raises(ConfigError, match=r"LEARNERKIT_SIGNING_KEY_PASSPHRASE_FILE=.*cannot read"):
        key_passphrase({"LEARNERKIT_SIGNING_KEY_PASSPHRASE_FILE": str(tmp_path / "absent")})
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(ConfigError, match="holds no passphrase"):
        key_passphrase({"LEARNERKIT_SIGNING_KEY_PASSPHRASE_FILE": str(tmp_path / "empty")})
    assert key_passphrase({}) is None


def test_rotating_an_encrypted_key_keeps_it_encrypted(tmp_path: Path) -> None:
    key = tmp_path / "signing-key.pem"
    create_signer(key, b"pass")
    env = {"LEARNERKIT_SIGNING_KEY_PASSPHRASE": "pass"}
    rotated = CliRunner().invoke(cli, ["scheduler", "key", "rotate", "--key", str(key)], env=env)
    assert rotated.exit_code == 0, rotated.output
    assert b"ENCRYPTED PRIVATE KEY" in key.read_bytes()
    refused = CliRunner().invoke(cli, ["scheduler", "key", "rotate", "--key", str(key), "-o", "json"])
    assert refused.exit_code == 1 and "no passphrase is given" in json.loads(refused.output)["message"], refused.output
