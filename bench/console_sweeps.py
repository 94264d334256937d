"""`bench/console.py`'s ``sweeps`` case: a sweep page of ``--trials`` trials x ``--parameters`` parameters in real
Chromium: its parallel coordinates drawn (target <= 1 s) and a brush's range set until the rung table shows the
trials inside it, laid out (target <= 100 ms).

The page is the console's own template rendered by its `Renderer` from a `SweepView` made up here, and its data the
console's own `plot_data` of it: the scheduler has no way to hold a 1,000-trial sweep without running one. The
browser fetches them from the console's address (routed by Playwright) and the scripts from the console itself.
Baseline, same run: the page's load (its 1,000-row table parsed and laid out, no plot)."""

from __future__ import annotations

import json
import random
import statistics
import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

from playwright.sync_api import Page, Route

from learnerkit.scheduler.console.rendering import SECURITY_HEADERS, Renderer
from learnerkit.scheduler.console.sweeps_pages import SWEEP_ACTIONS
from learnerkit.scheduler.console.sweeps_views import plot_data, segments, trial_row
from learnerkit.scheduler.console.views import readable_time
from learnerkit.scheduler.facade import ParameterView, SweepView, TrialView

SWEEP_ID = "sweep-bench000"
RUNGS = (1, 3, 9, 27)


def made_up(trials: int, parameters: int, seed: int = 7) -> SweepView:
    """A finished ASHA sweep: log-uniform, uniform and choice parameters in turn; fewer trials at each rung."""
    rng = random.Random(seed)
    space = []
    for n in range(parameters):
        if n % 5 == 4:
            space.append(ParameterView(f"p{n:02d}", "choice", values=("a", "b", "c", "d")))
        elif n % 2 == 0:
            space.append(ParameterView(f"p{n:02d}", "log_uniform", 1e-5, 1.0))
        else:
            space.append(ParameterView(f"p{n:02d}", "uniform", 0.0, 10.0))
    views = []
    for index in range(trials):
        values: dict[str, float | int | str | bool] = {}
        for p in space:
            if p.type == "choice":
                values[p.name] = rng.choice(p.values)
            elif p.type == "log_uniform":
                values[p.name] = 10 ** rng.uniform(-5, 0)
            else:
                values[p.name] = rng.uniform(0, 10)
        rungs = 1 + sum(rng.random() < 1 / 3**k for k in range(1, len(RUNGS)))
        results = tuple(rng.uniform(0.1, 1.0) / (k + 1) for k in range(rungs))
        views.append(
            TrialView(index, f"{SWEEP_ID}-t{index:04d}", "stopped", rungs, RUNGS[rungs - 1], results, "", values)
        )
    return SweepView(
        SWEEP_ID, "bench", "done", "", "asha", "val_loss", "minimize", "step", RUNGS, trials, 8,
        "2026-11-29T00:00:00+00:00", trials=tuple(views), space=tuple(space),
    )  # fmt: skip


def page_html(view: SweepView) -> str:
    session = SimpleNamespace(tenant="bench", csrf="unused", operator=False)
    response = Renderer().page(
        "sweep.html.j2",
        session=session,
        title=f"Sweep {view.sweep_id}",
        sweep=view,
        done="",
        actions=tuple(SWEEP_ACTIONS.values()),
        best=plot_data(view)["best"],
        trials=[trial_row(t) for t in view.trials],
        timelines=[(t.job_id, segments((), t.state)) for t in view.trials],
        readable_time=readable_time,
        sweeps_live_after="",
    )
    return bytes(response.body).decode()


def sweeps_case(page: Page, url: str, trials: int, parameters: int, runs: int) -> Iterator[str]:
    view = made_up(trials, parameters)
    started = time.perf_counter()
    data = plot_data(view) | {"best_so_far": []}
    body = json.dumps(data)
    server_ms = (time.perf_counter() - started) * 1000
    html = page_html(view)

    def answer(route: Route) -> None:
        path = route.request.url.removeprefix(url)
        if path == f"/ui/sweeps/{SWEEP_ID}":
            route.fulfill(status=200, body=html, headers=SECURITY_HEADERS | {"Content-Type": "text/html"})
        elif path == f"/ui/sweeps/{SWEEP_ID}/data":
            route.fulfill(status=200, body=body, headers={"Content-Type": "application/json"})
        else:  # a trial's curve: none in this case
            empty = {"job_id": "", "metric": "val_loss", "steps": 0, "x": [], "y": [], "marks": []}
            route.fulfill(status=200, body=json.dumps(empty), headers={"Content-Type": "application/json"})

    page.route(f"{url}/ui/sweeps/{SWEEP_ID}**", answer)
    draws, brushes, loads, scripts = [], [], [], []
    for _ in range(runs):
        page.goto(f"{url}/ui/sweeps/{SWEEP_ID}")
        page.wait_for_selector("#parallel[data-set-ms]")
        draws.append(float(page.locator("#parallel").get_attribute("data-set-ms") or "nan"))
        loads.append(page.evaluate("performance.getEntriesByType('navigation')[0].domContentLoadedEventEnd"))
        brushes.append(_brush_ms(page))
        scripts.append(float(page.locator("#parallel").get_attribute("data-filter-ms") or "nan"))
    shown = page.locator("tbody[data-live=trials] tr:not([hidden])").count()
    yield f"plot data of {trials} trials x {parameters} parameters on the server: {server_ms:.1f} ms, {len(body)} B"
    yield _line("parallel coordinates drawn (median)", statistics.median(draws), "<= 1000", statistics.median(loads))
    yield _line("brush to table laid out (median)", statistics.median(brushes), "<= 100", statistics.median(loads))
    yield f"  (of which the script: {statistics.median(scripts):.1f} ms; the rest is the table's layout)"
    yield f"  ({shown} of {trials} rows shown after the last brush; each figure the median of {runs} page loads)"


def _brush_ms(page: Page) -> float:
    """A range set on the first axis as a person types it (the input's change event), until the table's rows are
    hidden or shown and the page laid out again."""
    measured: Any = page.evaluate(
        """() => {
            const input = document.querySelector('#parallel .brush input');
            const started = performance.now();
            input.value = '0.001';
            input.dispatchEvent(new Event('change'));
            document.querySelector('table.trials').getBoundingClientRect();
            return performance.now() - started;
        }"""
    )
    return float(measured)


def _line(name: str, figure: float, target: str, baseline: float) -> str:
    return f"{name:<44} {figure:>10.1f} ms  target {target}  x{figure / baseline:.2f} the baseline ({baseline:.1f} ms)"
