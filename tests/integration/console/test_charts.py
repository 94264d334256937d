"""The job page's metric charts in Debian's chromium against a real scheduler: drawn from the job's stored history
(two attempts' metrics.jsonl in SeaweedFS), thinned on the server, a zoom fetching its range at full resolution,
and the charts following the history as it grows, from the live stream's `metrics` events, zoom kept."""

from __future__ import annotations

import json
import math
import re
from typing import Any

import pytest
from playwright.sync_api import Page, Request, expect

from controller_sidecar import keys
from tests.integration.console.conftest import BUCKET, METRIC_STEPS, METRICS, Console, Pages, log_in

pytestmark = [pytest.mark.integration, pytest.mark.services, pytest.mark.timeout(300)]


def _drag(page: Page, figure_selector: str, start: float, end: float) -> None:
    """A drag across the chart's plot area from ``start`` to ``end`` of its width (0..1)."""
    box = page.locator(f"{figure_selector} .u-over").bounding_box()
    assert box is not None
    y = box["y"] + box["height"] / 2
    page.mouse.move(box["x"] + box["width"] * start, y)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * (start + end) / 2, y, steps=4)
    page.mouse.move(box["x"] + box["width"] * end, y, steps=4)
    page.mouse.up()


def test_the_chart_is_drawn_from_the_history_and_a_zoom_fetches_its_range(console: Console, pages: Pages) -> None:
    page = pages.open()
    asked: list[str] = []
    page.on("request", lambda request: asked.append(request.url) if "/series" in request.url else None)
    log_in(page, console, path=f"/ui/jobs/{console.job_id}")
    chart = 'figure.chart[data-series="loss"]'
    figure = page.locator(chart)
    expect(figure.locator("figcaption")).to_have_text("loss")
    expect(figure).to_have_attribute("data-in-range", str(METRIC_STEPS))
    expect(figure.locator("canvas")).to_have_count(1)
    sent = int(figure.get_attribute("data-points") or 0)
    assert 100 <= sent < METRIC_STEPS and sent <= 5000, "thinned on the server to what the chart draws"
    expect(figure.get_by_role("status")).to_contain_text(f"{sent} of {METRIC_STEPS} points")
    figure.scroll_into_view_if_needed()
    pages.shot(page, "job-charts", full_page=False)

    with page.expect_request(lambda r: _is_range(r, "loss")) as zoom:
        _drag(page, chart, 0.30, 0.35)
    query = dict(re.findall(r"[?&](\w+)=([^&]+)", zoom.value.url))
    start, end = float(query["from"]), float(query["to"])
    assert 0 < start < end < METRIC_STEPS
    expect(figure).not_to_have_attribute("data-in-range", str(METRIC_STEPS))
    in_range = int(figure.get_attribute("data-in-range") or 0)
    assert in_range == math.floor(end) - math.ceil(start) + 1, "every step of the range, one point each"
    assert figure.get_attribute("data-points") == str(in_range), "a narrow range comes at full resolution"
    expect(figure.get_by_role("status")).to_contain_text("of a range")

    figure.get_by_label("Log scale").check()
    figure.get_by_label("Axis").select_option("time")
    expect(figure).to_have_attribute("data-in-range", str(METRIC_STEPS))
    pages.shot(page, "job-charts-log-time", full_page=False)  # docs/console.md
    figure.get_by_role("button", name="Whole series").click()
    expect(figure.get_by_role("status")).to_contain_text("the whole series")
    assert all("127.0.0.1" in url for url in asked)


def _is_range(request: Request, name: str) -> bool:
    return f"/series/{name}?" in request.url and "from=" in request.url


def test_without_javascript_the_page_says_where_the_history_is(console: Console, pages: Pages) -> None:
    page = pages.open(javascript=False)
    log_in(page, console, path=f"/ui/jobs/{console.job_id}")
    expect(page.locator("#charts")).to_contain_text(f"learnerkit job metrics {console.job_id}")
    expect(page.locator("figure.chart")).to_have_count(0)
    expect(page.locator(".verdict")).to_have_text("not evaluated")


def test_the_charts_follow_the_history_from_metrics_events_and_keep_their_zoom(
    console: Console, pages: Pages, s3_server: Any
) -> None:
    history = f"{console.job_id}/attempt-2/learner-1/logs/metrics.jsonl"
    s3 = s3_server.client()

    def grow_to(last: int) -> None:
        """The history stored again with steps up to ``last``, then the latest values put as the sidecar does."""
        more = b"".join(
            b'{"step": %d, "time": %d, "values": {"loss": %.6f}}\n' % (s, 1_800_100_000 + s, 2 / (s + 1))
            for s in range(METRIC_STEPS + 1, last + 1)
        )
        s3.put_object(Bucket=BUCKET, Key=history, Body=METRICS[1] + more)
        metrics = json.dumps({"loss": 2 / (last + 1)})
        console.put(keys.learner_metrics_key(console.job_id, 1, console.root), metrics)

    page = pages.open()
    log_in(page, console, path=f"/ui/jobs/{console.job_id}")
    chart = 'figure.chart[data-series="loss"]'
    figure = page.locator(chart)
    expect(figure).to_have_attribute("data-total", str(METRIC_STEPS))
    page.evaluate("window.sameDocument = true")
    try:
        grow_to(METRIC_STEPS + 500)
        expect(figure).to_have_attribute("data-total", str(METRIC_STEPS + 500))
        expect(figure).to_have_attribute("data-in-range", str(METRIC_STEPS + 500))

        figure.scroll_into_view_if_needed()
        with page.expect_request(lambda r: _is_range(r, "loss")):
            _drag(page, chart, 0.30, 0.35)
        expect(figure.get_by_role("status")).to_contain_text("of a range")
        zoomed = figure.get_attribute("data-in-range")
        followed = int(figure.get_attribute("data-followed") or 0)
        with page.expect_request(lambda r: _is_range(r, "loss")):  # the same range asked for again
            grow_to(METRIC_STEPS + 900)
        expect(figure).to_have_attribute("data-followed", str(followed + 1))
        expect(figure).to_have_attribute("data-total", str(METRIC_STEPS + 900))
        assert figure.get_attribute("data-in-range") == zoomed, "the zoom is kept"
        expect(figure.get_by_role("status")).to_contain_text("of a range")
        assert page.evaluate("window.sameDocument") is True, "never reloaded"
    finally:
        s3.put_object(Bucket=BUCKET, Key=history, Body=METRICS[1])
