"""The CLI's machine output and its error reporting (no engine needed for these commands)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from learnerkit.cli import cli
from tests.unit.conftest import VALID_YAML, MakeProject


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


def test_render_json_holds_each_dockerfile(make_project: MakeProject) -> None:
    root = make_project()
    code, out = run("image", "render", "toy", "--root", str(root), "--no-ca-bundle", "-o", "json")
    assert code == 0, out
    data = json.loads(out)
    assert [item["spec"] for item in data] == ["toy:1.0-cpu", "toy:1.0-cuda"]
    assert "FROM example.org/cuda-base:1 AS learner" in data[1]["dockerfile"]


def test_render_dest_writes_files_atomically(make_project: MakeProject, tmp_path: Path) -> None:
    root = make_project()
    code, out = run("image", "render", "toy:1.0-cpu", "--root", str(root), "--dest", str(tmp_path / "out"))
    assert code == 0, out
    written = tmp_path / "out" / "toy" / "1.0-cpu-py3.11.Dockerfile"
    assert written.read_text().startswith("# Rendered by learnerkit")
    assert not list((tmp_path / "out" / "toy").glob("*.tmp"))


def test_bad_spec_gives_json_error_and_nonzero_exit(make_project: MakeProject) -> None:
    root = make_project()
    code, out = run("image", "render", "nope:1", "--root", str(root), "-o", "json")
    assert code == 1
    assert json.loads(out) == {
        "error": "SpecError",
        "message": "image spec 'nope:1': unknown framework 'nope'; valid: toy",
    }


def test_bad_yaml_is_reported_without_traceback(make_project: MakeProject) -> None:
    root = make_project(VALID_YAML.replace("accelerator: cpu", "accelerator: cpu\n        extra: 1"))
    code, out = run("image", "render", "--all", "--root", str(root))
    assert code == 1
    assert "error:" in out and "unknown key 'extra'" in out and "Traceback" not in out


def test_lint_reports_findings_and_fails(make_project: MakeProject) -> None:
    template = (
        '{% extends "learner_base/Dockerfile.j2" %}\n{% block framework_files %}\nRUN cd /tmp && ls\n{% endblock %}\n'
    )
    root = make_project(template=template)
    code, out = run("image", "lint", "toy:1.0-cpu", "--root", str(root), "-o", "json")
    assert code == 1
    findings = json.loads(out)[0]["findings"]
    assert [f["code"] for f in findings] == ["DL3003"]


def test_framework_new_scaffolds_a_valid_framework(make_project: MakeProject) -> None:
    root = make_project()
    code, out = run("framework", "new", "newfw", "--package", "six==1.17.0", "--root", str(root), "-o", "json")
    assert code == 0, out
    assert json.loads(out)["created"] == [
        "frameworks/newfw/framework.yaml",
        "frameworks/newfw/Dockerfile.j2",
        "frameworks/newfw/smoke/train.py",
    ]
    code, out = run("image", "lint", "newfw", "--root", str(root), "-o", "json")
    assert code == 0, out
    code, out = run("framework", "new", "newfw", "--root", str(root))
    assert code == 1 and "already exists" in out


def test_framework_new_refuses_bad_names(make_project: MakeProject) -> None:
    code, out = run("framework", "new", "Bad_Name", "--root", str(make_project()))
    assert code == 1 and "lower-case letters" in out


def test_the_build_command_imports_no_scanner_lock_writer_publisher_fetcher_or_docker_py() -> None:
    """`image build` loads what a build needs: a no-op build answers at once (bench/noop_build.py)."""
    probe = (
        "import sys\n"
        "from click.testing import CliRunner\n"
        "from learnerkit.cli import cli\n"
        "result = CliRunner().invoke(cli, ['image', 'build', '--help'])\n"
        "assert result.exit_code == 0, result.output\n"
        "rooms = ('scan', 'attestations', 'publish', 'imagetest')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[:2] in [['learnerkit_build', r] for r in rooms]))\n"
        "print(sorted(m for m in ('learnerkit_build.builds.locking', 'cyclonedx', 'jsonschema') if m in sys.modules))\n"
        "print(sorted(m for m in fetchers_and_makers if m in sys.modules))\n"
    )
    # What only fetching a lock's files or making a base or an image needs (docker-py 0.1-0.16 s alone).
    fetchers_and_makers = (
        "docker",
        "requests",
        "debian",
        "learnerkit.common.engine",
        "learnerkit_build.lock.compute",
        "learnerkit_build.lock.debian",
        "learnerkit_build.lock.python",
        "learnerkit_build.builds.basemake",
        "learnerkit_build.repro.reproducible",
    )
    probe = f"fetchers_and_makers = {fetchers_and_makers!r}\n" + probe
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["[]", "[]", "[]"]


def test_a_bad_build_jobs_variable_is_refused_before_anything_is_prepared(
    make_project: MakeProject, monkeypatch: pytest.MonkeyPatch
) -> None:
    def prepared(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("the builds were prepared (base made, locks fetched) before the setting was read")

    monkeypatch.setattr("learnerkit_build.cli_image.prepare_builds", prepared)
    monkeypatch.setenv("LEARNERKIT_BUILD_JOBS", "x")
    root = make_project()
    code, out = run("image", "build", "toy:1.0-cpu", "--root", str(root), "--no-ca-bundle", "-o", "json")
    assert code == 1
    assert json.loads(out)["message"] == "LEARNERKIT_BUILD_JOBS='x': a whole number of builds (1 or more) is expected"
