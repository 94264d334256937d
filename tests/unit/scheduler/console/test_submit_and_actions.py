"""The submit page and the job actions over the fake facade (FastAPI's TestClient): the problems worded as the
CLI words them, nothing queued on error or without the CSRF token, uploads over the limits refused before they
are stored, each action confirmed, refused for another tenant's job and where the job's state does not allow it.
The browser tests against a real scheduler are in tests/integration/console."""

from __future__ import annotations

import io
import random
import re
import zipfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient

from learnerkit.cli import cli
from learnerkit.scheduler.api.app import create_app
from learnerkit.scheduler.config.settings import LimitSettings
from learnerkit.scheduler.console.actions import ACTIONS, done_notice, evaluations_of
from learnerkit.scheduler.console.origin import own_names
from learnerkit.scheduler.console.pages import ConsoleSettings
from learnerkit.scheduler.modelcode.archive import zip_folder
from tests.unit.scheduler.conftest import Tenants
from tests.unit.scheduler.fakefacade import MANIFEST, FakeFacade, view

GOOD = MANIFEST.format(gpus=1)
TWO_ERRORS = MANIFEST.format(gpus=-1).replace("memory: 1Gb", "memory: lots")
EVALUATIONS = """\
evaluations:
  - name: digits-robustness
    kind: robustness
    data: {file: digits-eval.csv, label: label}
    attacks: [fgsm]
    epsilons: [0.1]
"""
MAX_MODEL = 4096


def _zip() -> bytes:
    """The same bytes at every call: a member's time is fixed (by name alone it would be the call's, and two calls
    either side of a two-second step of the zip clock would differ)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr(zipfile.ZipInfo("train.py", date_time=(2026, 1, 1, 0, 0, 0)), "print('training')\n")
    return buffer.getvalue()


@pytest.fixture
def fake() -> FakeFacade:
    facade = FakeFacade()
    facade.add(view("a-1", "team-a", "PROCESSING"))
    facade.add(view("b-1", "team-b", "PROCESSING"))
    return facade


class Browser:
    """A TestClient logged in as team-a, as a browser would be, knowing its session's CSRF token."""

    def __init__(self, client: TestClient, csrf: str) -> None:
        self.client = client
        self.csrf = csrf

    def submit(
        self,
        manifest: str = "",
        *,
        csrf: str | None = None,
        folder: list[tuple[str, bytes]] | None = None,
        **files: tuple[str, bytes],
    ) -> httpx.Response:
        data = {"csrf": self.csrf if csrf is None else csrf, "manifest": manifest, "image": ""}
        # In the page's order: the folder's files, then the zip last, as the API reads it; a file input left empty
        # sends one empty part.
        uploads = [("manifest_file", files.get("manifest_file", ("", b"")))]
        uploads += [("model_folder", part) for part in folder or [("", b"")]]
        uploads += [("model", files.get("model", ("", b"")))]
        return self.client.post("/ui/submit", data=data, files=uploads, follow_redirects=False)

    def act(self, job_id: str, name: str, **fields: str) -> httpx.Response:
        form = {"csrf": self.csrf} | fields
        return self.client.post(f"/ui/jobs/{job_id}/actions/{name}", data=form, follow_redirects=False)


@pytest.fixture
def browser(fake: FakeFacade, tenants: Tenants) -> Iterator[Browser]:
    settings = ConsoleSettings(own_names("127.0.0.1", ("testserver",)))
    app = create_app(fake, tenants.path, console=settings, limits=LimitSettings(max_model_bytes=MAX_MODEL))
    with TestClient(app) as client:
        login = client.get("/ui/login")
        token = re.search(r'name="csrf" value="([^"]+)"', login.text)
        assert token is not None
        client.post("/ui/login", data={"csrf": token.group(1), "token": tenants.a})
        page = client.get("/ui/submit")
        csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
        assert page.status_code == 200 and csrf is not None
        yield Browser(client, csrf.group(1))


def _problems(html: str) -> list[str]:
    return [_unescape(p) for p in re.findall(r"<li><code>(.*?)</code></li>", html, re.S)]


def _unescape(text: str) -> str:
    return (
        text.replace("&#39;", "'").replace("&#34;", '"').replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
    )


