"""The sidecar's Prometheus metrics, on a registry of its own (so tests and several sidecars never share one).

No metric has a label named ``job``: Prometheus renames it ``exported_job`` on scrape, because ``job`` is the
scrape job's own label. The job and learner are on ``learnerkit_sidecar_info`` (``job_id``, ``learner_id``).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal, get_args
from wsgiref.simple_server import WSGIServer

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Info,
    disable_created_metrics,
    generate_latest,
    start_http_server,
)

from controller_sidecar.status import Phase

Direction = Literal["download", "upload"]
TransferKind = Literal["data", "model", "checkpoint", "results", "logs"]
PREFIX = "learnerkit_sidecar"


@dataclass
class MetricsServer:
    """The ``/metrics`` endpoint that :meth:`SidecarMetrics.serve` started."""

    httpd: WSGIServer
    thread: threading.Thread

    @property
    def port(self) -> int:
        """The bound port (the ephemeral one when 0 was asked for)."""
        return int(self.httpd.server_address[1])

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


class SidecarMetrics:
    def __init__(self, job_id: str, learner_id: int) -> None:
        # _created series double every counter's output and mean nothing to a scrape; this switch is global.
        disable_created_metrics()  # type: ignore[no-untyped-call]
        self.registry = CollectorRegistry(auto_describe=True)
        registry = self.registry
        Info(f"{PREFIX}", "The job and learner this sidecar serves.", registry=registry).info(
            {"job_id": job_id, "learner_id": str(learner_id)}
        )
        self.phase = Gauge(
            f"{PREFIX}_phase", "1 for the learner's current phase, 0 for the others.", ["phase"], registry=registry
        )
        for phase in Phase:
            self.phase.labels(phase.value).set(0)
        self.transfer_bytes = Counter(
            f"{PREFIX}_transfer_bytes",
            "Bytes moved to or from the object store.",
            ["direction", "kind"],
            registry=registry,
        )
        self.transfer_seconds = Counter(
            f"{PREFIX}_transfer_seconds", "Time spent moving objects.", ["direction", "kind"], registry=registry
        )
        for direction in get_args(Direction):
            for kind in get_args(TransferKind):
                self.transfer_bytes.labels(direction, kind)
                self.transfer_seconds.labels(direction, kind)
        self.retries = Counter(
            f"{PREFIX}_retries", "Transient failures retried, by operation.", ["operation"], registry=registry
        )
        self.log_lines = Counter(f"{PREFIX}_log_lines", "Lines read from learner.log.", registry=registry)
        self.log_bytes_shipped = Counter(
            f"{PREFIX}_log_bytes_shipped", "learner.log bytes the store confirmed.", registry=registry
        )
        self.log_parts_shipped = Counter(
            f"{PREFIX}_log_parts_shipped", "learner.log parts the store confirmed.", registry=registry
        )
        self.metrics_malformed = Counter(
            f"{PREFIX}_metrics_lines_malformed", "metrics.jsonl lines skipped as malformed.", registry=registry
        )
        self.training_metric = Gauge(
            f"{PREFIX}_training_metric", "The latest value of each training metric.", ["name"], registry=registry
        )
        self.learner_cpu_seconds = Gauge(
            f"{PREFIX}_learner_cpu_seconds",
            "CPU seconds (user + system) of the learner's live processes; drops when a process ends.",
            registry=registry,
        )
        self.learner_memory_bytes = Gauge(
            f"{PREFIX}_learner_memory_bytes", "Resident memory of the learner's processes.", registry=registry
        )
        self.learner_processes = Gauge(
            f"{PREFIX}_learner_processes", "The learner's live processes.", registry=registry
        )
        self.status_queued = Counter(
            f"{PREFIX}_status_updates_queued", "Status updates queued for etcd.", registry=registry
        )
        self.status_delivered = Counter(
            f"{PREFIX}_status_updates_delivered", "Status updates etcd confirmed.", registry=registry
        )
        self._gpu: Gauge | None = None

    def set_phase(self, current: Phase) -> None:
        for phase in Phase:
            self.phase.labels(phase.value).set(1 if phase is current else 0)

    def record_transfer(self, direction: Direction, kind: TransferKind, nbytes: int, seconds: float) -> None:
        if direction not in get_args(Direction) or kind not in get_args(TransferKind):
            raise ValueError(f"unknown transfer {direction!r}/{kind!r}")
        self.transfer_bytes.labels(direction, kind).inc(nbytes)
        self.transfer_seconds.labels(direction, kind).inc(seconds)

    def record_retry(self, operation: str) -> None:
        self.retries.labels(operation).inc()

    def set_training_metrics(self, latest: Mapping[str, float]) -> None:
        for name, value in latest.items():
            self.training_metric.labels(name).set(value)

    def set_learner_resources(self, cpu_seconds: float, rss_bytes: int, processes: int) -> None:
        self.learner_cpu_seconds.set(cpu_seconds)
        self.learner_memory_bytes.set(rss_bytes)
        self.learner_processes.set(processes)

    def set_gpu_utilisation(self, ratios: Iterable[float] | None) -> None:
        """Per-GPU utilisation (0 to 1); None (no NVML) leaves the series out entirely."""
        if ratios is None:
            return
        if self._gpu is None:
            self._gpu = Gauge(
                f"{PREFIX}_gpu_utilisation_ratio",
                "GPU busy time over NVML's sample period.",
                ["gpu"],
                registry=self.registry,
            )
        for index, ratio in enumerate(ratios):
            self._gpu.labels(str(index)).set(ratio)

    def render(self) -> bytes:
        """The text exposition format, as ``/metrics`` serves it."""
        return generate_latest(self.registry)

    def serve(self, port: int, addr: str = "0.0.0.0") -> MetricsServer:  # noqa: S104 - scraped from outside the pod
        """Serve ``/metrics`` on ``port`` (0: an ephemeral port; see ``.port``) in a daemon thread."""
        httpd, thread = start_http_server(port, addr=addr, registry=self.registry)
        return MetricsServer(httpd, thread)
