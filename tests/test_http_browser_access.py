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
    found: str | None = page.evaluate(
        "() => (document.activeElement.closest('li') || {dataset: {}}).dataset.id || null"
    )
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
        page.focus(f"#item-list li[data-id='{first.id}'] button")
        page.keyboard.press("Enter")
        page.wait_for_selector(
            f"#item-list li[data-id='{first.id}'] button[aria-current='true']",
            timeout=TIMEOUT_MS,
        )
        assert (
            page.locator(f"#item-list li[data-id='{second.id}'] button").get_attribute(
                "aria-current"
            )
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


def pressed(page: Any, button: str) -> None:
    """``button`` pressed from the keyboard: the focus on it, then Enter."""
    page.focus(button)
    page.keyboard.press("Enter")


def marks(page: Any, field: str) -> tuple[str | None, str | None]:
    """The refusal's marks on ``field``: aria-invalid and aria-describedby."""
    return (
        page.get_attribute(field, "aria-invalid"),
        page.get_attribute(field, "aria-describedby"),
    )


def test_a_refused_message_is_said_and_the_keyboard_stays_on_it(
    wc: WorkCenter, browser: Any
) -> None:
    """Send is disabled while a message is sent: its focus went to the page's top, and a
    refusal was shown in no live region, tied to no field (found by acceptance testing,
    ADR-0142)."""
    item = wc.create_work_item(title="Talk", goal="g", start=True)
    with served(create_app(wc)) as base:
        page = browser.new_page()
        page.goto(f"{base}/#{item.id}")
        page.wait_for_selector("#message-send:enabled", timeout=TIMEOUT_MS)
        page.route("**/messages", lambda route: route.abort())
        page.fill("#message-text", "Are you there?")
        pressed(page, "#message-send")
        page.wait_for_selector("#message-error:visible", timeout=TIMEOUT_MS)
        assert page.get_attribute("#message-error", "role") == "alert"
        assert marks(page, "#message-text") == ("true", "message-error")
        assert page.evaluate("() => document.activeElement.id") == "message-text"
        page.unroute("**/messages")
        page.wait_for_selector("#message-send:enabled", timeout=TIMEOUT_MS)
        pressed(page, "#message-send")
        page.wait_for_selector("#message-error", state="hidden", timeout=TIMEOUT_MS)
        # A hidden refusal's text is no longer the box's description.
        assert marks(page, "#message-text") == (None, None)
        assert page.evaluate("() => document.activeElement.id") == "message-text"


def test_a_refused_create_marks_its_field_and_keeps_the_keyboard_in_the_dialog(
    wc: WorkCenter, browser: Any
) -> None:
    with served(create_app(wc)) as base:
        page = browser.new_page()
        page.goto(base)
        page.click("#new-item")
        page.fill("#create-title", "   ")  # passes the browser's check, not the server's
        page.fill("#create-goal", "g")
        pressed(page, "#create-submit")
        page.wait_for_selector("#create-error:visible", timeout=TIMEOUT_MS)
        assert marks(page, "#create-title") == ("true", "create-error")
        assert page.evaluate("() => document.activeElement.id") == "create-title"
        # A refusal that names no field (a stage twice): the keyboard goes back to Create.
        page.fill("#create-title", "A title")
        page.select_option("#create-mode", "linear")
        page.fill("#create-stages", "implement, implement")
        pressed(page, "#create-submit")
        page.wait_for_function(
            "() => !document.getElementById('create-error').hidden"
            " && document.activeElement.id === 'create-submit'",
            timeout=TIMEOUT_MS,
        )
        assert page.get_attribute("#create-title", "aria-invalid") is None
        page.fill("#create-stages", "")
        page.click("#create-submit")
        page.wait_for_selector("#create-dialog", state="hidden", timeout=TIMEOUT_MS)
        assert page.get_attribute("#create-title", "aria-invalid") is None


def test_the_list_is_a_list_and_muted_text_and_fields_are_legible(
    wc: WorkCenter, browser: Any
) -> None:
    """Rows that were buttons made no list for a screen reader; muted text was 4.26:1 on a
    selected row and a message box's border 1.25:1 (found by acceptance testing,
    ADR-0142). WCAG 2.1: 4.5:1 for text, 3:1 for a field's border."""
    item = wc.create_work_item(title="Listed", goal="g", acceptance_criteria=["c"])
    wc.create_work_item(title="Another", goal="g")
    with served(create_app(wc)) as base:
        page = browser.new_page()
        page.goto(f"{base}/#{item.id}")
        page.wait_for_selector("#item-list li.selected button", timeout=TIMEOUT_MS)
        roles = page.evaluate(
            "() => [...document.querySelectorAll('#item-list > *')].map((n) =>"
            " [n.tagName, n.getAttribute('role'), n.children.length,"
            " n.firstElementChild.tagName])"
        )
        assert roles == [["LI", None, 1, "BUTTON"]] * 2, roles
        contrast = page.evaluate(
            """() => {
              const rgb = (el, prop) => getComputedStyle(el)[prop].match(/\\d+/g).slice(0, 3)
                .map(Number);
              const lum = (c) => { const [r, g, b] = c.map((v) => { v /= 255;
                return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; });
                return 0.2126 * r + 0.7152 * g + 0.0722 * b; };
              const ratio = (a, b) => { const [x, y] = [lum(a), lum(b)].sort((p, q) => q - p);
                return (x + 0.05) / (y + 0.05); };
              const row = document.querySelector('#item-list li.selected button');
              const meta = row.querySelector('.item-meta span:nth-child(2)');
              const box = document.getElementById('message-text');
              return [ratio(rgb(meta, 'color'), rgb(row, 'backgroundColor')),
                ratio(rgb(box, 'borderTopColor'), [255, 255, 255])];
            }"""
        )
        assert contrast[0] >= 4.5 and contrast[1] >= 3, contrast
