"""The dashboard as a user's tool at a few hundred items, in headless Chromium: with 500
items in the store, find an item by search, page through the list while items are
created (the page shown does not shift), start a draft, create an item from the form
(a refusal first, in the server's words), guide a failed Action, answer a waiting
Action's question, lift a Coordinator-failures stop from the page (the page says which
limit stopped the item and pre-fills the extension), and see each change live, without
a reload. A title with a bidi override is shown escaped. A missing or refused API
token is said as such. Screenshots go to ``artifacts/`` (copies are kept in docs/).
Skips as ``test_http_browser`` does without Chromium."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import budget_commands, report
from http_client import served
from test_http_api import fail_current_action
from test_http_browser import ARTIFACTS, TIMEOUT_MS, launched_chromium

from workcenter.adapters.http.app import create_app
from workcenter.adapters.http.guard import Policy
from workcenter.application import WorkCenter

ITEMS = 500
BIDI_TITLE = "\u202egnp.exe"
TOKEN = "a-token-for-the-browser-test"


@pytest.fixture
def wc(db_path: Path) -> Iterator[WorkCenter]:
    with WorkCenter.open(db_path) as center:
        yield center


@pytest.fixture
def browser() -> Iterator[Any]:
    with launched_chromium() as launched:
        yield launched


def fill_store(wc: WorkCenter) -> dict[str, Any]:
    """500 drafts, the needle among the oldest, a dynamic draft to start, a bidi title."""
    ids: list[str] = []
    named: dict[str, Any] = {}
    for n in range(ITEMS):
        if n == 40:
            item = wc.create_work_item(
                title="Needle item", goal="Find the haystack's needle", mode="linear"
            )
            named["needle"] = str(item.id)
        elif n == 120:
            item = wc.create_work_item(
                title="Draft to start",
                goal="Plan the migration",
                acceptance_criteria=["The plan is written"],
                delivery_target="response",
            )
            named["draft"] = str(item.id)
        elif n == 200:
            item = wc.create_work_item(title=BIDI_TITLE, goal="A title that lies")
            named["bidi"] = str(item.id)
        else:
            item = wc.create_work_item(title=f"Item {n:03d}", goal="Routine work", mode="linear")
        ids.append(str(item.id))
    named["ids"] = ids
    return named


def wait_text(page: Any, selector: str, text: str) -> None:
    page.wait_for_function(
        "([s, t]) => { const n = document.querySelector(s); return n && n.textContent === t; }",
        arg=[selector, text],
        timeout=TIMEOUT_MS,
    )


def rows(page: Any) -> list[str]:
    ids: list[str] = page.evaluate(
        "() => [...document.querySelectorAll('#item-list li')].map((li) => li.dataset.id)"
    )
    return ids


def wait_rows(page: Any, first: str, count: int | None = None) -> None:
    page.wait_for_function(
        "([first, count]) => { const r = document.querySelectorAll('#item-list li');"
        " return r.length > 0 && r[0].dataset.id === first"
        " && (count === null || r.length === count); }",
        arg=[first, count],
        timeout=TIMEOUT_MS,
    )


def wait_current_etag(page: Any, base: str, item_id: str) -> None:
    """Wait until the page holds the item's current ETag: it reads the budget and the
    detail (which carries the ETag a command sends) separately, so it can show a stop
    while still holding the ETag from before it, and a click then is rightly refused
    as stale."""
    etag = httpx.get(f"{base}/api/work-items/{item_id}").headers["ETag"]
    page.wait_for_function("(etag) => state.itemEtag === etag", arg=etag, timeout=TIMEOUT_MS)


def note(page: Any, kind: str) -> str:
    try:
        page.wait_for_selector(f"#command-note[data-kind='{kind}']:visible", timeout=TIMEOUT_MS)
    except Exception:  # Playwright's timeout: say what the page shows instead
        shown = page.evaluate(
            "() => { const n = document.getElementById('command-note');"
            " return {hidden: n.hidden, kind: n.dataset.kind, text: n.textContent}; }"
        )
        raise AssertionError(f"no {kind!r} note on the page, which shows {shown}") from None
    text: str = page.text_content("#command-note") or ""
    page.evaluate("document.getElementById('command-note').hidden = true")
    return text


def choose(page: Any, search: str, item_id: str, title: str) -> None:
    page.fill("#search", search)
    page.wait_for_selector(f"#item-list li[data-id='{item_id}']", timeout=TIMEOUT_MS)
    page.click(f"#item-list li[data-id='{item_id}']")
    wait_text(page, "#item-title", title)


def test_a_user_works_through_500_items_on_the_page(wc: WorkCenter, browser: Any) -> None:
    store = fill_store(wc)
    ids = store["ids"]
    ARTIFACTS.mkdir(exist_ok=True)
    with served(create_app(wc)) as base:
        page = browser.new_page(viewport={"width": 1360, "height": 1100})
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.goto(base + "/")
        page.wait_for_selector("#live.on", timeout=TIMEOUT_MS)
        page.evaluate("window.loadedOnce = true")  # gone if the page reloads
        wait_rows(page, ids[-1], 50)  # newest first, a page of 50
        wait_text(page, "#item-title", "Item 499")  # the newest is shown until one is chosen
        assert page.text_content("#item-count") == "(500)"

        # Find an item by search (over the goal too), and choose it.
        page.fill("#search", "HAYSTACK")
        wait_rows(page, store["needle"], 1)
        wait_text(page, "#item-count", "(1 found)")
        page.click(f"#item-list li[data-id='{store['needle']}']")
        wait_text(page, "#item-title", "Needle item")

        # Page back through the list; items created meanwhile shift no page.
        page.fill("#search", "")
        wait_rows(page, ids[-1], 50)
        page.click("#older:enabled")
        wait_rows(page, ids[-51], 50)
        page.click("#older:enabled")
        wait_rows(page, ids[-101], 50)
        third = rows(page)
        assert third == ids[-101:-151:-1]
        created = [
            httpx.post(base + "/api/work-items", json={"title": f"New {n}", "goal": "g"}).json()[
                "id"
            ]
            for n in range(3)
        ]
        wait_text(page, "#item-count", "(503)")  # the list was read again, live
        assert rows(page) == third and page.text_content("#page-note") == "page 3"
        wait_text(page, "#item-title", "Needle item")  # the selection stayed
        page.screenshot(path=str(ARTIFACTS / "dashboard-list.png"))
        page.click("#newer:enabled")
        page.click("#newer:enabled")
        wait_rows(page, created[-1], 50)

        # Start a draft from the page.
        choose(page, "draft to start", store["draft"], "Draft to start")
        page.click("#start:enabled", timeout=TIMEOUT_MS)
        assert note(page, "ok") == "Started."
        wait_text(page, "#item-status", "running")
        assert wc.work_item(store["draft"]).status == "running"

        # Its Coordinator fails three times: the item stops; the page says why and
        # pre-fills what lifts the stop; extend and resume from the page.
        failures = budget_commands(wc)
        for n in range(3):
            failures.record_coordinator_failure(store["draft"], turn_id=f"turn-{n}")
        page.wait_for_selector(
            "#budget-stop[data-code='coordinator_failures_exhausted']:visible", timeout=TIMEOUT_MS
        )
        said = page.text_content("#budget-stop")
        assert said == (
            "Stopped by the Coordinator failure limit: the Coordinator failed 3 times"
            " (limit 3). Extend Coordinator failures by at least 1, then Resume."
        ), said
        assert page.input_value("#extend-coordinator-failures") == "1"
        assert page.input_value("#extend-tokens") == ""
        page.screenshot(path=str(ARTIFACTS / "dashboard-stop.png"))
        # Too early: greyed out, saying why (it was clicked and refused, ADR-0133).
        assert page.is_disabled("#resume")
        assert page.get_attribute("#resume", "title") == (
            "Extend first: the stop above says by how much"
        )
        page.click("#extend:enabled", timeout=TIMEOUT_MS)
        assert note(page, "ok") == "Budget extended."
        # Raised enough: it said "by at least 1" still, whatever was added.
        page.wait_for_function(
            "() => document.querySelector('#budget-stop').textContent.endsWith("
            "'(limit 4). Its limit now allows it: Resume.')",
            timeout=TIMEOUT_MS,
        )
        page.click("#resume:enabled", timeout=TIMEOUT_MS)
        assert note(page, "ok") == "Resumed."
        page.wait_for_selector("#budget-stop", state="hidden", timeout=TIMEOUT_MS)
        assert wc.ledger(store["draft"]).stop_reason is None  # type: ignore[arg-type]
        assert wc.work_item(store["draft"]).status == "running"

        # Create an item from the form: a refusal first, in the server's words.
        page.click("#new-item")
        page.fill("#create-title", "Fix the flaky upload")
        page.fill("#create-goal", "   ")
        page.fill("#create-criteria", "Uploads pass 100 times\nThe cause is written down")
        page.select_option("#create-delivery", "response")
        page.select_option("#create-mode", "linear")
        page.fill("#create-stages", "triage, implement")
        page.fill("#create-max-tokens", "50000")
        page.fill("#create-max-action-attempts", "4")
        page.check("#create-start")
        page.click("#create-submit")
        page.wait_for_selector("#create-error:visible", timeout=TIMEOUT_MS)
        assert page.text_content("#create-error") == (
            "Refused: InvalidInput: goal is required (it is blank)"
        )
        page.fill("#create-goal", "Uploads never fail on a slow network")
        page.screenshot(path=str(ARTIFACTS / "dashboard-create.png"))
        page.click("#create-submit")
        wait_text(page, "#item-title", "Fix the flaky upload")
        wait_text(page, "#item-status", "ready")
        made = page.evaluate("state.selected")
        item = wc.work_item(made)
        assert item.acceptance_criteria == ("Uploads pass 100 times", "The cause is written down")
        assert item.mode == "linear" and item.delivery_target == "response"
        limits = wc.ledger(made).limits
        assert (limits.max_tokens, limits.max_action_attempts) == (50_000, 4)

        # A worker's Run fails: the page follows; guide the failed Action from the page.
        failed = fail_current_action(wc)
        page.wait_for_function(
            "() => state.detail && (state.detail.actionCounts || {}).failed === 1",
            timeout=TIMEOUT_MS,
        )
        page.click(".tl-row[data-status='failed'] button.guide:enabled", timeout=TIMEOUT_MS)
        page.fill("#action-text", "Retry the upload with a 30 s timeout")
        page.screenshot(path=str(ARTIFACTS / "dashboard-guide.png"))
        page.click("#action-send")
        assert note(page, "ok") == "Action 1 retried with your guidance."
        page.wait_for_function(
            "() => !document.querySelector(\".tl-row[data-status='failed']\")"
            " && document.querySelector(\".tl-row[data-status='ready'] button.guide\")",
            timeout=TIMEOUT_MS,
        )
        assert wc.action(failed).status == "superseded"  # type: ignore[arg-type]

        # The next Run asks a question: answer it from the page.
        claim = wc.claim_next("w1")
        assert claim is not None and str(claim.work_item_id) == made
        criteria = list(item.acceptance_criteria)
        wc.finish_run(claim, report("waiting", criteria=criteria, check_status="unmet"))
        page.wait_for_function(
            "() => state.detail && (state.detail.actionCounts || {}).waiting === 1",
            timeout=TIMEOUT_MS,
        )
        page.click(".tl-row[data-status='waiting'] button.answer:enabled", timeout=TIMEOUT_MS)
        label = page.text_content("#action-form-label") or ""
        assert label.endswith(": Which database should I use?"), label
        page.fill("#action-text", "Use PostgreSQL")
        page.click("#action-send")
        assert note(page, "ok") == "Action 2 answered."
        page.wait_for_selector("#action-form", state="hidden", timeout=TIMEOUT_MS)
        assert wc.action(claim.action_id).status != "waiting"  # type: ignore[arg-type]

        # A title with a bidi override reads as what it is.
        choose(page, "gnp", store["bidi"], "\\u202egnp.exe")
        row = page.text_content(f"#item-list li[data-id='{store['bidi']}'] .item-title")
        assert row == "\\u202egnp.exe"

        assert page.evaluate("window.loadedOnce") is True  # every change came live
        assert errors == []


def test_a_missing_or_refused_token_is_said_as_such(wc: WorkCenter, browser: Any) -> None:
    wc.create_work_item(title="Guarded", goal="g")
    policy = Policy.for_host("127.0.0.1", token=TOKEN)
    with served(create_app(wc, policy)) as base:
        page = browser.new_page()
        page.goto(base + "/")
        page.wait_for_selector("#token-form:visible", timeout=TIMEOUT_MS)
        assert page.text_content("#token-note") == "This server needs its API token."
        page.fill("#token", "not-the-token-at-all")
        page.click("#token-form button")
        wait_text(page, "#token-note", "The API token was refused: enter it again.")
        page.fill("#token", TOKEN)
        page.click("#token-form button")
        wait_text(page, "#item-title", "Guarded")
        assert page.is_hidden("#token-form")


def test_a_create_submitted_again_after_its_answer_was_lost_makes_one_item(
    wc: WorkCenter, browser: Any
) -> None:
    with served(create_app(wc)) as base:
        page = browser.new_page()
        page.goto(base + "/")
        lost: list[str] = []

        def lose_the_answer(route: Any) -> None:
            # The server makes the item; the page never hears of it.
            lost.append(route.fetch().json()["id"])
            route.abort("connectionreset")

        page.route("**/api/work-items", lose_the_answer, times=1)
        page.click("#new-item")
        page.fill("#create-title", "Made once")
        page.fill("#create-goal", "One item, however often the form is sent")
        page.click("#create-submit")
        page.wait_for_selector("#create-error:visible", timeout=TIMEOUT_MS)
        page.click("#create-submit")
        wait_text(page, "#item-title", "Made once")
        assert page.evaluate("state.selected") == lost[0]
        assert [str(row["id"]) for row in wc.list_work_items()] == lost


def test_a_token_stop_says_what_the_refused_request_needed(wc: WorkCenter, browser: Any) -> None:
    item = wc.create_work_item(
        title="Small budget",
        goal="g",
        mode="linear",
        stages=["work"],
        start=True,
        limits={"max_tokens": 1000},
    )
    with served(create_app(wc)) as base:
        page = browser.new_page(viewport={"width": 1360, "height": 1100})
        page.goto(base + "/")
        wait_text(page, "#item-title", "Small budget")
        denied = wc.reserve_request(
            item.id, request={"messages": [{"role": "user", "content": "word " * 2000}]}
        )
        assert not denied.allowed
        stop = wc.ledger(item.id).stop_reason
        assert stop is not None and stop.code == "work_item_tokens_exhausted"
        asked = int(stop.details["estimated_next_tokens"] or 0)
        page.wait_for_selector("#budget-stop[data-limit='maxTokens']:visible", timeout=TIMEOUT_MS)
        said = page.text_content("#budget-stop")
        # The least lets the refused request through; the field holds room for one more
        # such request, as the Coordinator's next one is a little larger (ADR-0091).
        need, suggest = asked - 1000, asked - 1000 + asked
        assert said == (
            f"Stopped by the token limit: 0 of 1,000 tokens charged; the refused request"
            f" needed {asked:,} tokens. Extend tokens by at least {need:,} ({suggest:,} leaves"
            " room for one more such request), then Resume."
        ), said
        assert page.input_value("#extend-tokens") == str(suggest)
        wait_current_etag(page, base, str(item.id))
        page.click("#extend:enabled")
        assert note(page, "ok") == "Budget extended."
        wait_current_etag(page, base, str(item.id))
        page.click("#resume:enabled", timeout=TIMEOUT_MS)
        assert note(page, "ok") == "Resumed."
        assert wc.ledger(item.id).stop_reason is None
        assert wc.reserve_request(
            item.id, request={"messages": [{"role": "user", "content": "word " * 2000}]}
        ).allowed


def test_a_token_stop_whose_turns_spent_the_failures_names_both(
    wc: WorkCenter, browser: Any
) -> None:
    """ADR-0091, found by acceptance testing: the page named and pre-filled the tokens
    only, said "Its limit now allows it: Resume." once they were raised, and the resume
    was refused for the Coordinator's failures; raised by the least only, it said so too
    though the next request could not fit."""
    item = wc.create_work_item(
        title="Small budget", goal="g", mode="linear", stages=["work"], start=True,
        limits={"max_tokens": 1000},
    )  # fmt: skip
    with served(create_app(wc)) as base:
        page = browser.new_page(viewport={"width": 1360, "height": 1100})
        page.goto(base + "/")
        wait_text(page, "#item-title", "Small budget")
        request = {"messages": [{"role": "user", "content": "word " * 2000}]}
        assert not wc.reserve_request(item.id, request=request).allowed
        for n in range(3):
            budget_commands(wc).record_coordinator_failure(item.id, turn_id=f"t{n}")
        stop = wc.ledger(item.id).stop_reason
        assert stop is not None and stop.code == "work_item_tokens_exhausted"
        asked = int(stop.details["estimated_next_tokens"] or 0)
        need = asked - 1000
        page.wait_for_selector(
            "#budget-stop[data-also='maxCoordinatorFailures']:visible", timeout=TIMEOUT_MS
        )
        said = page.text_content("#budget-stop") or ""
        assert said.endswith(
            f"Extend tokens by at least {need:,} ({need + asked:,} leaves room for one more"
            " such request) and Coordinator failures by at least 1, then Resume."
        ), said
        assert page.input_value("#extend-tokens") == str(need + asked)
        assert page.input_value("#extend-coordinator-failures") == "1"

        # Nothing to add: said in the page's words, nothing sent.
        before = wc.event_count()
        for field in ("#extend-tokens", "#extend-coordinator-failures"):
            page.fill(field, "")
        page.click("#extend:enabled")
        assert note(page, "refused") == (
            "Enter an amount to add to at least one limit, then Extend."
        )
        assert wc.event_count() == before

        # The least of each: a resume would be taken, but the next request not.
        page.fill("#extend-tokens", str(need))
        page.fill("#extend-coordinator-failures", "1")
        wait_current_etag(page, base, str(item.id))
        page.click("#extend:enabled")
        assert note(page, "ok") == "Budget extended."
        page.wait_for_function(
            "() => document.querySelector('#budget-stop').textContent.endsWith("
            f"'Its limit now lets the refused request through, but not the next one: extend"
            f" tokens by {asked:,} more before you Resume.')",
            timeout=TIMEOUT_MS,
        )


def test_a_read_begun_before_a_commands_answer_does_not_take_its_etag_back(
    wc: WorkCenter, browser: Any
) -> None:
    """Found as a rare failure of the test above ("The item changed meanwhile" at
    Resume): a refresh of the detail that read the item before a command's answer, and
    came back after it, put the page's ETag back to the one before the command, so the
    next click was refused as stale. Here that read is made slow on purpose: the ETag the
    command's answer gave is never replaced by an older one, and the next command goes
    through."""
    item = wc.create_work_item(
        title="Two reads", goal="g", mode="linear", stages=["work"], start=True,
        limits={"max_tokens": 1000},
    )  # fmt: skip
    assert not wc.reserve_request(
        item.id, request={"messages": [{"role": "user", "content": "word " * 2000}]}
    ).allowed
    detail_path = f"/api/work-items/{item.id}"
    slow, read_made = threading.Event(), threading.Event()
    app = create_app(wc)

    @app.middleware("http")
    async def late_detail(request: Any, call_next: Any) -> Any:
        response = await call_next(request)  # the item as read now
        if slow.is_set() and request.method == "GET" and request.url.path == detail_path:
            slow.clear()
            read_made.set()
            await asyncio.sleep(1.5)  # answered after the command below
        return response

    with served(app) as base:
        page = browser.new_page(viewport={"width": 1360, "height": 1100})
        page.goto(base + "/")
        wait_text(page, "#item-title", "Two reads")
        page.wait_for_selector("#budget-stop[data-limit='maxTokens']:visible", timeout=TIMEOUT_MS)
        wait_current_etag(page, base, str(item.id))
        before = httpx.get(base + detail_path).headers["ETag"]
        page.evaluate(
            "() => { window.etags = []; let held = state.itemEtag;"
            " Object.defineProperty(state, 'itemEtag', { configurable: true,"
            " get: () => held, set: (value) => { held = value; window.etags.push(value); } });"
            " }"
        )
        slow.set()
        page.evaluate("() => { state.detailDirty = true; refresh(); }")
        assert read_made.wait(10)  # the slow read has the item from before the command
        page.click("#extend:enabled")
        assert note(page, "ok") == "Budget extended."
        after = httpx.get(base + detail_path).headers["ETag"]
        assert after != before
        page.wait_for_timeout(2000)  # the slow read's answer has come back meanwhile
        etags: list[str] = page.evaluate("() => window.etags")
        assert after in etags and before not in etags[etags.index(after) :], etags
        page.click("#resume:enabled", timeout=TIMEOUT_MS)
        assert note(page, "ok") == "Resumed."
