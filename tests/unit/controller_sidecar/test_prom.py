"""SidecarMetrics: the expected series, no _created series, no `job` label, and a real /metrics endpoint."""

from __future__ import annotations

import urllib.request

import pytest

from controller_sidecar.prom import SidecarMetrics
from controller_sidecar.status import Phase

pytestmark = pytest.mark.timeout(30)


def test_render_contains_the_expected_series() -> None:
    metrics = SidecarMetrics("job-7", 2)
    metrics.set_phase(Phase.DOWNLOADING)
    metrics.set_phase(Phase.PROCESSING)
    metrics.record_transfer("upload", "logs", 1234, 0.5)
    metrics.record_retry("s3.put")
    metrics.log_lines.inc(10)
    metrics.log_bytes_shipped.inc(4096)
    metrics.set_training_metrics({"train/loss": 0.25})
    metrics.set_learner_resources(12.5, 1 << 30, 3)
    metrics.status_queued.inc(2)
    metrics.status_delivered.inc()
    metrics.set_gpu_utilisation(None)
    text = metrics.render().decode()
    for series in [
        'learnerkit_sidecar_info{job_id="job-7",learner_id="2"} 1.0',
        'learnerkit_sidecar_phase{phase="PROCESSING"} 1.0',
        'learnerkit_sidecar_phase{phase="DOWNLOADING"} 0.0',
        'learnerkit_sidecar_transfer_bytes_total{direction="upload",kind="logs"} 1234.0',
        'learnerkit_sidecar_transfer_seconds_total{direction="upload",kind="logs"} 0.5',
        'learnerkit_sidecar_transfer_bytes_total{direction="download",kind="data"} 0.0',
        'learnerkit_sidecar_retries_total{operation="s3.put"} 1.0',
        "learnerkit_sidecar_log_lines_total 10.0",
        "learnerkit_sidecar_log_bytes_shipped_total 4096.0",
        'learnerkit_sidecar_training_metric{name="train/loss"} 0.25',
        "learnerkit_sidecar_learner_cpu_seconds 12.5",
        "learnerkit_sidecar_learner_memory_bytes 1.073741824e+09",
        "learnerkit_sidecar_learner_processes 3.0",
        "learnerkit_sidecar_status_updates_queued_total 2.0",
        "learnerkit_sidecar_status_updates_delivered_total 1.0",
    ]:
        assert series in text.splitlines(), series
    assert "_created" not in text
    assert "gpu_utilisation" not in text  # no NVML: no series at all
    assert "job=" not in text.replace("job_id=", "")


def test_gpu_series_appear_with_nvml_and_bad_labels_are_refused() -> None:
    metrics = SidecarMetrics("job-7", 1)
    metrics.set_gpu_utilisation([0.5, 1.0])
    assert 'learnerkit_sidecar_gpu_utilisation_ratio{gpu="1"} 1.0' in metrics.render().decode()
    with pytest.raises(ValueError, match="sideways"):
        metrics.record_transfer("sideways", "logs", 1, 1.0)  # type: ignore[arg-type]


def test_serve_on_an_ephemeral_port() -> None:
    metrics = SidecarMetrics("job-7", 1)
    server = metrics.serve(0, addr="127.0.0.1")
    try:
        assert server.port > 0
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=5) as response:
            assert b"learnerkit_sidecar_phase" in response.read()
    finally:
        server.close()
