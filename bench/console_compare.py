"""The console's "compare" case (issue 39): the Compare page of 50 runs x 3 metrics x 10,000 steps interactive (its
three charts drawn, one line per run) within 2 s in Debian's chromium.

The runs are HALTED jobs written to the real etcd before the scheduler restores them, each with learner 1's
``metrics.jsonl`` in the real SeaweedFS. The page is opened `--runs` times: the first reads and parses the 50
histories on the server (cold); the scheduler keeps their columns, so the next only cut and thin. The figure: from
the navigation's start to the last of the three charts drawn (the ``data-drawn-at`` their draw hook sets).
Baseline, in the same run and browser: one run's job page, its three charts drawn the same way (warm).

Run as the ``compare`` case of `bench/console.py`:
Usage: python bench/console.py --cases compare [--jobs 10] [--compare-runs 50] [--compare-steps 10000] [--runs 5]
"""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

from playwright.sync_api import Page

from learnerkit.scheduler.admission.stage import Stage
from learnerkit.scheduler.jobs.attempts import Attempt, AttemptEnd, save_attempt
from learnerkit.scheduler.jobs.state import JobState, JobStatus
from learnerkit.scheduler.jobs.store import JobStore
from learnerkit.scheduler.manifest.parser import parse_manifest

TARGET_MS = 2000.0
METRICS = ("loss", "accuracy", "lr")


def history(run: int, steps: int) -> bytes:
    """Three scalars per step, each run its own rate."""
    rate = 0.0005 * (1 + run % 17)
    return b"".join(
        b'{"step": %d, "time": %d, "values": {"loss": %.6f, "accuracy": %.6f, "lr": %.6g}}\n'
        % (s, 1_900_000_000 + s, 2 / (1 + s * rate), 1 - 1 / (1 + s * rate), 0.1 * 0.999 ** (s // 100))
        for s in range(1, steps + 1)
    )


async def write_runs(store: JobStore, s3: Any, bucket: str, text: str, tenant: str, runs: int, steps: int) -> list[str]:
    """``runs`` HALTED jobs of one attempt each, with their histories stored."""
    spec = {"manifest": parse_manifest(text, "manifest.yml", None).to_dict(), "tenant": tenant}
    client = s3.client()
    job_ids = [f"job-compare-{n:04d}" for n in range(runs)]

    async def one(n: int, job_id: str) -> None:
        state = JobState(job_id, tenant, f"run-{n}", time.time() - 1000 + n)
        await store.create(state, {**spec, "job_id": job_id}, text, "manifest.yml")
        attempt = Attempt(1, ("node-1",), "2027-01-15T09:00:00+00:00")
        await save_attempt(store, job_id, attempt.ended(AttemptEnd.HALTED, "halted", "2027-01-15T09:20:00+00:00"))
        await store.save(state.evolve(status=JobStatus.HALTED, stage=Stage.DONE, attempt=1, reason="halted"))
        body = await asyncio.to_thread(history, n, steps)
        await asyncio.to_thread(
            client.put_object, Bucket=bucket, Key=f"{job_id}/attempt-1/learner-1/logs/metrics.jsonl", Body=body
        )

    await asyncio.gather(*(one(n, job_id) for n, job_id in enumerate(job_ids)))
    return job_ids


def _drawn_ms(page: Page, url: str, charts: int) -> float:
    """From the navigation's start to the last of ``charts`` charts drawn."""
    page.goto(url)
    page.locator("figure.chart[data-drawn-at]").nth(charts - 1).wait_for(timeout=60_000)
    return float(
        page.evaluate("Math.max(...[...document.querySelectorAll('figure.chart')].map(f => +f.dataset.drawnAt))")
    )


def compare_case(page: Page, base_url: str, job_ids: list[str], steps: int, runs: int) -> list[str]:
    url = f"{base_url}/ui/compare?jobs={','.join(job_ids)}"
    cold = _drawn_ms(page, url, len(METRICS))
    warm = [_drawn_ms(page, url, len(METRICS)) for _ in range(runs)]
    sent = page.evaluate("[...document.querySelectorAll('figure.chart')].reduce((n, f) => n + +f.dataset.points, 0)")
    payload = page.evaluate(
        "performance.getEntriesByType('resource').filter(e => e.name.includes('/ui/compare/series'))"
        ".reduce((n, e) => n + e.encodedBodySize, 0)"
    )
    served, curves = page.evaluate(
        "[performance.getEntriesByType('navigation')[0].responseEnd, performance.getEntriesByType('resource')"
        ".filter(e => e.name.includes('/ui/compare/series'))[0].duration]"
    )
    baseline = [_drawn_ms(page, f"{base_url}/ui/jobs/{job_ids[0]}", len(METRICS)) for _ in range(runs)]
    median, base = statistics.median(warm), statistics.median(baseline)
    worst = max(warm)
    return [
        f"{len(job_ids)} runs x {len(METRICS)} metrics x {steps:,} steps: {sent:,} points sent of "
        f"{len(job_ids) * len(METRICS) * steps:,} ({payload / 2**20:.1f} MiB JSON)",
        f"page opened to its {len(METRICS)} charts drawn, warm: median {median:.0f} ms, worst {worst:.0f} ms over "
        f"{runs}; target {TARGET_MS:.0f} ms: {'met' if worst <= TARGET_MS else 'MISSED'}",
        f"of the last opening: the page's HTML (50 jobs' facts, manifests, provenance) served at {served:.0f} ms; "
        f"the curves' one request took {curves:.0f} ms",
        f"cold (the server reads and parses the {len(job_ids)} histories once): {cold:.0f} ms",
        f"baseline, one run's job page, its {len(METRICS)} charts drawn (warm): median {base:.0f} ms; "
        f"compare / baseline = {median / base:.1f}",
    ]
