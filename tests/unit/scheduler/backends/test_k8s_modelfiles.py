"""Sending a version's files over the exec channel: the pod's receiver gets exactly the tar, in binary frames, and a
receiver that refuses is reported with its words. The channel is faked; the receiver's own code runs here on what
would have crossed it (the real channel: tests/k8s/test_k8s_model_serve.py)."""

from __future__ import annotations

import io
import sys
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client import ApiClient

from learnerkit.scheduler.backends import k8s_modelfiles
from learnerkit.scheduler.backends import k8s_modelobjects as mo
from learnerkit.scheduler.errors import BackendError


class Channel:
    """The websocket client `stream(..., _preload_content=False)` returns; on `run_forever` the receiver's code
    runs on the bytes written, as the pod would."""

    def __init__(self, incoming: Path, command: list[str], cut: bool = False) -> None:
        self.incoming, self.command, self.cut = incoming, command, cut
        self.written: list[bytes] = []
        self.returncode: int | None = None
        self.stderr = b""
        self.closed = False

    def write_stdin(self, data: bytes) -> None:
        assert isinstance(data, bytes), "binary frames only"
        self.written.append(data[: len(data) // 2] if self.cut else data)

    def run_forever(self, timeout: float) -> None:
        code = self.command[2].replace(mo.INCOMING, str(self.incoming))
        stdin, argv = sys.stdin, sys.argv
        sys.stdin, sys.argv = io.TextIOWrapper(io.BytesIO(b"".join(self.written))), ["-c", *self.command[3:]]
        try:
            exec(compile(code, "receive", "exec"), {})
            self.returncode = 0
        except SystemExit as e:
            self.returncode, self.stderr = 1, str(e.code).encode()
        except Exception as e:  # what Python prints last as it exits 1 on an error
            self.returncode, self.stderr = 1, f"{type(e).__name__}: {e}".encode()
        finally:
            sys.stdin, sys.argv = stdin, argv

    def read_stderr(self, timeout: float) -> bytes:
        return self.stderr

    def close(self) -> None:
        self.closed = True


CUT: list[bool] = []
"""Set to make the next channel lose half of every frame (a connection cut short)."""


@pytest.fixture
def channels(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[tuple[Channel, dict[str, Any]]]:
    opened: list[tuple[Channel, dict[str, Any]]] = []

    def stream(_call: Any, pod: str, namespace: str, **kw: Any) -> Channel:
        (tmp_path / "incoming" / "files").mkdir(parents=True, exist_ok=True)
        channel = Channel(tmp_path / "incoming", kw["command"], cut=bool(CUT))
        opened.append((channel, {"pod": pod, "namespace": namespace, **kw}))
        return channel

    monkeypatch.setattr(k8s_modelfiles, "stream", stream)
    return opened


def folders(tmp_path: Path, weights: bytes) -> tuple[Path, Path]:
    model, keys = tmp_path / "model", tmp_path / "keys"
    (model / "attempt-1").mkdir(parents=True)
    (model / "attempt-1" / "model.pt").write_bytes(weights)
    keys.mkdir()
    (keys / "k.pub").write_text("key")
    return model, keys


def test_the_files_arrive_whole_through_the_receive_container(
    tmp_path: Path, channels: list[tuple[Channel, dict[str, Any]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(k8s_modelfiles, "CHUNK", 4096)  # several frames
    weights = bytes(range(256)) * 100
    k8s_modelfiles.send_files(ApiClient(), "serving", "lk-model-digits-x", *folders(tmp_path, weights))
    [(channel, call)] = channels
    assert (call["pod"], call["namespace"], call["container"]) == ("lk-model-digits-x", "serving", "receive")
    assert call["stdin"] is True and call["tty"] is False and call["binary"] is True
    assert len(channel.written) > 1 and int(call["command"][3]) == sum(map(len, channel.written))
    assert (tmp_path / "incoming" / "files" / "model" / "attempt-1" / "model.pt").read_bytes() == weights
    assert (tmp_path / "incoming" / mo.COMPLETE_FILE).exists() and channel.closed


def test_a_stream_cut_short_is_refused_by_the_receiver_and_named(
    tmp_path: Path, channels: list[tuple[Channel, dict[str, Any]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys.modules[__name__], "CUT", [True])
    with pytest.raises(BackendError, match=r"sending the model's files into Pod serving/p: exit 1: \w+Error"):
        k8s_modelfiles.send_files(ApiClient(), "serving", "p", *folders(tmp_path, bytes(50_000)))
    assert not (tmp_path / "incoming" / mo.COMPLETE_FILE).exists(), "no file says the files are complete"
    assert channels[0][0].closed
