"""The console's "series" case (issue 38): a metric series of 1,000,000 points drawn on a job's page in Debian's
chromium within 500 ms, at most a few thousand points sent.

A real scheduler (the real `Scheduler` restored from a job written to a real etcd, its API and console under uvicorn
on 127.0.0.1), the job's learner-1 history a real ``metrics.jsonl`` of N records in a real SeaweedFS. The page is
opened `--runs` times; each time, from the navigation's start to the chart's draw (the ``data-drawn-at`` its draw hook
sets). The first opening reads and parses the history on the server (cold); the scheduler then keeps its columns
(`learnerkit.scheduler.series.cache`), so the next ones only cut and thin. Baseline, in the same run and browser: the
same uPlot drawing the whole series, its N points already in the page (no transfer, no parse: the least drawing
everything can cost). Ratios: the page's draw over the baseline's.

The history's reading on the server is measured apart too (:func:`parse_case`, the same bytes in this process):
cold, read whole by `read_history` (orjson) against the baseline of the ``json`` reading it replaced (the
sidecar's ``parse_record`` on every line); grown, the history read on after 1% more records were appended (a
sidecar's 30 s store), against that same baseline (what reading a grown history whole cost before).

Run as the ``series`` case of `bench/console.py` (its scheduler, browser and logged-in page):
Usage: python bench/console.py --cases series [--points 1000000] [--runs 5]
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
TARGET_MS = 500.0
TARGET_SENT = 5000
UPLOT = REPO / "learnerkit/scheduler/console/static/vendor/uPlot.iife.min.js"


@dataclass(frozen=True)
class SeriesFigures:
    points: int
    cold_ms: float
    warm_ms: list[float]
    """From the navigation's start: the page, the index of the series, the series, the draw."""
    fetch_ms: list[float]
    """From the series' request to its draw (warm)."""
    sent: int
    """Points the server sent for the whole series."""
    payload_bytes: int
    baseline_ms: list[float]

    def lines(self) -> list[str]:
        warm, fetch = statistics.median(self.warm_ms), statistics.median(self.fetch_ms)
        p95 = sorted(self.warm_ms)[max(0, round(0.95 * len(self.warm_ms)) - 1)]
        fetch_p95 = sorted(self.fetch_ms)[max(0, round(0.95 * len(self.fetch_ms)) - 1)]
        base = statistics.median(self.baseline_ms)
        return [
            f"series of {self.points:,} points: {self.sent} sent ({self.payload_bytes / 1024:.0f} KiB JSON), "
            f"target <= {TARGET_SENT}: {'met' if self.sent <= TARGET_SENT else 'MISSED'}",
            f"series asked for to chart drawn, warm: median {fetch:.0f} ms, p95 {fetch_p95:.0f} ms over "
            f"{len(self.fetch_ms)}; target {TARGET_MS:.0f} ms: {'met' if fetch_p95 <= TARGET_MS else 'MISSED'}",
            f"page opened to chart drawn (the job page, the series' index, the series), warm: median {warm:.0f} ms, "
            f"p95 {p95:.0f} ms",
            f"page opened to chart drawn, cold (the server reads and parses the history once): {self.cold_ms:.0f} ms",
            f"baseline, uPlot drawing all {self.points:,} points already in the page: median {base:.0f} ms; "
            f"series asked for to drawn / baseline = {fetch / base:.2f}",
        ]


def history_bytes(points: int, first: int = 0) -> bytes:
    """``points`` records of one scalar, ``loss``, noisy and decaying, from step ``first``."""
    return b"".join(
        b'{"step": %d, "time": %.3f, "values": {"loss": %.6f}}\n'
        % (s, 1_800_000_000 + s * 0.05, 2 / (1 + s / 1000) + 0.1 * ((s * 7919) % 101) / 101)
        for s in range(first, first + points)
    )


def write_history(s3: Any, bucket: str, job_id: str, points: int) -> None:
    """Learner 1's ``metrics.jsonl`` of attempt 1: :func:`history_bytes`."""
    s3.put_object(Bucket=bucket, Key=f"{job_id}/attempt-1/learner-1/logs/metrics.jsonl", Body=history_bytes(points))


