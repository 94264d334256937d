"""The Compare page's logic: the ids of its address, flattening, only the rows that differ, the 50 cap; and the page
over the fake facade (FastAPI's TestClient): what differs marked, another tenant's job refused as an unknown one,
the curves' JSON. The browser tests against a real scheduler are in tests/integration/console/test_compare.py."""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from learnerkit.scheduler.api.app import create_app
from learnerkit.scheduler.console.compare_views import (
    ABSENT,
    MAX_JOBS,
    PROVENANCE_FILE,
    JobFacts,
    TooManyJobs,
    differences,
    flatten,
    job_ids,
    provenance_sections,
    read_envelope,
)
from learnerkit.scheduler.console.origin import own_names
from learnerkit.scheduler.console.pages import ConsoleSettings
from learnerkit.scheduler.facade import SweepOfJob, SweepView, TrialView
from tests.unit.scheduler.conftest import Tenants
from tests.unit.scheduler.fakefacade import FakeFacade, view

MANIFEST = """\
name: mnist
cpus: 0.5
learners: 1
data_stores:
  - id: s3
    type: s3_datastore
    training_data: {container: data}
framework: {name: pytorch, version: "2.13", command: python train.py}
"""


def test_the_ids_come_in_order_each_once_from_commas_spaces_and_repeats() -> None:
    assert job_ids(["job-b,job-a", " job-c  job-a", "", "job-d,"]) == ["job-b", "job-a", "job-c", "job-d"]


def test_fifty_jobs_compare_and_fifty_one_are_refused_with_the_count() -> None:
    assert len(job_ids([",".join(f"job-{n}" for n in range(MAX_JOBS))])) == MAX_JOBS
    with pytest.raises(TooManyJobs, match=r"at most 50 jobs; the address names 51"):
        job_ids([",".join(f"job-{n}" for n in range(MAX_JOBS + 1))])


def test_flatten_joins_mappings_by_dots_and_lists_by_index() -> None:
    doc = {
        "name": "mnist",
        "cpus": 0.5,
        "preemptible": True,
        "gpu_type": None,
        "data_stores": [{"id": "s3", "connection": {"auth_url": "http://x"}}, {"id": "b"}],
        "empty": [],
        "nothing": {},
    }
    assert flatten(doc) == {
        "name": "mnist",
        "cpus": "0.5",
        "preemptible": "true",
        "gpu_type": "null",
        "data_stores[0].id": "s3",
        "data_stores[0].connection.auth_url": "http://x",
        "data_stores[1].id": "b",
        "empty": "[]",
        "nothing": "{}",
    }


def _facts(job_id: str, **sections: dict[str, str]) -> JobFacts:
    return JobFacts(job_id, "mnist", "COMPLETED", sections)


def test_only_the_rows_that_differ_are_shown_and_all_on_asking() -> None:
    jobs = [
        _facts("a", Manifest={"name": "m", "cpus": "1"}, Parameters={"lr": "0.1", "width": "8"}),
        _facts("b", Manifest={"name": "m", "cpus": "1"}, Parameters={"lr": "0.2", "width": "8"}),
        _facts("c", Manifest={"name": "m", "cpus": "1", "gpus": "1"}, Parameters={"lr": "0.1", "width": "8"}),
    ]
    by_title = {s.title: s for s in differences(jobs)}
    assert [(r.key, r.values) for r in by_title["Manifest"].rows] == [("gpus", (ABSENT, ABSENT, "1"))]
    assert [(r.key, r.values) for r in by_title["Parameters"].rows] == [("lr", ("0.1", "0.2", "0.1"))]
    assert (by_title["Manifest"].total, by_title["Manifest"].differing) == (3, 1)
    assert by_title["Images"].rows == () and by_title["Images"].total == 0
    every = {s.title: s for s in differences(jobs, show_all=True)}
    assert [(r.key, r.differs) for r in every["Parameters"].rows] == [("lr", True), ("width", False)]


def test_jobs_that_agree_everywhere_show_no_row() -> None:
    same = {"Manifest": {"name": "m"}, "Evaluation": {"model verdict": "accepted"}}
    assert all(not s.rows for s in differences([_facts("a", **same), _facts("b", **same)]))


