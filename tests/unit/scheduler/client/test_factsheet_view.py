"""`job provenance` as a person reads it: every row labelled, every digest whole (folded, never cut) on an 80-column
terminal, and full lines to a pipe or a file; an image without a scan record says how to make one."""

from __future__ import annotations

import io
import json
import re
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from click.testing import CliRunner
from rich.console import Console

from learnerkit.cli import cli
from learnerkit.scheduler.api.app import create_app
from learnerkit.scheduler.provenance.facts import ImageFact
from learnerkit.scheduler.provenance.factsheet import FACTSHEET_JSON
from tests.unit.scheduler.conftest import Tenants
from tests.unit.scheduler.fakefacade import FakeFacade, view
from tests.unit.scheduler.provenance.jobfolder import LEARNER_ID, LEARNER_IMAGE, describe, download, finished_job
from tests.waiting import wait_until

LABELS = (
    "status",
    "tenant",
    "purpose",
    "command",
    "image",
    "image ID",
    "scan",
    "result",
    "data",
    "code",
    "metric",
    "attempt",
)


@pytest.fixture
def url(fake: FakeFacade, tenants: Tenants) -> Iterator[str]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(create_app(fake, tenants.path), log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    wait_until(lambda: server.started, timeout=10, message="uvicorn to start")
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    server.should_exit = True
    thread.join(timeout=10)
    sock.close()


def stored_sheet(tmp_path: Path, fake: FakeFacade, *, scanned: bool = True) -> dict[str, Any]:
    def unscanned(image: str) -> ImageFact:
        return ImageFact(LEARNER_IMAGE, LEARNER_ID) if image == LEARNER_ID else describe(image)

    store, _ = finished_job(tmp_path, images=describe if scanned else unscanned)
    folder = download(store, tmp_path / "job")
    files = {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    fake.add(view("job-7", "team-a", "COMPLETED"), files=files)
    sheet: dict[str, Any] = json.loads(files[FACTSHEET_JSON])
    return sheet


def digests(sheet: dict[str, Any]) -> list[str]:
    found = [m["sha256"] for m in sheet["model"]] + [d["sha256"] for d in sheet["data"]]
    return found + [c["sha256"] for c in sheet["code"] if c["sha256"]] + [sheet["image"]["digest"]["sha256"]]


def label_of(line: str) -> str | None:
    """The label a line starts with (the longest that fits: ``image ID`` before ``image``)."""
    return next((label for label in sorted(LABELS, key=len, reverse=True) if re.match(f"{label}\\s", line)), None)


def provenance(url: str, token: str, *args: str) -> tuple[int, str]:
    env = {"LEARNERKIT_SCHEDULER_URL": url, "LEARNERKIT_TOKEN": token}
    result = CliRunner().invoke(cli, ["job", "provenance", "job-7", *args], env=env)
    return result.exit_code, result.output


def test_to_a_pipe_or_file_every_row_is_one_full_labelled_line(
    url: str, tenants: Tenants, fake: FakeFacade, tmp_path: Path
) -> None:
    sheet = stored_sheet(tmp_path, fake)
    code, out = provenance(url, tenants.a)
    assert code == 0, out
    lines = out.splitlines()
    assert lines[0] == "job job-7: COMPLETED"
    assert all(label_of(line) for line in lines[1:]), out
    assert {label_of(line) for line in lines[1:]} == set(LABELS), out
    for digest in digests(sheet):
        assert any(digest in line for line in lines), (digest, out)
    assert max(len(line) for line in lines) > 80  # nothing wrapped them at the console's default width
    assert re.search(r"^scan\s+passed$", out, re.M), out


def test_on_an_80_column_terminal_every_row_is_labelled_and_digests_fold_whole(
    url: str, tenants: Tenants, fake: FakeFacade, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sheet = stored_sheet(tmp_path, fake)
    screen = io.StringIO()
    monkeypatch.setattr("learnerkit.scheduler.cli_job.console", Console(file=screen, force_terminal=True, width=80))
    code, out = provenance(url, tenants.a)
    assert code == 0, out
    shown = re.sub(r"\x1b\[[0-9;]*m", "", screen.getvalue())
    lines = shown.splitlines()
    assert lines[0].strip() == "job job-7: COMPLETED"
    assert max(len(line) for line in lines) <= 80, shown
    rows = [line for line in lines[1:] if not line.startswith(" ")]
    assert all(label_of(line) for line in rows), shown
    assert {label_of(line) for line in rows} == set(LABELS), shown
    facts = ("model", "data", "code", "metrics")
    assert len(rows) == 7 + sum(len(sheet[f]) for f in facts) + len(sheet["lineage"]["attempts"]), shown
    joined = "".join(shown.split())
    for digest in digests(sheet):
        assert digest in joined, (digest, shown)


def test_an_image_without_a_scan_record_says_how_to_make_one(
    url: str, tenants: Tenants, fake: FakeFacade, tmp_path: Path
) -> None:
    stored_sheet(tmp_path, fake, scanned=False)
    code, out = provenance(url, tenants.a)
    assert code == 0, out
    assert f"no scan record for this image ID (`learnerkit image scan --image {LEARNER_IMAGE}` records one)" in out
