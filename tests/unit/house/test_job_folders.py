"""The learner and sidecar images spell the job volume's names each (the sidecar image ships no ``learner``):
the two spellings agree."""

from __future__ import annotations

from pathlib import Path

from controller_sidecar import control
from controller_sidecar.jobdirs import JOB_DIR, JobDirs
from learner import paths


def test_the_sidecars_folders_are_the_learners() -> None:
    dirs = JobDirs()
    assert str(JOB_DIR) == paths.JOB_DIR
    assert dirs.learner_variables() == {variable: Path(path) for variable, path in paths.DIR_DEFAULTS.items()}
    assert (str(dirs.shared), str(dirs.packages)) == (paths.SHARED_DIR, paths.PACKAGES_DIR)


def test_the_sidecars_control_files_are_the_learners() -> None:
    assert (control.START_FILE, control.HALT_FILE, control.EXIT_FILE) == (
        paths.START_FILE,
        paths.HALT_FILE,
        paths.EXIT_FILE,
    )
