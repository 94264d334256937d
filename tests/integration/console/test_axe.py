"""axe-core (the npm package of the console's lock, injected here: never fetched by a page) on every console page,
light and dark, with JavaScript on: no serious or critical violation."""

from __future__ import annotations

import json
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from tests.integration.conftest import REPO
from tests.integration.console.conftest import Console, Pages, log_in

pytestmark = [pytest.mark.integration, pytest.mark.services, pytest.mark.timeout(300)]

AXE = REPO / "learnerkit/scheduler/console/frontend/node_modules/axe-core/axe.min.js"
BLOCKING = ("serious", "critical")


def _violations(page: Page, source: str) -> list[dict[str, Any]]:
    """axe's serious and critical violations on the page as it is now (its WCAG 2.x A and AA rules)."""
    page.evaluate(source + "\n;0")  # a DevTools evaluation: the page's CSP allows no script but its own
    found: list[dict[str, Any]] = page.evaluate(
        """async () => (await axe.run(document, {runOnly: ['wcag2a', 'wcag2aa', 'wcag21aa', 'best-practice']}))
            .violations.map(v => ({id: v.id, impact: v.impact, help: v.help,
                                   nodes: v.nodes.map(n => n.target.join(' ')).slice(0, 5)}))"""
    )
    return [v for v in found if v["impact"] in BLOCKING]


@pytest.fixture(scope="module")
def axe_source() -> str:
    if not AXE.is_file():
        pytest.fail(f"{AXE} is missing: scripts/setup.sh installs the console's npm packages (scripts/frontend.sh)")
    return AXE.read_text()


@pytest.mark.parametrize("dark", [False, True], ids=["light", "dark"])
def test_no_console_page_has_a_serious_or_critical_violation(
    console: Console, pages: Pages, axe_source: str, dark: bool
) -> None:
    page = pages.open(dark=dark)
    found: dict[str, list[dict[str, Any]]] = {}
    page.goto(console.url + "/ui/login")
    found["login"] = _violations(page, axe_source)
    log_in(page, console, token=console.token[:-4] + "AAAA")
    expect(page.get_by_role("alert")).to_be_visible()
    found["login, refused"] = _violations(page, axe_source)
    log_in(page, console)
    job = f"/ui/jobs/{console.job_id}"
    for name, path in (
        ("jobs", "/ui/jobs"),
        ("jobs, filtered", "/ui/jobs?status=HALTED&q=mnist&sort=name&limit=25"),
        ("jobs, a bad filter", "/ui/jobs?since=yesterday"),
        ("job", job),
        ("job, attempt 1", f"{job}?attempt=1"),
        ("log range", f"{job}/log?attempt=1"),
        ("not found", "/ui/jobs/job-unknown"),
        ("submit", "/ui/submit"),
    ):
        page.goto(console.url + path)
        if name == "job":
            expect(page.locator("figure.chart canvas")).to_have_count(1)  # axe checks the charts too
        found[name] = _violations(page, axe_source)
    broken = {name: v for name, v in found.items() if v}
    assert not broken, json.dumps(broken, indent=1)
