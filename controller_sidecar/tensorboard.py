"""FfDL's ``evaluation_metrics: {type: tensorboard, in: DIR}``: the scalars of the event files under ``in``.

``in`` is read as the learner spells paths: ``$JOB_STATE_DIR``, ``$LOG_DIR``, ``$RESULT_DIR``, ... expand to
the learner's folders (so ``in`` and a script writing to ``os.environ["JOB_STATE_DIR"] + "/logs/tb"`` always
agree), an absolute path must lie in the job folder, and a relative one is taken under ``$LOG_DIR``. No
``in`` means ``$LOG_DIR``, the folder FfDL's collector scanned. Every event file (a name with ``tfevents``)
anywhere below is followed: new files, and records as they are appended. A scalar is named
``<folder>/<tag>``, its folder relative to ``in`` (``train/loss``), or ``<tag>`` for files directly in it.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from controller_sidecar.errors import SidecarConfigError, UnsafeFileError, UnsafePathError
from controller_sidecar.evalmetrics import FIELD, MetricUpdate
from controller_sidecar.jobdirs import JOB_DIR, JobDirs
from controller_sidecar.jobfiles import open_regular, regular_files
from controller_sidecar.safepaths import relative_parts
from controller_sidecar.tfevents import CorruptFileError, CorruptRecordError, event_scalars, read_record

LOGGER = logging.getLogger(__name__)
LEARNER_JOB_DIR = PurePosixPath(JOB_DIR)
"""The job folder as the learner sees it (the learner contract's defaults)."""
LEARNER_FOLDERS = JobDirs().learner_variables()
"""The learner's folder variables and their folders as the learner sees them."""
EVENT_FILE_MARK = "tfevents"
MAX_RECORDS_PER_POLL = 10_000
"""Per file and poll, so one huge file cannot hold up the others or the metrics' publication."""
_VARIABLE = re.compile(r"\$(?:\{(\w+)\}|(\w+))")


def event_folder(location: str | None, dirs: JobDirs) -> Path:
    """Where the sidecar finds the event files that ``in`` names; SidecarConfigError names ``evaluation_metrics.in``."""
    where = f"{FIELD}.in"
    if location is None:
        return dirs.logs

    def expand(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        if name not in LEARNER_FOLDERS:
            known = ", ".join(f"${variable}" for variable in LEARNER_FOLDERS)
            raise SidecarConfigError(f"{where}: unknown variable ${name} in {location!r}; known: {known}")
        return str(LEARNER_FOLDERS[name])

    path = PurePosixPath(_VARIABLE.sub(expand, location))
    if path.is_absolute():
        if path != LEARNER_JOB_DIR and LEARNER_JOB_DIR not in path.parents:
            raise SidecarConfigError(f"{where}: {location!r} is outside the job folder {LEARNER_JOB_DIR}")
        base, relative = dirs.root, path.relative_to(LEARNER_JOB_DIR)
    else:
        base, relative = dirs.logs, path
    if str(relative) == ".":
        return base
    try:
        parts = relative_parts(str(relative), what=where)
    except UnsafePathError as error:
        raise SidecarConfigError(str(error)) from error
    return base.joinpath(*parts)


@dataclass
class _EventFile:
    offset: int = 0
    broken: bool = False
    """Its framing is lost (a length failed its checksum): nothing more is read from it."""


@dataclass
class EventFolder:
    """Follows every event file below ``root``; :meth:`poll` returns the scalars appended since the last call."""

    root: Path
    skipped_records: int = 0
    """Records that failed their checksum or were no ``Event``."""
    _files: dict[str, _EventFile] = field(default_factory=dict)

    def poll(self) -> list[MetricUpdate]:
        updates: list[MetricUpdate] = []
        try:
            names = regular_files(self.root)
        except UnsafeFileError as error:
            LOGGER.warning("tensorboard events not read: %s", error)
            return updates
        for name in names:
            if EVENT_FILE_MARK in PurePosixPath(name).name:
                updates += self._read(name, self._files.setdefault(name, _EventFile()))
        return updates

    def _read(self, name: str, state: _EventFile) -> list[MetricUpdate]:
        if state.broken:
            return []
        path = self.root / name
        try:
            handle = open_regular(path)
        except (FileNotFoundError, UnsafeFileError) as error:
            LOGGER.debug("event file %s not read: %s", path, error)
            return []
        run = str(PurePosixPath(name).parent)
        updates: list[MetricUpdate] = []
        with handle:
            handle.seek(state.offset)
            for _ in range(MAX_RECORDS_PER_POLL):
                try:
                    data = read_record(handle)
                except CorruptFileError as error:
                    LOGGER.warning("%s: %s at byte %d; the rest of the file is not read", path, error, state.offset)
                    state.broken = True
                    break
                except CorruptRecordError as error:
                    self._skip(path, state, error)
                    state.offset = handle.tell()
                    continue
                if data is None:
                    break
                state.offset = handle.tell()
                try:
                    scalars = event_scalars(data)
                except CorruptRecordError as error:
                    self._skip(path, state, error)
                    continue
                updates += [
                    MetricUpdate(s.tag if run == "." else f"{run}/{s.tag}", s.value, s.step, s.wall_time)
                    for s in scalars
                ]
        return updates

    def _skip(self, path: Path, state: _EventFile, error: CorruptRecordError) -> None:
        self.skipped_records += 1
        LOGGER.warning("%s: record at byte %d skipped: %s", path, state.offset, error)
