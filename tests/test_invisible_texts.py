"""A required text that shows nothing is refused like a blank one (ADR-0083): a
message of zero-width spaces was accepted, sent to the model and paid for, and a title
of them named an item with nothing a reader could see. The HTTP document's pattern is the same set
of characters, so a request it allows is one the service takes."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import create_dynamic, refused
from http_client import DYNAMIC, client
from hypothesis import given
from hypothesis import strategies as st
from test_http_api import problem

from workcenter.adapters.http import fields
from workcenter.application import WorkCenter
from workcenter.domain import inputs
from workcenter.domain.errors import InvalidInput

# Format characters that print a sign of their own (Arabic and Syriac marks that join the
# digits after them): not invisible.
PREPENDED_MARKS = {0x0600, 0x0601, 0x0602, 0x0603, 0x0604, 0x0605, 0x06DD, 0x070F, 0x0890}
PREPENDED_MARKS |= {0x0891, 0x08E2, 0x110BD, 0x110CD}
# Letters, marks and symbols that render as blank.
FILLERS = {0x034F, 0x115F, 0x1160, 0x17B4, 0x17B5, 0x180B, 0x180C, 0x180D, 0x180F, 0x2800}
FILLERS |= {0x3164, 0xFFA0, *range(0xFE00, 0xFE10), *range(0xE0100, 0xE01F0)}
SHOWS_NOTHING = ["\u200b", "\u200b\u200d\ufeff", " \u2060 \u00ad ", "\u3164", "\u2800\u200e"]
# Past U+FFFF: tags (which the HTTP document's pattern cannot name), a musical format
# control, a supplement's variation selector (found by acceptance testing, ADR-0144).
SHOWS_NOTHING += ["\U000e0020\U000e0041", "\U0001d173", "\U000e0100 \U000e007f"]


@pytest.fixture
def wc(db_path: Path) -> Iterator[WorkCenter]:
    with WorkCenter.open(db_path) as center:
        yield center


def test_the_invisible_characters_are_spaces_controls_formats_and_fillers() -> None:
    derived = {
        c
        for c in range(0x110000)
        if chr(c).isspace()
        or unicodedata.category(chr(c)) == "Cc"
        or (unicodedata.category(chr(c)) == "Cf" and c not in PREPENDED_MARKS)
        or c in FILLERS
    }
    # Characters this Python's Unicode has not assigned yet (a newer one's format
    # controls) are in the set, ready; they are not in the derivation.
    assigned = {c for c in inputs.INVISIBLE if unicodedata.category(c) != "Cn"}
    assert {chr(c) for c in derived} == assigned
    # The document's pattern names the ones up to U+FFFF.
    assert {chr(c) for c in derived if c <= 0xFFFF} == {c for c in assigned if c <= "\uffff"}


@given(st.text(st.characters(max_codepoint=0xFFFF, exclude_categories=["Cs"]), max_size=8))
def test_the_documents_pattern_is_the_services_rule(text: str) -> None:
    assert bool(re.search(fields.NOT_BLANK, text)) == inputs.visible(text.strip())


def test_a_message_or_title_that_shows_nothing_is_refused(wc: WorkCenter) -> None:
    item = create_dynamic(wc)
    for text in SHOWS_NOTHING:
        with refused(wc, InvalidInput, "shows nothing"):
            wc.post_user_message(item.id, text)
        with refused(wc, InvalidInput, "title is required"):
            wc.create_work_item(title=text, goal="g", acceptance_criteria=["c"])
    posted = wc.post_user_message(item.id, "\u200bplan it\u200b")  # shows something
    assert posted.turn_id is not None


def test_a_criterion_that_shows_nothing_is_dropped_as_a_blank_one_is(wc: WorkCenter) -> None:
    item = wc.create_work_item(title="t", goal="g", acceptance_criteria=["c", "\u200b", " "])
    assert item.acceptance_criteria == ("c",)


def test_over_http_a_message_that_shows_nothing_is_422(wc: WorkCenter) -> None:
    api = client(wc)
    created = api.post("/api/work-items", json=DYNAMIC)
    assert created.status_code == 201, created.text
    url = f"/api/work-items/{created.json()['id']}/messages"
    before = wc.event_count()
    etag = {"If-Match": created.headers["ETag"]}
    for text in SHOWS_NOTHING:
        problem(api.post(url, json={"text": text}, headers=etag), 422, "InvalidInput")
    assert wc.event_count() == before
