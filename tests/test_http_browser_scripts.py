"""The dashboard with text in many scripts, in headless Chromium (found by acceptance
testing, ADR-0144): the create form cut a title of emoji at half the bound and inside a
joined family, the audit's cut payload ended in half an emoji, and a right-to-left
criterion read left to right. Skips as ``test_http_browser`` does without Chromium."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from http_client import served
from test_http_browser import TIMEOUT_MS, launched_chromium

from workcenter.adapters.http.app import create_app
from workcenter.application import WorkCenter

FAMILY = "\U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466"  # seven characters


@pytest.fixture
def browser() -> Iterator[Any]:
    with launched_chromium() as launched:
        yield launched


def test_the_create_form_takes_a_title_of_emoji_whole(wc: WorkCenter, browser: Any) -> None:
    """150 emoji are 150 characters (of 200) but 300 UTF-16 units, where the form's
    ``maxlength`` cut them to 100; 28 families and a letter are 197 characters."""
    titles = ["\U0001f600" * 150, FAMILY * 28 + "x"]
    with served(create_app(wc)) as base:
        page = browser.new_page()
        page.goto(base)
        for title in titles:
            page.click("#new-item")
            page.fill("#create-title", "")
            page.locator("#create-title").press_sequentially(title[:2])
            page.keyboard.insert_text(title[2:])  # typed, then pasted
            page.fill("#create-goal", "g")
            page.click("#create-submit")
            page.wait_for_selector("#create-dialog", state="hidden", timeout=TIMEOUT_MS)
        stored = sorted(row["title"] for row in wc.list_work_items())
        assert stored == sorted(titles)
        # Past the bound the server refuses, naming it, and nothing is written.
        before = wc.event_count()
        page.click("#new-item")
        page.fill("#create-title", "\U0001f600" * 201)
        page.fill("#create-goal", "g")
        page.click("#create-submit")
        page.wait_for_selector("#create-error:visible", timeout=TIMEOUT_MS)
        assert "200 characters" in page.inner_text("#create-error")
        assert wc.event_count() == before


def test_cut_texts_end_between_characters_and_criteria_read_in_their_direction(
    wc: WorkCenter, browser: Any
) -> None:
    item = wc.create_work_item(
        title="x" + "\U0001f600" * 100,
        goal="g",
        acceptance_criteria=["הקובץ docs/api.md עודכן"],
        mode="linear",
        start=True,
    )
    with served(create_app(wc)) as base:
        page = browser.new_page()
        page.goto(f"{base}/#{item.id}")
        page.wait_for_selector("#audit tbody tr", timeout=TIMEOUT_MS)
        page.wait_for_selector("#criteria tbody tr.criterion", timeout=TIMEOUT_MS)
        cells = page.evaluate(
            "() => [...document.querySelectorAll('#audit tbody td.mono')]"
            ".map((td) => td.textContent).filter((t) => t.endsWith('…'))"
        )
        assert cells, "no audit payload was cut: the test would prove nothing"
        for cell in cells:
            before_mark = cell[:-1]
            assert not ("\ud800" <= before_mark[-1] <= "\udbff"), "cut inside an emoji"
            assert len(before_mark) <= 160
        direction = page.evaluate(
            "() => getComputedStyle(document.querySelector('#criteria tr.criterion td')).direction"
        )
        assert direction == "rtl"


def test_a_path_in_right_to_left_text_is_laid_out_whole(wc: WorkCenter, browser: Any) -> None:
    """In an Arabic title "/usr/local/bin/wc-123.py" was laid out in pieces (found by
    acceptance testing, ADR-0144): a path is isolated, left to right, in the list, the
    heading, the goal and a criterion (not Arabic words with a slash between them), and
    the text reads the same."""
    path = "/usr/local/bin/wc-123.py"
    # A path after a space, before an Arabic comma, after a Hebrew prefix letter; Arabic
    # words with a slash between them (the second re-test found the comma and the prefix
    # left the path in pieces).
    title = f"إصلاح الخطأ في {path}، عند السطر 42"
    item = wc.create_work_item(
        title=title, goal=f"שלב ב{path} נבדק", acceptance_criteria=[f"يعمل {path} نعم/لا"]
    )
    with served(create_app(wc)) as base:
        page = browser.new_page()
        page.goto(f"{base}/#{item.id}")
        page.wait_for_selector("#criteria tbody tr.criterion", timeout=TIMEOUT_MS)
        for where in ("#item-list .item-title", "#item-title", "#item-goal", "#criteria td"):
            found = page.evaluate(
                "(where) => { const n = document.querySelector(where); return [n.textContent,"
                " getComputedStyle(n).direction, [...n.querySelectorAll('bdi')]"
                ".map((b) => [b.textContent, b.dir])]; }",
                where,
            )
            text, direction, isolated = found
            assert path in text and direction == "rtl", (where, found)
            assert isolated == [[path, "ltr"]], (where, found)
        assert page.inner_text("#item-title") == title


def test_the_audit_names_the_person_a_named_token_records(wc: WorkCenter, browser: Any) -> None:
    """The audit's column said "user" for alice's commands, the API's ``actorId`` unshown
    (found by the re-test of ADR-0143)."""
    item = wc.create_work_item(title="t", goal="g", actor="user:alice")
    wc.cancel(item.id, expected_version=item.version, actor="operator:bob")
    with served(create_app(wc)) as base:
        page = browser.new_page()
        page.goto(f"{base}/#{item.id}")
        page.wait_for_selector("#audit tbody tr", timeout=TIMEOUT_MS)
        page.wait_for_function(
            "() => [...document.querySelectorAll('#audit tbody tr')]"
            ".some((tr) => tr.cells[2].textContent === 'WorkItemCancelled')",
            timeout=TIMEOUT_MS,
        )
        actors = page.evaluate(
            "() => Object.fromEntries([...document.querySelectorAll('#audit tbody tr')]"
            ".map((tr) => [tr.cells[2].textContent, tr.cells[3].textContent]))"
        )
        assert actors["WorkItemCreated"] == "user alice", actors
        assert actors["WorkItemCancelled"] == "operator bob", actors
