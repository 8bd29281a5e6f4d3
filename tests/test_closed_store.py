"""A closed WorkCenter refuses every command and read with the project's typed error,
on both databases (ADR-0083): before, SQLite's raised the library's
``ConnectionPoolClosedError`` out of the public API, and PostgreSQL's said it had lost
the connection to the database, which sends an operator to the wrong place."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from conftest import BACKENDS, FakeClock, create_linear

from workcenter.adapters.persistence import StoreClosed
from workcenter.application import WorkCenter


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


CALLS: dict[str, Callable[[WorkCenter, Any], object]] = {
    "work_item": lambda wc, item: wc.work_item(item.id),
    "create": lambda wc, item: create_linear(wc),
    "detail": lambda wc, item: wc.detail(item.id),
    "claim_next": lambda wc, item: wc.claim_next("worker-1"),
    "audit": lambda wc, item: wc.audit(item.id),
    "event_count": lambda wc, item: wc.event_count(),
    "summaries": lambda wc, item: wc.web_reads.summaries(),
}


@pytest.mark.parametrize("call", sorted(CALLS))
def test_a_closed_store_says_it_is_closed(location: str, clock: FakeClock, call: str) -> None:
    wc = WorkCenter.open(location, clock=clock)
    item = create_linear(wc)
    wc.close()
    with pytest.raises(StoreClosed, match="closed"):
        CALLS[call](wc, item)
    with WorkCenter.open(location, clock=clock, create=False) as again:
        assert again.event_count() == 4  # the refused call wrote nothing
