"""`job submit MANIFEST MODEL [--image]` and `job validate` through the real HTTP path (uvicorn on 127.0.0.1)
to a fake facade: the model arrives as a file, is removed after, and what is refused is refused early."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import socket
import threading
import zipfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import uvicorn
from click.testing import CliRunner

from learnerkit.cli import cli
from learnerkit.scheduler.api.app import create_app
from learnerkit.scheduler.api.multipart import BodyTimeouts, receive_submission
from learnerkit.scheduler.config.settings import LimitSettings
from learnerkit.scheduler.errors import InvalidRequestError, JobStateError, ModelTooLargeError, UploadTimeoutError
from tests.unit.scheduler.conftest import Tenants
from tests.unit.scheduler.fakefacade import MANIFEST, FakeFacade
from tests.waiting import wait_until

MODEL_LIMIT = 200_000
REPO = Path(__file__).resolve().parents[4]


@pytest.fixture
def url(fake: FakeFacade, tenants: Tenants) -> Iterator[str]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    app = create_app(fake, tenants.path, limits=LimitSettings(max_model_bytes=MODEL_LIMIT))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    wait_until(lambda: server.started, timeout=10, message="uvicorn to start")
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    server.should_exit = True
    thread.join(timeout=10)
    sock.close()


def run(url: str, token: str, *args: str) -> tuple[int, str]:
    env = {"LEARNERKIT_SCHEDULER_URL": url, "LEARNERKIT_TOKEN": token}
    result = CliRunner().invoke(cli, ["job", *args], env=env)
    return result.exit_code, result.output


@pytest.fixture
def manifest(tmp_path: Path) -> Path:
    path = tmp_path / "manifest.yml"
    path.write_text(MANIFEST.format(gpus=0).replace("gpu_type: nvidia-a100\n", ""))
    return path


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    model = tmp_path / "model"
    (model / "lib").mkdir(parents=True)
    (model / "train.py").write_text("import lib.helper\n")
    (model / "lib" / "helper.py").write_text("VALUE = 42\n")
    return model


def test_submit_with_a_folder_sends_it_zipped(
    url: str, tenants: Tenants, fake: FakeFacade, manifest: Path, folder: Path
) -> None:
    code, out = run(url, tenants.a, "submit", str(manifest), str(folder), "-o", "json")
    assert code == 0, out
    assert json.loads(out)["job_id"] == "job-1"
    [data] = fake.submitted_models
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        assert {name: zf.read(name) for name in zf.namelist()} == {
            "train.py": b"import lib.helper\n",
            "lib/helper.py": b"VALUE = 42\n",
        }


def test_submit_with_a_zip_and_an_image(
    url: str, tenants: Tenants, fake: FakeFacade, manifest: Path, tmp_path: Path
) -> None:
    archive = tmp_path / "model.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("train.py", "print('hi')\n")
    code, out = run(url, tenants.a, "submit", str(manifest), str(archive), "--image", "registry.local/team/img:v1")
    assert code == 0, out
    assert fake.submitted_models == [archive.read_bytes()]
    assert fake.submitted_images == ["registry.local/team/img:v1"]


def test_a_model_over_the_limit_is_refused_before_it_is_sent(
    url: str, tenants: Tenants, fake: FakeFacade, manifest: Path, tmp_path: Path
) -> None:
    archive = tmp_path / "big.zip"
    with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_STORED) as zf:
        zf.writestr("weights.bin", bytes(range(256)) * 4000)
    code, out = run(url, tenants.a, "submit", str(manifest), str(archive))
    assert code == 1
    assert f"the model is over {MODEL_LIMIT} bytes" in out
    assert "LEARNERKIT_MAX_MODEL_BYTES" in out
    assert fake.calls == []


def test_a_refusal_before_the_model_is_read_reaches_the_client(
    url: str, tenants: Tenants, fake: FakeFacade, manifest: Path, tmp_path: Path
) -> None:
    """The scheduler refuses while the model is still coming (the client was told to continue): it reads the
    rest and answers, so the client gets the reason instead of a reset connection."""
    archive = tmp_path / "model.zip"
    with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_STORED) as zf:
        zf.writestr("weights.bin", bytes(range(256)) * 700)
    fake.submit_error = JobStateError("the scheduler is draining")
    code, out = run(url, tenants.a, "submit", str(manifest), str(archive))
    assert code == 1
    assert "the scheduler is draining" in out


def test_unsafe_model_code_is_refused_by_submit_and_validate_alike(
    url: str, tenants: Tenants, fake: FakeFacade, manifest: Path, tmp_path: Path
) -> None:
    archive = tmp_path / "evil.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("../evil.py", "x")
    for args in (
        ("submit", str(manifest), str(archive)),
        ("validate", str(manifest), str(archive), "--root", str(REPO)),
    ):
        code, out = run(url, tenants.a, *args)
        assert code == 1, args
        assert "evil.zip: member '../evil.py'" in out
    assert fake.calls == []


def test_an_empty_folder_and_a_url_requirement_are_refused(
    url: str, tenants: Tenants, fake: FakeFacade, manifest: Path, tmp_path: Path, folder: Path
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    code, out = run(url, tenants.a, "submit", str(manifest), str(empty))
    assert (code, "the model folder has no files" in out) == (1, True)
    (folder / "requirements.txt").write_text("lkgreet==1.0\nhttps://example.invalid/x.whl\n")
    submit = ("submit", str(manifest), str(folder))
    for args in (submit, ("validate", str(manifest), str(folder), "--root", str(REPO))):
        code, out = run(url, tenants.a, *args)
        assert code == 1, out
        assert "requirements.txt line 2: 'https://example.invalid/x.whl': URLs are not allowed" in out
    assert fake.calls == []


def test_validate_shows_the_model_and_its_requirements(manifest: Path, folder: Path) -> None:
    (folder / "requirements.txt").write_text("lkgreet==1.0\n")
    result = CliRunner().invoke(cli, ["job", "validate", str(manifest), str(folder), "--root", str(REPO), "-o", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["model"] == {"files": 3, "bytes": 42, "requirements": ["lkgreet==1.0"]}


def test_an_invalid_image_is_refused_naming_the_option(
    url: str, tenants: Tenants, fake: FakeFacade, manifest: Path
) -> None:
    result = CliRunner().invoke(cli, ["job", "validate", str(manifest), "--image", "Bad Ref", "--root", str(REPO)])
    assert result.exit_code == 1
    assert "command line: --image: 'Bad Ref' is not an image reference" in result.output
    code, out = run(url, tenants.a, "submit", str(manifest), "--image", "Bad Ref")
    assert code == 1
    assert "command line: --image: 'Bad Ref' is not an image reference" in out


def test_a_streamed_model_over_the_limit_stops_as_it_passes_it() -> None:
    """A body that declares no length (or lies) is cut off as it passes the limit, not read to its end."""
    boundary = "b0undary"
    sent = [0]

    async def body() -> AsyncIterator[bytes]:
        yield f'--{boundary}\r\nContent-Disposition: form-data; name="manifest"\r\n\r\nname: x\r\n'.encode()
        yield f'--{boundary}\r\nContent-Disposition: form-data; name="model"; filename="m.zip"\r\n\r\n'.encode()
        for _ in range(100):
            sent[0] += 1
            yield b"\0" * 10_000

    async def read() -> bytes:
        received = await receive_submission(
            f"multipart/form-data; boundary={boundary}", body(), max_manifest_bytes=1000, max_model_bytes=50_000
        )
        assert received.manifest == "name: x"
        assert received.model is not None
        return b"".join([chunk async for chunk in received.model])

    with pytest.raises(ModelTooLargeError, match="over 50000 bytes"):
        asyncio.run(read())
    assert sent[0] == 6


def test_the_model_part_must_come_last() -> None:
    boundary = "b0undary"

    async def body() -> AsyncIterator[bytes]:
        yield f'--{boundary}\r\nContent-Disposition: form-data; name="model"; filename="m.zip"\r\n\r\nPK'.encode()
        yield f'\r\n--{boundary}\r\nContent-Disposition: form-data; name="manifest"\r\n\r\nx\r\n'.encode()
        yield f"--{boundary}--\r\n".encode()

    async def read() -> None:
        await receive_submission(
            f"multipart/form-data; boundary={boundary}", body(), max_manifest_bytes=1000, max_model_bytes=50_000
        )

    with pytest.raises(InvalidRequestError, match="no 'manifest' part before the model"):
        asyncio.run(read())


def stalling_body(boundary: str) -> AsyncIterator[bytes]:
    """A client that sends the manifest and the start of its model, then nothing more."""

    async def body() -> AsyncIterator[bytes]:
        yield f'--{boundary}\r\nContent-Disposition: form-data; name="manifest"\r\n\r\nname: x\r\n'.encode()
        yield f'--{boundary}\r\nContent-Disposition: form-data; name="model"; filename="m.zip"\r\n\r\nPK'.encode()
        await asyncio.Event().wait()  # never set: the client went quiet
        yield b""

    return body()


def test_a_model_upload_that_goes_quiet_ends_at_the_idle_timeout() -> None:
    boundary = "b0undary"

    async def read() -> bytes:
        received = await receive_submission(
            f"multipart/form-data; boundary={boundary}",
            stalling_body(boundary),
            max_manifest_bytes=1000,
            max_model_bytes=50_000,
            timeouts=BodyTimeouts(idle_s=0.2, total_s=3600),
        )
        assert received.model is not None
        return b"".join([chunk async for chunk in received.model])

    with pytest.raises(UploadTimeoutError, match=r"sent nothing for 0\.2 s"):
        asyncio.run(read())


def test_a_model_upload_that_trickles_ends_at_the_total_timeout() -> None:
    boundary = "b0undary"

    async def body() -> AsyncIterator[bytes]:
        yield f'--{boundary}\r\nContent-Disposition: form-data; name="manifest"\r\n\r\nname: x\r\n'.encode()
        yield f'--{boundary}\r\nContent-Disposition: form-data; name="model"; filename="m.zip"\r\n\r\n'.encode()
        while True:  # a byte at a time, never idle for long
            await asyncio.sleep(0)  # only yields to the loop
            yield b"\0"

    async def read() -> int:
        received = await receive_submission(
            f"multipart/form-data; boundary={boundary}",
            body(),
            max_manifest_bytes=1000,
            max_model_bytes=10**12,
            timeouts=BodyTimeouts(idle_s=60, total_s=0.3),
        )
        assert received.model is not None
        return len(b"".join([chunk async for chunk in received.model]))

    with pytest.raises(UploadTimeoutError, match=r"took over 0\.3 s"):
        asyncio.run(read())


def test_a_stalled_upload_is_answered_408_by_a_real_server(fake: FakeFacade, tenants: Tenants) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    app = create_app(fake, tenants.path, limits=LimitSettings(upload_idle_s=0.3))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        wait_until(lambda: server.started, timeout=10, message="uvicorn to start")
        boundary = "b0undary"
        start = (
            f'--{boundary}\r\nContent-Disposition: form-data; name="manifest"\r\n\r\n{MANIFEST}\r\n'
            f'--{boundary}\r\nContent-Disposition: form-data; name="model"; filename="m.zip"\r\n\r\nPK'
        ).encode()
        head = (
            f"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {tenants.a}\r\n"
            f"Content-Type: multipart/form-data; boundary={boundary}\r\nContent-Length: {len(start) + 1000}\r\n\r\n"
        ).encode()
        with socket.create_connection(sock.getsockname(), timeout=30) as conn:
            conn.sendall(head + start)  # then nothing: 1000 bytes are still owed
            answer = b""
            while chunk := conn.recv(65536):
                answer += chunk
                if b"\r\n\r\n" in answer and answer.rstrip().endswith(b"}"):
                    break
        assert answer.startswith(b"HTTP/1.1 408"), answer[:300]
        assert b'"error":"timeout"' in answer and b"sent nothing for 0.3 s" in answer
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


def test_a_client_gone_during_an_upload_is_logged_in_one_line(
    fake: FakeFacade, tenants: Tenants, caplog: pytest.LogCaptureFixture
) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    app = create_app(fake, tenants.path)
    server = uvicorn.Server(uvicorn.Config(app, log_config=None, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        wait_until(lambda: server.started, timeout=10, message="uvicorn to start")
        boundary = "b0undary"
        start = (
            f'--{boundary}\r\nContent-Disposition: form-data; name="manifest"\r\n\r\n{MANIFEST}\r\n'
            f'--{boundary}\r\nContent-Disposition: form-data; name="model"; filename="m.zip"\r\n\r\nPK'
        ).encode()
        head = (
            f"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {tenants.a}\r\n"
            f"Content-Type: multipart/form-data; boundary={boundary}\r\nContent-Length: {len(start) + 1000}\r\n\r\n"
        ).encode()
        with caplog.at_level(logging.INFO):
            with socket.create_connection(sock.getsockname(), timeout=30) as conn:
                conn.sendall(head + start)
                wait_until(lambda: ("submit", "team-a") in fake.calls, timeout=30, message="the model to be read")
            # and then the client is gone, halfway through its model
            wait_until(
                lambda: any("disconnected during the upload" in r.getMessage() for r in caplog.records),
                timeout=30,
                message="the disconnect to be logged",
            )
        noted = [r for r in caplog.records if r.levelno >= logging.WARNING or r.exc_info]
        assert [r.getMessage() for r in noted if "disconnected" in r.getMessage()] == [
            "team-a: the client disconnected during the upload; its model upload is aborted"
        ], [r.getMessage() for r in noted]
        assert all(r.exc_info is None for r in noted), "no traceback for a client that went away"
        assert not any("Exception in ASGI application" in r.getMessage() for r in noted)
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