def _envelope(statement: dict[str, object], key_ids: tuple[str, ...] = ("k1",)) -> bytes:
    payload = base64.b64encode(json.dumps(statement).encode()).decode()
    signatures = [{"keyid": k, "sig": "c2ln"} for k in key_ids]
    return json.dumps(
        {"payloadType": "application/vnd.in-toto+json", "payload": payload, "signatures": signatures}
    ).encode()


def _statement(learner_digest: str, data_digest: str) -> dict[str, object]:
    return {
        "subject": [{"name": "attempt-1/learner-1/results/a", "digest": {"sha256": "1"}}] * 3,
        "predicate": {
            "buildDefinition": {
                "internalParameters": {"jobId": "j", "status": "COMPLETED", "complete": True},
                "resolvedDependencies": [
                    {
                        "name": "learner-image",
                        "uri": "docker-image://learnerkit/pytorch:2.13",
                        "digest": {"sha256": learner_digest},
                    },
                    {"name": "data:s3://data/train.csv", "digest": {"sha256": data_digest}},
                    {"name": "model/model.zip", "digest": {"sha256": "m"}},
                    {"name": "pypi:numpy", "digest": {"sha256": "n"}},
                ],
            }
        },
    }


def test_the_provenance_gives_images_by_digest_data_digests_and_its_signature() -> None:
    sections = provenance_sections(read_envelope(_envelope(_statement("abc", "d1"))))
    assert sections["Images"] == {
        "learner-image": "sha256:abc",
        "learner-image reference": "learnerkit/pytorch:2.13",
    }
    assert sections["Data"] == {"s3://data/train.csv": "sha256:d1", "model/model.zip": "sha256:m"}
    assert sections["Provenance"] == {
        "signed": "yes",
        "key id": "k1",
        "subjects": "3",
        "complete": "true",
        "ended": "COMPLETED",
    }
    unsigned = provenance_sections(read_envelope(_envelope(_statement("abc", "d1"), key_ids=())))
    assert (unsigned["Provenance"]["signed"], unsigned["Provenance"]["key id"]) == ("no", ABSENT)
    with pytest.raises(ValueError, match="not a DSSE envelope"):
        read_envelope(b'{"payload": "%%%"}')


@pytest.fixture
def fake() -> FakeFacade:
    facade = FakeFacade()
    sweep = "sweep-0a1b2c3d"
    trials = []
    for index, lr in enumerate(("0.1", "0.2")):
        job_id = f"{sweep}-t{index:04d}"
        facade.add(
            view(job_id, "team-a", "COMPLETED", sweep=SweepOfJob(sweep, index), model="accepted"),
            files={PROVENANCE_FILE: _envelope(_statement("abc", "d1"))},
            metrics=b"".join(
                b'{"step": %d, "time": %d, "values": {"loss": %f, "acc": %f}}\n' % (s, s, 1 / s, s / 100)
                for s in range(1, 101)
            ),
        )
        facade.jobs[job_id].manifest = MANIFEST
        trials.append(TrialView(index, job_id, "completed", 1, 1, (0.5,), "", parameters={"lr": lr, "width": 8}))
    facade.sweeps[sweep] = SweepView(
        sweep, "team-a", "done", "", "asha", "loss", "minimize", "epochs", (1,), 2, 2, "", trials=tuple(trials)
    )
    facade.add(view("job-plain", "team-a", "QUEUED"))
    facade.jobs["job-plain"].manifest = MANIFEST.replace("cpus: 0.5", "cpus: 2")
    facade.add(view("job-of-b", "team-b", "COMPLETED"))
    facade.jobs["job-of-b"].manifest = MANIFEST
    return facade


@pytest.fixture
def browser(fake: FakeFacade, tenants: Tenants) -> Iterator[TestClient]:
    settings = ConsoleSettings(own_names("127.0.0.1", ("testserver",)))
    with TestClient(create_app(fake, tenants.path, console=settings)) as client:
        form = client.get("/ui/login")
        csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
        assert csrf is not None
        client.post("/ui/login", data={"csrf": csrf.group(1), "token": tenants.a})
        yield client


