"""The dashboard where a projection runner keeps the detail view (the scale-out
deployment, ADR-0116): a change made elsewhere while the runner is behind is shown once
the runner has caught up, without a reload, and meanwhile the page says so and steers
nothing. Before, the page read the detail once, 120 ms after the change event, and kept
what it read: the item's old state until a reload, every click refused as stale (found
by acceptance testing, ADR-0128)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from http_client import LINEAR
from test_http_api import fail_current_action
from test_http_browser import TIMEOUT_MS
from test_http_browser_steer import open_item, page_of, status_is

from workcenter.application import WorkCenter
from workcenter.projections.runner import ProjectionRunner


@pytest.fixture
def writer(db_path: Path) -> Iterator[WorkCenter]:
    """The server's store with inline projections off; no runner runs unless told."""
    with WorkCenter.open(db_path, inline_projections=False) as center:
        yield center


@pytest.fixture
def page_on(writer: WorkCenter) -> Iterator[tuple[Any, str, list[str]]]:
    with page_of(writer) as served:
        yield served


def test_a_change_made_while_the_runner_is_behind_is_shown_once_it_catches_up(
    page_on: tuple[Any, str, list[str]], writer: WorkCenter, db_path: Path
) -> None:
    page, base, errors = page_on
    item = UUID(open_item(page, base, LINEAR | {"start": False}))
    status_is(page, "draft")
    page.wait_for_selector("#start:enabled", timeout=TIMEOUT_MS)

    with WorkCenter.open(db_path, inline_projections=False, create=False) as elsewhere:
        elsewhere.cancel(item)  # the runner is behind: the detail view still says draft
    page.wait_for_selector("#item-behind:visible", timeout=TIMEOUT_MS)
    assert page.text_content("#item-status") == "draft"
    assert page.is_disabled("#start") and page.is_disabled("#cancel")
    page.wait_for_timeout(500)  # more reads while behind: still nothing to click
    assert page.is_disabled("#start") and page.is_disabled("#cancel")

    assert ProjectionRunner(writer).run_once() > 0  # the runner catches up; no event follows
    status_is(page, "cancelled")
    page.wait_for_selector("#item-behind", state="hidden", timeout=TIMEOUT_MS)
    page.wait_for_selector("#resume:enabled", timeout=TIMEOUT_MS)
    assert errors == []


def test_an_actions_buttons_wait_for_the_runner_too(
    page_on: tuple[Any, str, list[str]], writer: WorkCenter, db_path: Path
) -> None:
    """The timeline, read from the item itself, rebuilt the Action's Retry enabled while
    the page said it was behind; its click was refused as stale (found by acceptance
    testing, ADR-0128)."""
    page, base, errors = page_on
    item = UUID(open_item(page, base, LINEAR))
    fail_current_action(writer)
    ProjectionRunner(writer).run_once()
    retry = ".tl-row[data-status='failed'] button.retry"
    page.wait_for_selector(retry + ":enabled", timeout=TIMEOUT_MS)

    with WorkCenter.open(db_path, inline_projections=False, create=False) as elsewhere:
        ledger = elsewhere.ledger(item)
        elsewhere.extend_budget(item, expected_version=ledger.version, additions={"max_tokens": 1})
    page.wait_for_selector("#item-behind:visible", timeout=TIMEOUT_MS)
    assert page.is_disabled(retry)

    ProjectionRunner(writer).run_once()
    page.wait_for_selector("#item-behind", state="hidden", timeout=TIMEOUT_MS)
    page.click(retry + ":enabled", timeout=TIMEOUT_MS)
    page.wait_for_selector("#command-note[data-kind='ok']:visible", timeout=TIMEOUT_MS)
    assert page.text_content("#command-note") == "Action 1 retried."
    assert errors == []
