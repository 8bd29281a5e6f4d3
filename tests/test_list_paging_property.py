"""Cursor paging, as a property: however many items share a creation time (a frozen
clock), walking the list page by page from the newest shows each item once, newest
first, ties by id; and whatever the interleaving of creates and page reads, an item
created after the walk began (at a later time: ADR-0059 says why a tie is not covered)
shows on no page but the first. Runs on SQLite and PostgreSQL (the page's SQL is the
read model's, on both)."""

from __future__ import annotations

from typing import Any
from uuid import UUID

import pytest
from conftest import BACKENDS, FakeClock
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workcenter.application import WorkCenter


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


# Each step: how many items to create before reading the next page.
STEPS = st.lists(st.integers(0, 3), min_size=1, max_size=12)


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    existing=st.integers(0, 14),
    page_size=st.integers(1, 5),
    steps=STEPS,
    status=st.sampled_from([None, "draft"]),
)
def test_a_walk_sees_every_item_once_newest_first(
    wc: WorkCenter,
    clock: FakeClock,
    existing: int,
    page_size: int,
    steps: list[int],
    status: str | None,
) -> None:
    def create(n: int) -> UUID:
        return wc.create_work_item(title=f"t{n}", goal="g").id

    def everything() -> list[dict[str, Any]]:
        """Every row, in pages of 100 (the store outlives one example: it grows)."""
        rows: list[dict[str, Any]] = []
        cursor = None
        while True:
            page = wc.web_reads.summaries(status, 100, cursor)
            rows += page.items
            cursor = page.next
            if cursor is None:
                return rows

    for n in range(existing):
        if n % 4 == 0:
            clock.advance(1)
        create(n)
    before = [row["id"] for row in everything()]
    created: list[str] = []
    walked: list[str] = []
    cursor = None
    pending = list(steps)
    while True:
        page = wc.web_reads.summaries(status, page_size, cursor)
        walked += [row["id"] for row in page.items]
        cursor = page.next
        if cursor is None:
            break
        for _ in range(pending.pop(0) if pending else 0):
            clock.advance(0.001)  # later than every item the walk began with
            created.append(str(create(1000 + len(created))))
    assert walked == before  # every item once, in the order it had, none created since
    after = everything()
    assert {row["id"] for row in after} == set(before) | set(created)
    keys = [(row["createdAt"], UUID(row["id"]).hex) for row in after]
    assert keys == sorted(keys, reverse=True)  # newest first, ties by id