def parse_case(points: int) -> list[str]:
    """The history's reading, cold and grown, against the ``json`` reading in the same run (seconds)."""
    from controller_sidecar.metricrecords import RecordLines, parse_record
    from learnerkit.scheduler.series.history import HistoryReader

    data = history_bytes(points)
    more = history_bytes(points // 100, first=points)
    chunks = [data[i : i + (1 << 20)] for i in range(0, len(data), 1 << 20)]
    started = time.perf_counter()
    lines = RecordLines()
    baseline = sum(parse_record(line) is not None for chunk in chunks for line in lines.feed(chunk))
    baseline_s = time.perf_counter() - started
    reader = HistoryReader()
    started = time.perf_counter()
    read = reader.read(chunks).points // 2
    cold_s = time.perf_counter() - started
    started = time.perf_counter()
    grown = reader.read([*chunks, more]).points // 2
    grown_s = time.perf_counter() - started
    assert read == baseline == points and grown == points + points // 100
    return [
        f"history of {points:,} records ({len(data) / 1e6:.0f} MB) read whole: baseline json {baseline_s:.1f} s, "
        f"orjson {cold_s:.1f} s; baseline / cold = {baseline_s / cold_s:.1f}",
        f"the same grown by {points // 100:,} records, read on: {grown_s:.2f} s; baseline / grown = "
        f"{baseline_s / grown_s:.0f}",
    ]


def series_case(page: Any, console_url: str, job_id: str, points: int, runs: int) -> SeriesFigures:
    """Figures of the series case on ``page`` (logged in to the console at ``console_url``), for a job whose
    learner-1 history holds ``points`` records of ``loss`` (:func:`write_history`)."""
    sent: list[int] = []
    sizes: list[int] = []

    def answered(response: Any) -> None:
        if "/series/loss?" in response.url and "from=" not in response.url:
            body = response.body()
            sizes.append(len(body))
            sent.append(len(json.loads(body)["x"]))

    page.on("response", answered)
    times = [_open(page, f"{console_url}/ui/jobs/{job_id}", points) for _ in range(runs + 1)]
    page.remove_listener("response", answered)
    baseline = [_draw_all(page, points) for _ in range(max(3, runs // 2))]
    opened = [t[0] for t in times]
    return SeriesFigures(points, opened[0], opened[1:], [t[1] for t in times[1:]], max(sent), max(sizes), baseline)


def _open(page: Any, url: str, points: int) -> tuple[float, float]:
    """ms from the navigation's start to the chart's first draw, and from the series' request to it."""
    page.goto(url)
    figure = page.locator('figure.chart[data-series="loss"]')
    figure.locator("canvas").wait_for(timeout=120_000)
    page.wait_for_function(
        "n => { const d = document.querySelector('figure.chart')?.dataset; "
        "return d?.inRange === String(n) && d.drawnAt; }",
        arg=points,
        timeout=120_000,
    )
    drawn = float(figure.get_attribute("data-drawn-at") or "nan")
    asked = page.evaluate(
        "() => performance.getEntriesByType('resource').find(e => e.name.includes('/series/loss?')).startTime"
    )
    return drawn, drawn - float(asked)


def _draw_all(page: Any, points: int) -> float:
    """ms for uPlot to draw ``points`` points given to it whole, in a blank page of the same browser."""
    page.goto("about:blank")
    page.evaluate(UPLOT.read_text() + "\n;0")
    return float(
        page.evaluate(
            """n => {
                const x = new Float64Array(n), y = new Float64Array(n);
                for (let s = 0; s < n; s++) { x[s] = s; y[s] = 2 / (1 + s / 1000) + 0.1 * ((s * 7919) % 101) / 101; }
                const host = document.createElement('div'); document.body.append(host);
                return new Promise(done => {
                    const started = performance.now();
                    const drawn = u => { done(performance.now() - started); setTimeout(() => u.destroy()); };
                    new uPlot({width: 1200, height: 240, series: [{}, {stroke: 'blue'}], hooks: {draw: [drawn]}},
                              [x, y], host);
                });
            }""",
            points,
        )
    )
