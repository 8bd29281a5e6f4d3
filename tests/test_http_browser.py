"""The dashboard in headless Chromium (Debian's package, driven by Playwright's Python
package): open it, create an item through the API, run a worker (one metered LLM
request per Run), and watch the page reach ``done`` with every criterion met, every
Run on the timeline and the requests on the budget gauge, without a reload; and post a
message to the Coordinator through the page's form and watch its reply appear, again
without a reload. The screenshots are kept under ``artifacts/`` (not committed).

It skips only where no Chromium (or Playwright) is installed and ``CI`` is not set:
in CI a missing browser is a failure (``.ci/run`` installs it).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn

import httpx
import pytest
from http_client import LINEAR, served

from workcenter.adapters.demo import ScriptedLlm, llm_request
from workcenter.adapters.executors import echo
from workcenter.adapters.http.app import create_app
from workcenter.adapters.metered import MeteredProvider
from workcenter.adapters.providers.scripted import ScriptedProvider, permanent
from workcenter.adapters.providers.scripted_coordinator import scripted_coordinator
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
    provider = ScriptedLlm()

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


@contextmanager
def launched_chromium() -> Iterator[Any]:
    """Debian's Chromium, headless, through Playwright (skips as ``chromium`` says)."""
    executable = chromium()
    with playwright_api().sync_playwright() as p:
        launched = p.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def wc(db_path: Path) -> Iterator[WorkCenter]:
    with WorkCenter.open(db_path) as center:
        yield center


@pytest.fixture
def browser(wc: WorkCenter) -> Iterator[tuple[Any, str]]:
    """A headless Chromium and the base URL of ``wc`` served on 127.0.0.1."""
    executable = chromium()
    playwright = playwright_api()
    with served(create_app(wc)) as base, playwright.sync_playwright() as p:
        launched = p.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        try:
            yield launched, base
        finally:
            launched.close()


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
            rows = page.locator("#audit tbody tr").count()
            assert rows > 10
            assert page.text_content("#audit-note") == f"(all {rows} events)"
            assert page.locator(".tl-run.completed").count() == 3
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "dashboard.png"))
            assert errors == []
        finally:
            browser.close()


def dynamic_item_on_a_page(browser: tuple[Any, str]) -> tuple[Any, list[str], str]:
    """A page of the dashboard, live, showing a dynamic item just created and started:
    the page, its errors and the item's id."""
    chromium_browser, base = browser
    page = chromium_browser.new_page(viewport={"width": 1280, "height": 1000})
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(base + "/")
    page.wait_for_selector("#live.on", timeout=TIMEOUT_MS)
    page.evaluate("window.loadedOnce = true")  # gone if the page reloads
    body = LINEAR | {"mode": "dynamic", "stages": None, "start": True}
    response = httpx.post(base + "/api/work-items", json=body, timeout=30)
    assert response.status_code == 201
    item_id: str = response.json()["id"]
    page.wait_for_selector(f"#item-list li.selected[data-id='{item_id}']", timeout=TIMEOUT_MS)
    return page, errors, item_id


def test_a_message_posted_on_the_page_gets_the_coordinators_reply_without_a_reload(
    browser: tuple[Any, str], db_path: Path
) -> None:
    base = browser[1]
    page, errors, _ = dynamic_item_on_a_page(browser)
    page.wait_for_selector("#message-send:enabled", timeout=TIMEOUT_MS)
    assert page.is_visible("#no-messages")

    page.fill("#message-text", "Please plan the fix")
    page.click("#message-send")
    page.wait_for_selector(
        "#conversation li.msg.assistant[data-status='thinking']", timeout=TIMEOUT_MS
    )
    assert page.text_content("#conversation li.msg.user .msg-text") == "Please plan the fix"
    assert page.input_value("#message-text") == ""
    assert page.is_hidden("#message-error")

    with WorkCenter.open(db_path) as coordinator_wc:  # `workcenter coordinate --once`
        steps = coordinator_wc.coordinate_once(scripted_coordinator())
    assert any(step.status == "decided" for step in steps)

    reply = "#conversation li.msg.assistant[data-status='completed']"
    page.wait_for_selector(reply + " .decision[data-kind='create_actions']", timeout=TIMEOUT_MS)
    assert "planned" in (page.text_content(reply + " .msg-text") or "")
    # Its verdict, and a link to its decision's provenance (ADR-0061).
    page.wait_for_selector(reply + " .verdict.applied", timeout=TIMEOUT_MS)
    link = page.get_attribute(reply + " a.provenance", "href") or ""
    assert "/decisions?turn=" in link
    assert httpx.get(base + link, timeout=30).json()["turns"][0]["verdict"]["kind"] == "applied"
    page.wait_for_function(
        "() => document.querySelectorAll('.tl-row').length === 1", timeout=TIMEOUT_MS
    )
    assert page.evaluate("window.loadedOnce") is True
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "dashboard-conversation.png"))
    assert errors == []


