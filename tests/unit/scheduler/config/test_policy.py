"""What a tenant may submit under the scheduler's settings: every refusal names its field."""

from __future__ import annotations

import textwrap

import pytest

from learnerkit.common.yamlfile import format_field_path
from learnerkit.scheduler.config.policy import SubmitPolicy, check_admissible, check_submission, origin
from learnerkit.scheduler.core.options import derive_instance
from learnerkit.scheduler.errors import ManifestError
from learnerkit.scheduler.manifest.parser import parse_manifest

STORE = "http://127.0.0.1:8333"
POLICY = SubmitPolicy(object_stores=(STORE,), host_paths=("/srv/datasets",))


def job(*, learners: int = 1, auth_url: str = STORE, extra: str = "", stores: str = "") -> str:
    return (
        textwrap.dedent(
            f"""\
        name: j
        cpus: 1
        memory: 1Gb
        learners: {learners}
        data_stores:
          - id: s3
            type: s3_datastore
            training_data: {{container: data}}
            training_results: {{container: results}}
            connection: {{auth_url: "{auth_url}", user_name: a, password: b}}
        """
        )
        + stores
        + textwrap.dedent(extra)
        + "framework: {name: custom, version: img, command: run}\n"
    )


def refusals(text: str, tenant: str = "team-a", policy: SubmitPolicy = POLICY) -> dict[str, str]:
    with pytest.raises(ManifestError) as caught:
        check_submission(parse_manifest(text), tenant, policy, "m.yml")
    return {format_field_path(p.loc): p.message for p in caught.value.problems}


def test_a_manifest_within_the_settings_passes() -> None:
    check_submission(parse_manifest(job(extra="learnerkit: {tenant: team-a, priority: -5}\n")), "team-a", POLICY, "m")


def test_more_learners_than_the_setting_are_refused_and_so_is_such_a_stored_job() -> None:
    assert "at most 64 learners" in refusals(job(learners=10**20))["learners"]
    with pytest.raises(ManifestError, match="learners: at most 64"):
        check_admissible(parse_manifest(job(learners=65)), POLICY, "m.yml")


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:22", "http://localhost:8333", "https://127.0.0.1:8333", "http://10.0.0.1:8333"]
)
def test_an_object_store_outside_the_allowlist_is_refused(url: str) -> None:
    assert (
        "not an object store this scheduler allows: http://127.0.0.1:8333"
        in (refusals(job(auth_url=url))["data_stores[0].connection.auth_url"])
    )


def test_without_an_allowlist_every_object_store_is_refused_naming_the_setting() -> None:
    message = refusals(job(), policy=SubmitPolicy())["data_stores[0].connection.auth_url"]
    assert "LEARNERKIT_OBJECT_STORES" in message


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://S3.Example:80/path", "http://s3.example:80"),
        ("http://s3.example", "http://s3.example:80"),
        ("https://s3.example", "https://s3.example:443"),
        ("http://user@h:9000", "http://h:9000"),
        ("ftp://h", None),
        ("http://h:99999", None),
    ],
)
def test_origins_are_compared_normalised(url: str, expected: str | None) -> None:
    assert origin(url) == expected


def test_another_tenant_and_a_priority_outside_the_tenants_range_are_refused() -> None:
    text = job(extra="learnerkit: {tenant: team-b, priority: 5}\n")
    assert refusals(text) == {
        "learnerkit.tenant": "'team-b' is not your tenant ('team-a')",
        "learnerkit.priority": "tenant 'team-a' may use priorities -1000..0; got 5",
    }
    check_submission(
        parse_manifest(text),
        "team-b",
        SubmitPolicy(object_stores=POLICY.object_stores, priorities={"team-b": (0, 10)}),
        "m",
    )


VOLUME = """\
  - id: vol
    type: mount_volume
    connection: {{type: host_mount, path: "{path}"}}
"""


@pytest.mark.parametrize("path", ["/etc", "/srv/datasets/../../etc", "/srv/datasets-other"])
def test_host_mounts_outside_the_allowed_folders_are_refused(path: str) -> None:
    message = refusals(job(stores=VOLUME.format(path=path)))["data_stores[1].connection.path"]
    assert "not under a host folder this scheduler allows: /srv/datasets" in message


def test_host_mounts_are_refused_when_no_folder_is_allowed() -> None:
    policy = SubmitPolicy(object_stores=POLICY.object_stores)
    message = refusals(job(stores=VOLUME.format(path="/srv/datasets/a")), policy=policy)[
        "data_stores[1].connection.path"
    ]
    assert "host mounts are off" in message


def test_the_instance_id_depends_on_where_the_jobs_are_kept_not_how_endpoints_are_ordered() -> None:
    one = derive_instance("10.0.0.1:2379,10.0.0.2:2379", "/learnerkit/jobs")
    assert one == derive_instance("10.0.0.2:2379, 10.0.0.1:2379", "/learnerkit/jobs")
    assert one != derive_instance("10.0.0.1:2379,10.0.0.2:2379", "/other/jobs")
    assert one.startswith("lk-")


def test_opting_out_of_preemption_is_refused_naming_the_field_unless_the_tenant_may() -> None:
    text = job(extra="learnerkit: {preemptible: false}\n")
    assert refusals(text) == {
        "learnerkit.preemptible": "tenant 'team-a' may not opt out of preemption (the tenants file's opt_out); "
        "remove it"
    }
    allowed = SubmitPolicy(object_stores=POLICY.object_stores, opt_out={"team-a": True})
    check_submission(parse_manifest(text), "team-a", allowed, "m")
    check_submission(parse_manifest(job(extra="learnerkit: {preemptible: true}\n")), "team-a", POLICY, "m")
