"""The dashboard in headless Chromium (Debian's package, driven by Playwright's Python
package): open it, create an item through the API, run a worker (one metered LLM
request per Run), and watch the page reach ``done`` with every criterion met, every
Run on the timeline and the requests on the budget gauge, without a reload. The screenshot is kept
under ``artifacts/`` (not committed).

It skips only where no Chromium (or Playwright) is installed and ``CI`` is not set:
in CI a missing browser is a failure (``.ci/run`` installs it).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn

import httpx
import pytest
from http_client import LINEAR, served

from workcenter.adapters.demo import ScriptedProvider, llm_request
from workcenter.adapters.executors import echo
from workcenter.adapters.http.app import create_app
from workcenter.adapters.metered import MeteredProvider
from workcenter.adapters.worker import run_worker
from workcenter.application import Claim, WorkCenter

ARTIFACTS = Path(__file__).parent.parent / "artifacts"
TIMEOUT_MS = 20_000


def _missing(what: str, how: str) -> NoReturn:
    if os.environ.get("CI"):
        pytest.fail(f"CI is set but {what} ({how})")
    pytest.skip(f"{what} ({how}) and CI is not set")


def metered_echo(wc: WorkCenter) -> Callable[[Claim], dict[str, Any]]:
    """The echo executor after one LLM request through the item's budget (a fake
    provider reporting its usage), so the budget gauges move too."""
    provider = ScriptedProvider()

    def run(claim: Claim) -> dict[str, Any]:
        MeteredProvider.for_claim(wc, claim, provider=provider)(llm_request(claim.brief.objective))
        return echo(claim)

    return run


def chromium() -> str:
    found = os.environ.get("WORKCENTER_CHROMIUM") or shutil.which("chromium")
    if found is None and Path("/usr/bin/chromium").exists():
        found = "/usr/bin/chromium"
    if found is None:
        _missing("no Chromium is installed", ".ci/run installs it: apt-get install chromium")
    return found


def playwright_api() -> Any:
    try:
        from playwright import sync_api
    except ImportError:
        _missing("Playwright is not installed", "pip install -e '.[dev]'")
    return sync_api


@pytest.fixture
def wc(db_path: Path) -> Iterator[WorkCenter]:
    with WorkCenter.open(db_path) as center:
        yield center


def test_the_dashboard_follows_an_item_to_done_without_a_reload(
    wc: WorkCenter, db_path: Path
) -> None:
    executable = chromium()
    playwright = playwright_api()
    with (
        served(create_app(wc)) as base,
        playwright.sync_playwright() as p,
    ):
        browser = p.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1000})
            errors: list[str] = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            page.goto(base + "/")
            page.wait_for_selector("#live.on", timeout=TIMEOUT_MS)
            assert page.is_visible("#no-items")
            page.evaluate("window.loadedOnce = true")  # gone if the page reloads

            body = LINEAR | {"limits": {"maxTokens": 4000, "maxRequests": 10}}
            response = httpx.post(base + "/api/work-items", json=body, timeout=30)
            assert response.status_code == 201
            item_id = response.json()["id"]
            page.wait_for_selector(f"#item-list li[data-id='{item_id}']", timeout=TIMEOUT_MS)
            page.wait_for_function(
                "() => document.querySelector('#item-status').textContent === 'ready'",
                timeout=TIMEOUT_MS,
            )

            with WorkCenter.open(db_path) as worker_wc:  # a worker beside the server
                stats = run_worker(
                    worker_wc,
                    metered_echo(worker_wc),
                    worker="w1",
                    exit_when_idle=True,
                    poll_seconds=0.05,
                )
            assert stats.finished == 3 and stats.errors == 0

            page.wait_for_function(
                """() => document.querySelector('#item-status').textContent === 'done'
                    && [...document.querySelectorAll('#criteria tr.criterion')]
                        .filter((row) => row.dataset.status === 'met').length === 3
                    && [...document.querySelectorAll('.tl-row')]
                        .filter((row) => row.dataset.status === 'completed').length === 3""",
                timeout=TIMEOUT_MS,
            )
            page.wait_for_function(
                "() => document.querySelector('#gauge-requests .gauge-value').textContent"
                " === '3 of 10'",
                timeout=TIMEOUT_MS,
            )
            assert page.evaluate("window.loadedOnce") is True
            assert page.text_content("#progress-count") == "(3 of 3 met)"
            assert page.locator("#audit tbody tr").count() > 10
            assert page.locator(".tl-run.completed").count() == 3
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "dashboard.png"))
            assert errors == []
        finally:
            browser.close()
