"""The model code's checks: a folder zipped, and each archive the sidecar would refuse refused first."""

from __future__ import annotations

import json
import re
import stat
import warnings
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from learnerkit.cli import cli
from learnerkit.scheduler.errors import ModelCodeError
from learnerkit.scheduler.manifest.imageref import reference_problem
from learnerkit.scheduler.modelcode.archive import check_model_archive, model_archive, zip_folder
from tests.unit.scheduler.manifest.test_manifest import BASE, REPO


def test_a_folder_is_zipped_with_its_tree_and_checked(tmp_path: Path) -> None:
    folder = tmp_path / "model"
    (folder / "pkg").mkdir(parents=True)
    (folder / "train.py").write_text("import pkg.helper\n")
    (folder / "pkg" / "helper.py").write_text("X = 1\n")
    (folder / "requirements.txt").write_text("lkgreet==1.0\n")
    archive = model_archive(folder, tmp_path)
    with zipfile.ZipFile(archive) as zf:
        assert sorted(zf.namelist()) == ["pkg/helper.py", "requirements.txt", "train.py"]
    summary = check_model_archive(archive)
    assert (summary.files, summary.requirements) == (3, ("lkgreet==1.0",))
    assert summary.expanded_bytes == sum(len(p.read_bytes()) for p in folder.rglob("*") if p.is_file())


def test_a_zip_is_used_as_it_is(tmp_path: Path) -> None:
    archive = tmp_path / "model.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("train.py", "print(1)\n")
    assert model_archive(archive, tmp_path) == archive


def test_an_empty_folder_is_refused_naming_it(tmp_path: Path) -> None:
    folder = tmp_path / "empty"
    (folder / "sub").mkdir(parents=True)
    with pytest.raises(ModelCodeError, match=re.escape(f"{folder}: the model folder has no files")):
        zip_folder(folder, tmp_path / "out.zip")
    assert not (tmp_path / "out.zip").exists()


def test_a_link_in_the_folder_is_refused_naming_it(tmp_path: Path) -> None:
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "train.py").write_text("")
    (folder / "passwd").symlink_to("/etc/passwd")
    with pytest.raises(ModelCodeError, match="passwd: links and special files"):
        zip_folder(folder, tmp_path / "out.zip")


def _zip(path: Path, members: dict[str, bytes], *, mode: int | None = None) -> Path:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            info = zipfile.ZipInfo(name)
            info.compress_type = zipfile.ZIP_DEFLATED
            if mode is not None:
                info.external_attr = mode << 16
            zf.writestr(info, data)
    return path


@pytest.mark.parametrize(
    ("members", "mode", "message"),
    [
        ({"../evil.py": b"x"}, None, "'../evil.py' has an empty, '.' or '..' segment"),
        ({"/etc/evil.py": b"x"}, None, "absolute path '/etc/evil.py'"),
        ({"ok/../../evil.py": b"x"}, None, "'..' segment"),
        ({"link": b"/etc/passwd"}, stat.S_IFLNK | 0o777, "member 'link' is a link or special file"),
        ({"dir/": b""}, None, "the archive has no files"),
    ],
)
def test_unsafe_archives_are_refused_naming_the_member(
    tmp_path: Path, members: dict[str, bytes], mode: int | None, message: str
) -> None:
    archive = _zip(tmp_path / "m.zip", members, mode=mode)
    with pytest.raises(ModelCodeError) as refused:
        check_model_archive(archive, name="model.zip")
    assert str(refused.value).startswith("model.zip: ")
    assert message in str(refused.value)


def test_a_bomb_is_refused_from_its_directory(tmp_path: Path) -> None:
    archive = _zip(tmp_path / "bomb.zip", {"a.bin": b"\0" * 2_000_000, "b.bin": b"\0" * 2_000_000})
    assert archive.stat().st_size < 20_000
    with pytest.raises(ModelCodeError, match=r"bomb\.zip: expands to more than 3000000 bytes"):
        check_model_archive(archive, name="bomb.zip", max_expanded_bytes=3_000_000)


def test_not_a_zip_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "model.zip"
    path.write_bytes(b"PK not really")
    with pytest.raises(ModelCodeError, match=r"model\.zip: not a zip archive"):
        check_model_archive(path, name="model.zip")


def test_a_refused_requirement_names_the_archive_file_and_line(tmp_path: Path) -> None:
    archive = _zip(tmp_path / "m.zip", {"train.py": b"", "requirements.txt": b"ok==1\n--extra-index-url http://x\n"})
    with pytest.raises(ModelCodeError, match=r"m\.zip: requirements\.txt line 2: '--extra-index-url http://x'"):
        check_model_archive(archive, name="m.zip")