def test_a_manifest_with_two_errors_shows_both_as_the_cli_words_them_and_queues_nothing(
    browser: Browser, fake: FakeFacade, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "bad.yml").write_text(TWO_ERRORS)
    monkeypatch.chdir(tmp_path)
    validated = CliRunner().invoke(cli, ["job", "validate", "bad.yml", "--root", str(Path(__file__).parents[4])])
    assert validated.exit_code == 1
    cli_lines = [line for line in validated.output.splitlines() if line.startswith("bad.yml:")]
    assert len(cli_lines) == 2, validated.output
    jobs_before = set(fake.jobs)

    answer = browser.submit(manifest_file=("bad.yml", TWO_ERRORS.encode()))
    assert answer.status_code == 422
    assert _problems(answer.text) == cli_lines
    assert "2 problems in the manifest; nothing was queued." in answer.text
    typed = browser.submit(TWO_ERRORS.replace("\n", "\r\n"))
    assert _problems(typed.text) == [line.replace("bad.yml", "manifest.yml") for line in cli_lines]
    assert "memory: lots" in typed.text, "the text typed is kept for its fixing"
    assert set(fake.jobs) == jobs_before and fake.submitted_models == []


def test_a_good_manifest_and_its_zip_queue_a_job_and_lead_to_its_page(browser: Browser, fake: FakeFacade) -> None:
    answer = browser.submit(GOOD, model=("model.zip", _zip()))
    assert answer.status_code == 303, answer.text
    job_id = answer.headers["location"].rsplit("/", 1)[-1]
    assert fake.jobs[job_id].view.tenant == "team-a" and fake.submitted_models == [_zip()]
    assert job_id in browser.client.get("/ui/jobs").text
    no_model = browser.submit(GOOD)
    assert no_model.status_code == 303 and fake.submitted_models == [_zip()], "an empty file input is no model"


def test_a_folder_is_zipped_as_the_cli_zips_it(browser: Browser, fake: FakeFacade, tmp_path: Path) -> None:
    folder = tmp_path / "digits"
    (folder / "lib").mkdir(parents=True)
    (folder / "train.py").write_text("print('training')\n" * 500)
    (folder / "lib" / "net.py").write_bytes(bytes(range(256)) * 4)
    # As a browser sends a chosen folder: each file by its path under the folder's parent.
    sent = [(f"digits/{p.relative_to(folder).as_posix()}", p.read_bytes()) for p in folder.rglob("*") if p.is_file()]
    answer = browser.submit(GOOD, folder=sent)
    assert answer.status_code == 303, answer.text
    zip_folder(folder, tmp_path / "cli.zip")
    with (
        zipfile.ZipFile(tmp_path / "cli.zip") as cli_zip,
        zipfile.ZipFile(io.BytesIO(fake.submitted_models[0])) as ours,
    ):
        assert sorted(ours.namelist()) == sorted(cli_zip.namelist()) == ["lib/net.py", "train.py"]
        assert all(ours.read(name) == cli_zip.read(name) for name in cli_zip.namelist())
    both = browser.submit(GOOD, folder=sent, model=("model.zip", _zip()))
    assert both.status_code == 400 and "choose a zip or a folder, not both" in both.text
    unsafe = browser.submit(GOOD, folder=[("digits/../etc/passwd", b"x")])
    assert unsafe.status_code == 400 and "the model folder: &#39;digits/../etc/passwd&#39; has an empty" in unsafe.text
    noise = random.Random(38)
    large = [(f"digits/{n}.bin", noise.randbytes(2048)) for n in range(4)]  # 8 KiB that deflate cannot shrink
    over = browser.submit(GOOD, folder=large)
    assert over.status_code == 413 and f"the model is over {MAX_MODEL} bytes" in over.text
    assert len(fake.submitted_models) == 1, "nothing but the good folder was submitted"


def test_a_submit_without_the_csrf_token_is_refused_and_queues_nothing(browser: Browser, fake: FakeFacade) -> None:
    for csrf in ("", "forged"):
        answer = browser.submit(GOOD, csrf=csrf, model=("model.zip", _zip()))
        assert answer.status_code == 403
        assert "CSRF token" in answer.text
    assert ("submit", "team-a") not in fake.calls


