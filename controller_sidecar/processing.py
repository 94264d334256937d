"""PROCESSING: what the sidecar follows while the learner trains.

The learner's log goes to the object store in chunks and, as structured lines, to the sidecar's stdout;
its metrics (``metrics.jsonl``, the manifest's regex rules over the log, and TensorBoard event files) go to
etcd and Prometheus; its CPU and memory go to Prometheus. The scalars of the event files are also kept, one
JSON line each in the ``metrics.jsonl`` form, in a :class:`MetricsHistory`: stored with the learner's own
``metrics.jsonl`` when it ends. The history is an unnamed file, rebuilt from the event files by a restarted
sidecar (they are read from the start again).
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import shutil
import sys
import tempfile
from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING

from controller_sidecar.clock import SYSTEM_CLOCK, Clock, event_or_timeout
from controller_sidecar.errors import SidecarError
from controller_sidecar.evalmetrics import EvaluationMetrics, MetricsParser, MetricUpdate
from controller_sidecar.jobdirs import JobDirs
from controller_sidecar.jobfiles import open_regular
from controller_sidecar.learnercgroup import LearnerCgroup
from controller_sidecar.logship import LogShipper, structured_line
from controller_sidecar.logtail import FileTailer
from controller_sidecar.metricrecords import RecordLines
from controller_sidecar.prom import SidecarMetrics
from controller_sidecar.resources import gpu_utilisation, sample_learner
from controller_sidecar.retry import Backoff, retry_async
from controller_sidecar.settings import SidecarSettings

if TYPE_CHECKING:
    from controller_sidecar.tensorboard import EventFolder

LOGGER = logging.getLogger(__name__)
LOG_FILE = "learner.log"
METRICS_FILE = "metrics.jsonl"
COPY_CHUNK = 1 << 20
RESOURCE_SAMPLE_S = 2.0
FINAL_PUBLISH_BACKOFF = Backoff(initial_s=0.2, maximum_s=5.0, max_attempts=None)
"""The last metrics are retried like statuses: until etcd takes them (or the sidecar's deadline cancels)."""

PublishMetrics = Callable[[Mapping[str, float]], Awaitable[None]]


class MetricsHistory:
    """Metric updates the sidecar found itself, as ``metrics.jsonl`` lines with ``"source"``, in an unnamed file."""

    def __init__(self, folder: Path, source: str) -> None:
        self.source = source
        self.file: IO[bytes] = tempfile.TemporaryFile(dir=folder)  # noqa: SIM115 - open for the sidecar's life
        self.records = 0
        self.size = 0
        """Bytes added (and flushed)."""

    def add(self, updates: Iterable[MetricUpdate]) -> None:
        """One line per step and time: the scalars one event (or one writer call) gave together."""
        lines: list[bytes] = []
        record: dict[str, object] | None = None
        for update in updates:
            if record is None or (record["step"], record["time"]) != (update.step, update.time):
                if record is not None:
                    lines.append(json.dumps(record).encode() + b"\n")
                record = {"step": update.step, "time": update.time, "values": {}, "source": self.source}
            values = record["values"]
            assert isinstance(values, dict)
            values[update.name] = update.value
        if record is not None:
            lines.append(json.dumps(record).encode() + b"\n")
        data = b"".join(lines)
        self.file.write(data)
        self.file.flush()
        self.records += len(lines)
        self.size += len(data)

    def copy_to(self, out: IO[bytes]) -> None:
        """What was added so far; safe while :meth:`add` goes on (reads by position, never moves the file's)."""
        fd, offset, end = self.file.fileno(), 0, self.size
        while offset < end:
            chunk = os.pread(fd, min(COPY_CHUNK, end - offset), offset)
            if not chunk:
                break
            out.write(chunk)
            offset += len(chunk)

    def close(self) -> None:
        self.file.close()


def stored_metrics(dirs: JobDirs, history: MetricsHistory | None) -> IO[bytes] | None:
    """What goes to ``logs/metrics.jsonl``: the learner's file, then the history; None when both are empty.

    Built in an unnamed file (the learner cannot swap it); the learner's file is opened without links.
    """
    try:
        learner: IO[bytes] | None = open_regular(dirs.logs / METRICS_FILE)
    except FileNotFoundError:
        learner = None
    if learner is None and (history is None or history.records == 0):
        return None
    combined = tempfile.TemporaryFile(dir=dirs.control)  # noqa: SIM115 - the caller closes it
    if learner is not None:
        with learner:
            shutil.copyfileobj(learner, combined)
        if combined.tell() and (combined.seek(-1, os.SEEK_END), combined.read(1))[1] != b"\n":
            combined.write(b"\n")
    if history is not None:
        history.copy_to(combined)
    combined.seek(0)
    return combined


def metrics_version(dirs: JobDirs, history: MetricsHistory | None) -> tuple[int, int]:
    """Changes whenever what :func:`stored_metrics` gives does: the learner's file's size, the history's."""
    try:
        learner = (dirs.logs / METRICS_FILE).lstat().st_size
    except FileNotFoundError:
        learner = -1
    return learner, history.size if history is not None else 0


async def ship_metrics(
    settings: SidecarSettings,
    history: MetricsHistory | None,
    upload: Callable[[IO[bytes]], Awaitable[object]],
    stop: asyncio.Event,
) -> None:
    """Store ``logs/metrics.jsonl`` every ``metrics_ship_interval_s`` while it grows, so ``job metrics`` shows
    a running job's history; STORING stores the last one. A failed upload is tried again next time."""
    shipped: tuple[int, int] | None = None
    while not await event_or_timeout(stop, settings.timing.metrics_ship_interval_s):
        version = await asyncio.to_thread(metrics_version, settings.dirs, history)
        if version == shipped:
            continue
        handle = await asyncio.to_thread(stored_metrics, settings.dirs, history)
        if handle is None:
            continue
        try:
            with handle:
                await upload(handle)
        except SidecarError as e:
            LOGGER.warning(
                "the metric history was not stored (trying again in %gs): %s",
                settings.timing.metrics_ship_interval_s,
                e,
            )
        else:
            shipped = version


def tensorboard_events(rules: EvaluationMetrics | None, dirs: JobDirs) -> EventFolder | None:
    """The event folder to follow for ``type: tensorboard``; its reader is imported only then."""
    if rules is None or rules.type != "tensorboard":
        return None
    from controller_sidecar.tensorboard import EventFolder, event_folder  # only jobs with TensorBoard metrics

    return EventFolder(event_folder(rules.location, dirs))


def make_log_shipper(
    settings: SidecarSettings,
    sink: Callable[[str, bytes], Awaitable[None]],
    parser: MetricsParser,
    metrics: SidecarMetrics,
) -> LogShipper:
    def on_lines(lines: list[bytes]) -> None:
        metrics.log_lines.inc(len(lines))
        for line in lines:
            parser.feed_log_line(line)
        sys.stdout.write("".join(structured_line(settings.job_id, settings.learner_id, line) + "\n" for line in lines))

    return LogShipper(
        settings.dirs.logs / LOG_FILE,
        settings.dirs.control / "logship.json",
        sink,
        interval_s=settings.timing.log_ship_interval_s,
        on_lines=on_lines,
    )


async def follow_metrics(
    settings: SidecarSettings,
    parser: MetricsParser,
    metrics: SidecarMetrics,
    publish: PublishMetrics,
    stop: asyncio.Event,
    *,
    events: EventFolder | None = None,
    history: MetricsHistory | None = None,
    drained: asyncio.Event | None = None,
    clock: Clock = SYSTEM_CLOCK,
) -> None:
    """Tail ``metrics.jsonl`` (and the TensorBoard ``events``, into ``history``); publish the latest values
    whenever they change, and at the end until delivered.

    While training a failed publish is tried again at the next change or poll; once ``stop`` is set, the
    files are read a last time (then ``drained`` is set: the history is complete), and the last values are
    retried with backoff until etcd takes them (the caller bounds this by its deadline).
    """
    tailer = FileTailer(settings.dirs.logs / METRICS_FILE)
    splitter = RecordLines()
    bad_lines = 0
    published: dict[str, float] = {}
    failing = False
    while True:
        stopping = stop.is_set()
        for line in splitter.feed(tailer.read_new()):
            parser.feed_jsonl_line(line)
        if parser.malformed + splitter.too_long > bad_lines:  # skipped, counted, never fatal
            metrics.metrics_malformed.inc(parser.malformed + splitter.too_long - bad_lines)
            bad_lines = parser.malformed + splitter.too_long
        if events is not None:
            scalars = parser.remember(await asyncio.to_thread(events.poll))
            if history is not None and scalars:
                history.add(scalars)
        if stopping and drained is not None:
            drained.set()
        latest = parser.latest()
        if latest != published:
            metrics.set_training_metrics(latest)
            if stopping:
                last = functools.partial(publish, dict(latest))
                await retry_async(last, FINAL_PUBLISH_BACKOFF, what="publish the last metrics", clock=clock)
                return
            try:
                await publish(latest)
            except SidecarError as e:
                if not failing:  # once per outage, not once per poll
                    LOGGER.warning("metrics not published (retrying until etcd answers): %s", e)
                failing = True
            else:
                published, failing = dict(latest), False
        if stopping:
            return
        await event_or_timeout(stop, settings.timing.poll_interval_s)


async def sample_resources(settings: SidecarSettings, metrics: SidecarMetrics, stop: asyncio.Event) -> None:
    """Learner CPU and memory (from its cgroup, or its processes in a shared PID namespace) and GPU use."""
    cgroup = LearnerCgroup(settings.learner_cgroup_dir) if settings.learner_cgroup_dir else None
    while not stop.is_set():
        if cgroup is not None:
            sample = cgroup.sample()
            if sample is not None:
                metrics.set_learner_resources(sample.cpu_seconds, sample.memory_bytes, sample.processes)
        else:
            proc = sample_learner(os.getpid())
            metrics.set_learner_resources(proc.cpu_seconds, proc.rss_bytes, proc.processes)
        metrics.set_gpu_utilisation(gpu_utilisation())
        await event_or_timeout(stop, RESOURCE_SAMPLE_S)
