"""PROCESSING: what the sidecar follows while the learner trains.

The learner's log goes to the object store in chunks and, as structured lines, to the sidecar's stdout;
its metrics (``metrics.jsonl`` and the manifest's regex rules over the log) go to etcd and Prometheus;
its CPU and memory go to Prometheus.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import sys
from collections.abc import Awaitable, Callable, Mapping

from controller_sidecar.clock import SYSTEM_CLOCK, Clock, event_or_timeout
from controller_sidecar.errors import SidecarError
from controller_sidecar.evalmetrics import MetricsParser
from controller_sidecar.learnercgroup import LearnerCgroup
from controller_sidecar.logship import LogShipper, structured_line
from controller_sidecar.logtail import FileTailer, LineSplitter
from controller_sidecar.prom import SidecarMetrics
from controller_sidecar.resources import gpu_utilisation, sample_learner
from controller_sidecar.retry import Backoff, retry_async
from controller_sidecar.settings import SidecarSettings

LOGGER = logging.getLogger(__name__)
LOG_FILE = "learner.log"
METRICS_FILE = "metrics.jsonl"
MAX_LINE_BYTES = 1 << 20
RESOURCE_SAMPLE_S = 2.0
FINAL_PUBLISH_BACKOFF = Backoff(initial_s=0.2, maximum_s=5.0, max_attempts=None)
"""The last metrics are retried like statuses: until etcd takes them (or the sidecar's deadline cancels)."""

PublishMetrics = Callable[[Mapping[str, float]], Awaitable[None]]


def make_log_shipper(
    settings: SidecarSettings,
    sink: Callable[[str, bytes], Awaitable[None]],
    parser: MetricsParser,
    metrics: SidecarMetrics,
) -> LogShipper:
    def on_line(line: bytes) -> None:
        metrics.log_lines.inc()
        parser.feed_log_line(line)
        sys.stdout.write(structured_line(settings.job_id, settings.learner_id, line) + "\n")

    return LogShipper(
        settings.dirs.logs / LOG_FILE,
        settings.dirs.control / "logship.json",
        sink,
        interval_s=settings.timing.log_ship_interval_s,
        on_line=on_line,
    )


async def follow_metrics(
    settings: SidecarSettings,
    parser: MetricsParser,
    metrics: SidecarMetrics,
    publish: PublishMetrics,
    stop: asyncio.Event,
    *,
    clock: Clock = SYSTEM_CLOCK,
) -> None:
    """Tail ``metrics.jsonl``; publish the latest values whenever they change, and at the end until delivered.

    While training a failed publish is tried again at the next change or poll; once ``stop`` is set, the
    last values are retried with backoff until etcd takes them (the caller bounds this by its deadline).
    """
    tailer = FileTailer(settings.dirs.logs / METRICS_FILE)
    splitter = LineSplitter(MAX_LINE_BYTES)
    published: dict[str, float] = {}
    failing = False
    while True:
        stopping = stop.is_set()
        for line in splitter.feed(tailer.read_new()):
            parser.feed_jsonl_line(line)
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
