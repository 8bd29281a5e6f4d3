"""A PostgreSQL store's connection pool shared by more commands than it has connections
(ADR-0095).

A claim holds its candidate on one connection while it reads and writes on another.
With every connection held by such a claim, none could go on: the pool gave up after
its timeout, and the claims failed with "lost the connection to the database" while the
server was up (a pool of one connection failed every claim; forty threads, as the HTTP
server runs, on the library's default pool of fifteen, claimed nothing). Now claims in
one process hold at most one connection fewer than the pool has, a pool of fewer than
two connections is refused when the store opens, and a pool that stays busy says so.
"""

from __future__ import annotations

import threading
from contextlib import ExitStack
from typing import Any

import postgres
import pytest
from conftest import create_linear, report

from workcenter.adapters.postgres_connection import StoreDisconnected
from workcenter.application import WorkCenter
from workcenter.domain.errors import InvalidInput

ITEMS = 24
THREADS = 8


@pytest.fixture
def small_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two connections, and a wait for one of a second (the pool's timeout), so that
    claims stuck on each other fail within the test instead of after half a minute."""
    monkeypatch.setenv("POSTGRES_POOL_SIZE", "2")
    monkeypatch.setenv("POSTGRES_MAX_OVERFLOW", "0")
    monkeypatch.setenv("POSTGRES_CONNECT_TIMEOUT", "1")


def test_more_claiming_threads_than_connections_run_every_action(small_pool: None) -> None:
    with postgres.fresh_schema("wcpool") as url, WorkCenter.open(url) as wc:
        items = [
            create_linear(wc, title=f"item {i}", stages=("implement",)).id for i in range(ITEMS)
        ]
        start = threading.Barrier(THREADS)
        finished: list[Any] = []
        errors: list[BaseException] = []

        def work(k: int) -> None:
            start.wait()
            try:
                while (claimed := wc.claim_next(f"thread-{k}")) is not None:
                    wc.finish_run(claimed, report())
                    finished.append(claimed.action_id)
            except BaseException as error:  # every failure is the finding
                errors.append(error)

        threads = [threading.Thread(target=work, args=(k,)) for k in range(THREADS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        assert len(finished) == len(set(finished)) == ITEMS
        assert {wc.work_item(item).status for item in items} == {"done"}


def test_a_pool_of_one_connection_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    with postgres.fresh_schema("wcpool") as url:
        with WorkCenter.open(url) as wc:
            create_linear(wc)
            before = wc.event_count()
        monkeypatch.setenv("POSTGRES_POOL_SIZE", "1")
        monkeypatch.setenv("POSTGRES_MAX_OVERFLOW", "0")
        with pytest.raises(InvalidInput, match="at least 2 connections"):
            WorkCenter.open(url, create=False)
        monkeypatch.setenv("WORKCENTER_POSTGRES_POOL_SIZE", "0")
        monkeypatch.setenv("POSTGRES_MAX_OVERFLOW", "1")
        with pytest.raises(InvalidInput, match=r"\$WORKCENTER_POSTGRES_POOL_SIZE .* is 1"):
            WorkCenter.open(url, create=False)
        monkeypatch.delenv("WORKCENTER_POSTGRES_POOL_SIZE")
        monkeypatch.delenv("POSTGRES_POOL_SIZE")
        monkeypatch.delenv("POSTGRES_MAX_OVERFLOW")
        with WorkCenter.open(url, create=False) as wc:
            assert wc.event_count() == before


def test_a_pool_with_no_connection_free_says_so(small_pool: None) -> None:
    with postgres.fresh_schema("wcpool") as url, WorkCenter.open(url) as wc:
        item = create_linear(wc)
        before = wc.event_count()
        datastore = wc.store.recorder.datastore  # type: ignore[attr-defined]
        with ExitStack() as held:
            for _ in range(2):
                held.enter_context(datastore.get_connection())
            with pytest.raises(StoreDisconnected, match="no connection of the pool's 2 came"):
                wc.claim_next("worker")
        assert wc.event_count() == before
        assert wc.work_item(item.id).status == "ready"