def test_a_reply_and_a_change_of_status_are_said_to_a_screen_reader_once(
    browser: tuple[Any, str], db_path: Path
) -> None:
    """Changes that come over the change stream were on the page but in no live region:
    a screen reader said nothing of the Coordinator's reply or of a cancel (found by
    acceptance testing, ADR-0142). The item's first read says nothing."""
    base = browser[1]
    page, errors, item_id = dynamic_item_on_a_page(browser)
    page.wait_for_selector("#message-send:enabled", timeout=TIMEOUT_MS)
    assert page.title() == "Fix the failing import \u2013 Workcenter"
    said: list[str] = []
    page.expose_function("heard", lambda words: said.append(words))
    page.evaluate(
        "() => new MutationObserver(() => { const t = announcer.textContent;"
        " if (t) heard(t); }).observe(announcer, {childList: true, characterData: true,"
        " subtree: true})"
    )
    assert page.get_attribute("#announcer", "aria-live") == "polite"
    page.fill("#message-text", "Please plan the fix")
    page.click("#message-send")
    page.wait_for_selector(
        "#conversation li.msg.assistant[data-status='thinking']", timeout=TIMEOUT_MS
    )
    with WorkCenter.open(db_path) as coordinator_wc:
        coordinator_wc.coordinate_once(scripted_coordinator())
    page.wait_for_function("() => announcer.textContent.includes('planned')", timeout=TIMEOUT_MS)
    # The reply, then what it did to the item (in one announcement or two, as the reads
    # of the conversation and of the item fell).
    page.wait_for_function("() => state.detail.status === 'ready'", timeout=TIMEOUT_MS)
    version = httpx.get(f"{base}/api/work-items/{item_id}", timeout=30).headers["ETag"]
    cancelled = httpx.post(
        f"{base}/api/work-items/{item_id}/cancel", headers={"If-Match": version}, json={}
    )
    assert cancelled.status_code == 200, cancelled.text
    page.wait_for_function(
        "() => announcer.textContent === 'Status cancelled.'", timeout=TIMEOUT_MS
    )
    page.wait_for_timeout(500)  # reads after it say nothing again
    heard = " ".join(said)
    assert heard.startswith("Coordinator: I planned") and heard.endswith("Status cancelled.")
    for words in ("Coordinator:", "Status ready.", "Status cancelled."):
        assert heard.count(words) == 1, said
    # Back from an id that names no item, the item's read is a first read: nothing said.
    page.evaluate("() => { location.hash = '#00000000-0000-0000-0000-000000000000'; }")
    page.wait_for_selector("#not-found:visible", timeout=TIMEOUT_MS)
    version = httpx.get(f"{base}/api/work-items/{item_id}", timeout=30).headers["ETag"]
    resumed = httpx.post(
        f"{base}/api/work-items/{item_id}/resume", headers={"If-Match": version}, json={}
    )
    assert resumed.status_code == 200, resumed.text  # changed while the page was away
    page.evaluate("(id) => { location.hash = '#' + id; }", item_id)
    page.wait_for_selector("#detail:not([hidden])", timeout=TIMEOUT_MS)
    page.wait_for_timeout(500)
    assert " ".join(said) == heard, said
    assert errors == []


def test_the_page_says_when_only_a_message_can_plan_the_item(
    browser: tuple[Any, str], db_path: Path
) -> None:
    """A Coordinator turn that failed for good leaves a dynamic item running with nothing
    planned and nothing due; the page says a message is needed (ADR-0129)."""
    page, errors, _ = dynamic_item_on_a_page(browser)
    page.wait_for_selector("#plan-wait:has-text('next step is due')", timeout=TIMEOUT_MS)

    with WorkCenter.open(db_path) as coordinator_wc:
        steps = coordinator_wc.coordinate_once(ScriptedProvider([permanent()]))
    assert [step.status for step in steps] == ["failed"]
    page.wait_for_selector("#plan-wait:has-text('last turn failed')", timeout=TIMEOUT_MS)
    assert "Send a message" in (page.text_content("#plan-wait") or "")

    page.wait_for_selector("#message-send:enabled", timeout=TIMEOUT_MS)
    page.fill("#message-text", "Try again, smaller steps")
    page.click("#message-send")
    page.wait_for_selector("#plan-wait:has-text('next step is due')", timeout=TIMEOUT_MS)
    with WorkCenter.open(db_path) as coordinator_wc:
        coordinator_wc.coordinate_once(scripted_coordinator())
    page.wait_for_selector("#plan-wait", state="hidden", timeout=TIMEOUT_MS)
    assert errors == []


def test_a_bookmarked_id_that_names_no_item_is_said_on_the_page(
    browser: tuple[Any, str], wc: WorkCenter
) -> None:
    # The page stayed empty, the 404s only in the console, read again on every refresh.
    chromium_browser, base = browser
    item = wc.create_work_item(title="Kept", goal="g", acceptance_criteria=["c"])
    page = chromium_browser.new_page(viewport={"width": 1280, "height": 1000})
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    unknown = "00000000-0000-0000-0000-000000000000"
    page.goto(f"{base}/#{unknown}")
    page.wait_for_selector("#not-found:visible", timeout=TIMEOUT_MS)
    assert page.text_content("#not-found") == f"No work item has the id {unknown}."
    assert page.is_hidden("#detail")
    page.click(f"#item-list li[data-id='{item.id}']")
    page.wait_for_selector("#detail:visible", timeout=TIMEOUT_MS)
    assert page.is_hidden("#not-found")
    assert errors == []