@pytest.mark.parametrize(
    "reference",
    ["ubuntu", "learnerkit/pytorch:2.13-cpu-py3.11", "registry.local:5000/team/img:v1", "x/y@sha256:" + "a" * 64],
)
def test_valid_image_references(reference: str) -> None:
    assert reference_problem(reference) is None


@pytest.mark.parametrize("reference", ["", "Upper/case", "a b", "img:", ":tag", "a//b", "img:tag:again", "x" * 300])
def test_invalid_image_references(reference: str) -> None:
    assert reference_problem(reference) is not None


def _zip_with_repeats(path: Path, names: list[str]) -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # zipfile warns of the duplicate this test means to write
        with zipfile.ZipFile(path, "w") as archive:
            for n, name in enumerate(names):
                archive.writestr(name, f"print({n})\n")
    return path


@pytest.mark.parametrize(
    ("names", "member"),
    [
        (["train.py", "util.py", "train.py"], "'train.py' twice"),
        (["pkg/model.py", "pkg/model.py"], "'pkg/model.py' twice"),
        (["data", "data/train.csv"], "'data/train.csv' inside the file 'data'"),
        (["data/train.csv", "data"], "'data' is a file and a folder"),
    ],
)
def test_an_archive_with_a_member_twice_is_refused_naming_it(tmp_path: Path, names: list[str], member: str) -> None:
    archive = _zip_with_repeats(tmp_path / "model.zip", names)
    with pytest.raises(ModelCodeError, match=re.escape(member)) as caught:
        check_model_archive(archive, name="model.zip")
    assert str(caught.value).startswith("model.zip: member ")


def test_validate_refuses_an_archive_with_a_member_twice(tmp_path: Path) -> None:
    manifest = tmp_path / "manifest.yml"
    manifest.write_text(BASE, encoding="utf-8")
    archive = _zip_with_repeats(tmp_path / "model.zip", ["train.py", "train.py"])
    result = CliRunner().invoke(cli, ["job", "validate", str(manifest), str(archive), "--root", str(REPO)])
    assert result.exit_code == 1
    assert "'train.py' twice" in result.output, result.output


def _model_with(tmp_path: Path, requirements: str) -> tuple[Path, Path]:
    manifest, folder = tmp_path / "manifest.yml", tmp_path / "model"
    manifest.write_text(BASE)  # pytorch 2.13 without GPUs: learnerkit/pytorch:2.13-cpu-py3.11
    folder.mkdir()
    (folder / "train.py").write_text("print(1)\n")
    (folder / "requirements.txt").write_text(requirements)
    return manifest, folder


def test_validate_refuses_a_requirement_that_would_replace_the_images_locked_torch(tmp_path: Path) -> None:
    manifest, folder = _model_with(tmp_path, "tabulate==0.9.0\ntorch==2.0.0\n")
    result = CliRunner().invoke(cli, ["job", "validate", str(manifest), str(folder), "--root", str(REPO)])
    assert result.exit_code == 1, result.output
    locked = json.loads((REPO / "frameworks/pytorch/lock/2.13-cpu.json").read_text())
    [torch] = [wheel["version"] for wheel in locked["python"] if wheel["name"] == "torch"]
    expected = f"requirements.txt line 2: torch==2.0.0 would replace the image's locked torch {torch}"
    assert expected in " ".join(result.output.split())


def test_validate_keeps_requirements_the_images_lock_satisfies(tmp_path: Path) -> None:
    manifest, folder = _model_with(tmp_path, "tabulate==0.9.0\nnumpy>=2\ntorch\n")
    args = ["job", "validate", str(manifest), str(folder), "--root", str(REPO), "-o", "json"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["model"]["requirements"] == ["tabulate==0.9.0", "numpy>=2", "torch"]


def test_an_image_of_the_tenants_own_has_no_lock_to_keep(tmp_path: Path) -> None:
    manifest, folder = _model_with(tmp_path, "torch==2.0.0\n")
    args = ["job", "validate", str(manifest), str(folder), "--root", str(REPO), "--image", "registry.local/mine:1"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output


def test_an_archive_check_given_the_lock_names_the_archive_line_and_both_versions(tmp_path: Path) -> None:
    archive = _zip(tmp_path / "m.zip", {"train.py": b"", "requirements.txt": b"numpy==1.26.4\n"})
    with pytest.raises(ModelCodeError, match=r"m\.zip: requirements\.txt line 1: numpy==1\.26\.4 would replace "):
        check_model_archive(archive, name="m.zip", locked={"numpy": "2.4.6"})