def _differing(html: str) -> list[str]:
    return re.findall(r'<tr class="differs" data-key="([^"]+)">', html)


def test_two_trials_differing_in_one_parameter_show_that_key_alone(browser: TestClient) -> None:
    page = browser.get("/ui/compare?jobs=sweep-0a1b2c3d-t0000,sweep-0a1b2c3d-t0001")
    assert page.status_code == 200
    assert _differing(page.text) == ["lr"]
    every = browser.get("/ui/compare?jobs=sweep-0a1b2c3d-t0000,sweep-0a1b2c3d-t0001&show=all")
    assert _differing(every.text) == ["lr"] and 'data-key="width"' in every.text and 'data-key="cpus"' in every.text


def test_a_plain_job_beside_a_trial_differs_in_its_manifest_status_and_missing_provenance(browser: TestClient) -> None:
    page = browser.get("/ui/compare?jobs=sweep-0a1b2c3d-t0000,job-plain")
    differing = _differing(page.text)
    assert "cpus" in differing and "lr" in differing and "model verdict" in differing
    assert "job-plain: not a sweep&#39;s trial: no parameters" in page.text
    assert "job-plain: no provenance yet" in page.text


def test_the_jobs_lists_ticks_and_the_add_field_lead_to_one_shareable_address(browser: TestClient) -> None:
    ticked = browser.get("/ui/compare?jobs=job-plain&jobs=sweep-0a1b2c3d-t0000", follow_redirects=False)
    assert ticked.status_code == 303
    assert ticked.headers["location"] == "/ui/compare?jobs=job-plain,sweep-0a1b2c3d-t0000"
    added = browser.get("/ui/compare?jobs=job-plain&add=+sweep-0a1b2c3d-t0001+", follow_redirects=False)
    assert added.headers["location"] == "/ui/compare?jobs=job-plain,sweep-0a1b2c3d-t0001"


def test_another_tenants_job_reads_as_an_unknown_one(browser: TestClient) -> None:
    theirs = browser.get("/ui/compare?jobs=job-plain,job-of-b")
    none = browser.get("/ui/compare?jobs=job-plain,job-nobody")
    assert theirs.status_code == none.status_code == 404
    assert "There is no job &#39;job-of-b&#39;." in theirs.text
    assert theirs.text.replace("job-of-b", "X") == none.text.replace("job-nobody", "X")
    curves = browser.get("/ui/compare/series?jobs=job-plain,job-of-b")
    assert curves.status_code == 404 and "job-of-b" not in curves.text


def test_more_than_fifty_jobs_are_refused(browser: TestClient) -> None:
    page = browser.get("/ui/compare?jobs=" + ",".join(f"job-{n}" for n in range(51)))
    assert page.status_code == 400 and "at most 50 jobs; the address names 51" in page.text


def test_the_curves_come_per_metric_with_a_thinned_series_per_job(browser: TestClient) -> None:
    jobs = "sweep-0a1b2c3d-t0000,sweep-0a1b2c3d-t0001,job-plain"
    whole = browser.get(f"/ui/compare/series?jobs={jobs}&points=10").json()
    assert (whole["jobs"], whole["without"]) == (jobs.split(","), ["job-plain"])
    assert list(whole["series"]) == ["acc", "loss"]
    loss = whole["series"]["loss"]
    assert [s["job_id"] for s in loss] == jobs.split(",")[:2]
    assert [s["in_range"] for s in loss] == [100, 100]
    assert all(2 <= len(s["x"]) <= 10 for s in loss), "each job's series thinned to the points asked for"
    zoomed = browser.get(f"/ui/compare/series/loss?jobs={jobs}&points=100&from=10&to=19").json()
    assert list(zoomed["series"]) == ["loss"]
    assert [s["x"] for s in zoomed["series"]["loss"]] == [list(range(10, 20))] * 2
    assert browser.get(f"/ui/compare/series/nothing?jobs={jobs}").json()["series"] == {"nothing": []}
