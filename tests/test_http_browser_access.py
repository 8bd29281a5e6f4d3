"""The dashboard by keyboard, to a screen reader and on a phone, in headless Chromium
(found by acceptance testing, ADR-0137): a phone-sized screen scrolled sideways with the
item cut off; a live update threw the keyboard's focus out of the list; a command took
focus away from the button pressed; an Action's form did not close on Escape; the
selected row was not announced as such; the audit showed UTC and the conversation local
time, neither with a date. Skips as ``test_http_browser`` does without Chromium."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from http_client import served
from test_http_api import fail_current_action
from test_http_browser import TIMEOUT_MS, launched_chromium
from test_http_browser_list import wait_current_etag

from workcenter.adapters.http.app import create_app
from workcenter.application import WorkCenter


@pytest.fixture
def browser() -> Iterator[Any]:
    with launched_chromium() as launched:
        yield launched


def focused_id(page: Any) -> str | None:
    found: str | None = page.evaluate("() => document.activeElement.dataset.id || null")
    return found


@pytest.mark.parametrize("width", [375, 320])
def test_a_phone_sized_screen_does_not_scroll_sideways(
    wc: WorkCenter, browser: Any, width: int
) -> None:
    item = wc.create_work_item(
        title="A" * 120, goal="https://example.org/" + "x" * 300, mode="linear", start=True
    )
    with served(create_app(wc)) as base:
        page = browser.new_page(viewport={"width": width, "height": 667})
        page.goto(f"{base}/#{item.id}")
        page.wait_for_selector("#detail:not([hidden])", timeout=TIMEOUT_MS)
        page.wait_for_selector("#audit tbody tr", timeout=TIMEOUT_MS)
        wide = page.evaluate("() => document.documentElement.scrollWidth")
        assert wide <= width, f"the page is {wide} px wide on a {width} px screen"
        # The audit's table keeps its columns readable, scrolling in its own box.
        audit = page.evaluate("() => document.getElementById('audit').offsetWidth")
        assert audit >= 550, f"the audit table is {audit} px wide"
        lines = page.evaluate(
            "() => [...document.querySelectorAll('#audit tbody tr:first-child td')]"
            ".slice(0, 4).map((td) => { const r = document.createRange();"
            " r.selectNodeContents(td); return r.getClientRects().length; })"
        )
        assert lines == [1, 1, 1, 1], f"the audit's cells broke inside words: {lines} lines"
        # The steering buttons are on the screen, not cut off at its right.
        box = page.locator("#cancel").bounding_box()
        assert box is not None and box["x"] + box["width"] <= width


def test_a_live_update_keeps_the_keyboards_place_in_the_list(wc: WorkCenter, browser: Any) -> None:
    first = wc.create_work_item(title="First", goal="g", mode="linear")
    second = wc.create_work_item(title="Second", goal="g", mode="linear")
    with served(create_app(wc)) as base:
        page = browser.new_page()
        page.goto(base)
        page.wait_for_selector(f"#item-list li[data-id='{first.id}']", timeout=TIMEOUT_MS)
        page.focus(f"#item-list li[data-id='{first.id}']")
        page.keyboard.press("Enter")
        page.wait_for_selector(
            f"#item-list li[data-id='{first.id}'][aria-current='true']", timeout=TIMEOUT_MS
        )
        assert (
            page.locator(f"#item-list li[data-id='{second.id}']").get_attribute("aria-current")
            is None
        )
        assert focused_id(page) == str(first.id)
        third = httpx.post(f"{base}/api/work-items", json={"title": "Third", "goal": "g"})
        assert third.status_code == 201, third.text
        page.wait_for_selector(f"#item-list li[data-id='{third.json()['id']}']", timeout=TIMEOUT_MS)
        assert focused_id(page) == str(first.id)


def test_focus_stays_with_the_control_a_command_came_from(wc: WorkCenter, browser: Any) -> None:
    item = wc.create_work_item(title="Draft", goal="g", mode="linear")
    with served(create_app(wc)) as base:
        page = browser.new_page()
        page.goto(f"{base}/#{item.id}")
        wait_current_etag(page, base, str(item.id))
        page.focus("#start")
        page.keyboard.press("Enter")
        page.wait_for_selector("#command-note[data-kind='ok']:visible", timeout=TIMEOUT_MS)
        page.wait_for_function("() => !state.commanding", timeout=TIMEOUT_MS)
        # Start is disabled now (started): the note that says what happened has focus.
        assert page.evaluate("() => document.activeElement.id") == "command-note"
        page.focus("#cancel")
        page.keyboard.press("Enter")
        page.wait_for_function(
            "() => document.getElementById('command-note').textContent === 'Cancelled.'",
            timeout=TIMEOUT_MS,
        )
        page.wait_for_function("() => !state.commanding", timeout=TIMEOUT_MS)
        assert page.evaluate("() => document.activeElement.id") in ("cancel", "command-note")
        assert page.evaluate("() => document.activeElement.tagName") != "BODY"


def test_an_actions_form_closes_on_escape_and_gives_focus_back(
    wc: WorkCenter, browser: Any
) -> None:
    item = wc.create_work_item(title="Failing", goal="g", mode="linear", start=True)
    fail_current_action(wc)
    with served(create_app(wc)) as base:
        page = browser.new_page()
        page.goto(f"{base}/#{item.id}")
        guide = page.locator("button.guide")
        guide.wait_for(timeout=TIMEOUT_MS)
        assert "Action 1" in (guide.get_attribute("aria-label") or "")
        guide.focus()
        page.keyboard.press("Enter")
        page.wait_for_selector("#action-form:not([hidden])", timeout=TIMEOUT_MS)
        page.keyboard.type("half typed")
        page.keyboard.press("Escape")
        page.wait_for_selector("#action-form[hidden]", state="attached", timeout=TIMEOUT_MS)
        assert page.evaluate("() => document.activeElement.className") == "guide"


def test_times_are_local_with_their_date(wc: WorkCenter, browser: Any) -> None:
    item = wc.create_work_item(title="Dated", goal="g", mode="linear", start=True)
    with served(create_app(wc)) as base:
        context = browser.new_context(timezone_id="America/New_York", locale="en-US")
        page = context.new_page()
        page.goto(f"{base}/#{item.id}")
        page.wait_for_selector("#audit tbody tr", timeout=TIMEOUT_MS)
        shown = page.text_content("#audit tbody tr td:nth-child(2)") or ""
        stored = httpx.get(f"{base}/api/work-items/{item.id}/audit").json()["events"][-1]
        expected = page.evaluate("(t) => new Date(t).toLocaleString()", stored["time"])
        assert shown == expected and "/" in shown, shown
        context.close()
