"""The build context and its inputs hash: everything that shapes an image changes the hash, nothing else."""

from __future__ import annotations

from pathlib import Path

from learnerkit_build.recipes.context import assemble_context, context_files, inputs_hash
from learnerkit_build.recipes.matrix import load_matrix
from learnerkit_build.recipes.render import BuildInputs
from tests.unit.conftest import MakeProject


def setup(make_project: MakeProject, inputs: BuildInputs) -> tuple[Path, object, list]:  # type: ignore[type-arg]
    root = make_project()
    image = load_matrix(root).select(["toy:1.0-cpu"])[0]
    return root, image, context_files(root, image, inputs)


def test_context_holds_base_framework_and_wheelhouse_but_no_bytecode(make_project: MakeProject, tmp_path: Path) -> None:
    wheelhouse = tmp_path / "wheels"
    wheelhouse.mkdir()
    (wheelhouse / "six-1.17.0-py3-none-any.whl").write_bytes(b"wheel")
    root, image, files = setup(make_project, BuildInputs(wheelhouses=(wheelhouse,)))
    (root / "frameworks" / "toy" / "smoke" / "__pycache__").mkdir()
    (root / "frameworks" / "toy" / "smoke" / "__pycache__" / "train.cpython-311.pyc").write_bytes(b"x")
    targets = {f.target for f in context_files(root, image, BuildInputs(wheelhouses=(wheelhouse,)))}  # type: ignore[arg-type]
    assert "learner_base/bin/learner-run" in targets
    assert "frameworks/toy/framework.yaml" in targets
    assert "frameworks/toy/smoke/train.py" in targets
    assert ".wheelhouse/six-1.17.0-py3-none-any.whl" in targets
    assert not [t for t in targets if "__pycache__" in t]
    context = tmp_path / "ctx"
    assemble_context(context, "FROM x\n", files)
    assert (context / "Dockerfile").read_text() == "FROM x\n"
    assert (context / ".wheelhouse" / "six-1.17.0-py3-none-any.whl").read_bytes() == b"wheel"


def test_hash_follows_content_base_and_index_but_not_ca_or_credentials(make_project: MakeProject) -> None:
    root, _, files = setup(make_project, BuildInputs())
    base = inputs_hash("FROM x\n", files, "sha256:base", BuildInputs())
    assert base == inputs_hash("FROM x\n", files, "sha256:base", BuildInputs(ca_bundle=Path("/etc/ca.pem")))
    assert base != inputs_hash("FROM y\n", files, "sha256:base", BuildInputs())
    assert base != inputs_hash("FROM x\n", files, "sha256:other", BuildInputs())
    with_index = inputs_hash("FROM x\n", files, "sha256:base", BuildInputs(index_url="https://u:p@idx.test/simple"))
    assert with_index != base
    assert with_index == inputs_hash(
        "FROM x\n", files, "sha256:base", BuildInputs(index_url="https://other:secret@idx.test/simple")
    )
    (root / "frameworks" / "toy" / "smoke" / "train.py").write_text("print('changed')\n")
    assert inputs_hash("FROM x\n", files, "sha256:base", BuildInputs()) != base


def test_mode_change_changes_hash(make_project: MakeProject) -> None:
    root, _, files = setup(make_project, BuildInputs())
    before = inputs_hash("FROM x\n", files, "sha256:base", BuildInputs())
    (root / "frameworks" / "toy" / "smoke" / "train.py").chmod(0o755)
    assert inputs_hash("FROM x\n", files, "sha256:base", BuildInputs()) != before


def test_a_checkout_umask_reaches_neither_hash_nor_context(make_project: MakeProject, tmp_path: Path) -> None:
    """git records only the executable bit: a checkout made under umask 077 builds the same image."""
    root, _, files = setup(make_project, BuildInputs())
    before = inputs_hash("FROM x\n", files, "sha256:base", BuildInputs())
    train = root / "frameworks" / "toy" / "smoke" / "train.py"
    train.chmod(0o600)
    (root / "frameworks" / "toy" / "smoke").chmod(0o700)
    assert inputs_hash("FROM x\n", files, "sha256:base", BuildInputs()) == before
    context = tmp_path / "context"
    assemble_context(context, "FROM x\n", files)
    assert (context / "frameworks/toy/smoke/train.py").stat().st_mode & 0o777 == 0o644
    assert (context / "frameworks/toy/smoke").stat().st_mode & 0o777 == 0o755
    assert train.stat().st_mode & 0o777 == 0o600, "the checkout itself is left alone"