def test_a_model_over_the_limit_is_refused_before_it_is_stored(browser: Browser, fake: FakeFacade) -> None:
    streamed = browser.submit(GOOD, model=("model.zip", b"x" * (MAX_MODEL + 1)))
    assert streamed.status_code == 413
    assert f"the model is over {MAX_MODEL} bytes" in streamed.text
    declared = browser.submit(GOOD, model=("model.zip", b"x" * (MAX_MODEL + 1024 * 1024)))
    assert declared.status_code == 413
    assert ("submit", "team-a") not in fake.calls and fake.submitted_models == []


def test_an_action_asks_first_then_does_it_with_the_same_form(browser: Browser, fake: FakeFacade) -> None:
    asked = browser.act("a-1", "halt")
    assert asked.status_code == 200 and fake.jobs["a-1"].view.status == "PROCESSING"
    form = re.search(r'<form class="confirm" method="post" action="([^"]+)">(.*?)</form>', asked.text, re.S)
    assert form is not None and form.group(1) == "/ui/jobs/a-1/actions/halt"
    assert f'name="csrf" value="{browser.csrf}"' in form.group(2) and 'name="confirmed" value="yes"' in form.group(2)
    done = browser.act("a-1", "halt", confirmed="yes")
    assert done.headers["location"] == "/ui/jobs/a-1?done=halt"
    assert fake.jobs["a-1"].view.status == "HALTED"
    assert ACTIONS["halt"].done in browser.client.get("/ui/jobs/a-1?done=halt").text
    browser.act("a-1", "resume", confirmed="yes")
    assert fake.jobs["a-1"].view.status == "QUEUED"
    browser.act("a-1", "cancel", confirmed="yes")
    assert fake.jobs["a-1"].view.status == "CANCELLED"
    gone = browser.act("a-1", "delete", confirmed="yes")
    assert gone.headers["location"] == "/ui/jobs" and "a-1" not in fake.jobs


def test_a_state_that_does_not_allow_it_is_refused_in_the_facades_words(browser: Browser, fake: FakeFacade) -> None:
    refused = browser.act("a-1", "resume", confirmed="yes")
    assert refused.status_code == 409
    assert "job a-1 is PROCESSING: cannot make it QUEUED" in refused.text
    assert fake.jobs["a-1"].view.status == "PROCESSING"


def test_another_tenants_job_and_a_missing_token_change_nothing(browser: Browser, fake: FakeFacade) -> None:
    for name in ACTIONS:
        other = browser.act("b-1", name, confirmed="yes")
        assert other.status_code == 404 and "There is no job" in other.text, name
        bare = browser.client.post(f"/ui/jobs/a-1/actions/{name}", data={"confirmed": "yes"})
        assert bare.status_code == 403, name
    assert fake.jobs["b-1"].view.status == fake.jobs["a-1"].view.status == "PROCESSING"
    assert browser.act("a-1", "explode").status_code == 404


def test_evaluate_again_offers_the_manifests_evaluations_and_names_a_bad_line(
    browser: Browser, fake: FakeFacade
) -> None:
    fake.add(view("a-7", "team-a", "COMPLETED"))
    fake.jobs["a-7"].manifest = GOOD + EVALUATIONS
    asked = browser.act("a-7", "evaluate")
    assert "digits-robustness" in asked.text and 'name="evaluations"' in asked.text
    bad = browser.act("a-7", "evaluate", confirmed="yes", evaluations=EVALUATIONS.replace("[0.1]", "[-1]"))
    assert bad.status_code == 422
    assert [p.split(": ", 2)[:2] for p in _problems(bad.text)] == [["evaluations.yml:6", "evaluations[0].epsilons[0]"]]
    assert fake.jobs["a-7"].view.evaluations == ()
    good = browser.act("a-7", "evaluate", confirmed="yes", evaluations=EVALUATIONS)
    assert good.status_code == 303
    assert [e.name for e in fake.jobs["a-7"].view.evaluations] == ["digits-robustness"]


def test_evaluations_of_a_manifest_and_the_done_notices() -> None:
    assert evaluations_of(GOOD + EVALUATIONS).startswith("evaluations:\n- name: digits-robustness")
    assert evaluations_of(GOOD) == "" and evaluations_of("") == ""
    assert done_notice("halt") == ACTIONS["halt"].done and done_notice("<script>") == ""
