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
import time
from contextlib import ExitStack
from typing import Any

import postgres
import pytest
from conftest import create_linear, report

from workcenter.adapters.persistence import StoreUnavailable
from workcenter.adapters.postgres_connection import StoreDisconnected
from workcenter.application import WorkCenter
from workcenter.domain.errors import InvalidInput
from workcenter.projections.runner import ProjectionRunner

ITEMS = 24
THREADS = 8


@pytest.fixture
def small_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two connections, and a wait for one of a second (the pool's timeout), so that
    claims stuck on each other fail within the test instead of after half a minute."""
    monkeypatch.setenv("POSTGRES_POOL_SIZE", "2")
    monkeypatch.setenv("POSTGRES_MAX_OVERFLOW", "0")
    monkeypatch.setenv("POSTGRES_CONNECT_TIMEOUT", "1")


def make_items(wc: WorkCenter) -> list[Any]:
    return [create_linear(wc, title=f"item {i}", stages=("implement",)).id for i in range(ITEMS)]


def claim_in_threads(wc: WorkCenter) -> list[Any]:
    """Every claimable Action claimed and finished by THREADS threads at once: the
    Actions finished, or the first failure raised."""
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
    if errors:
        raise errors[0]
    return finished


def test_more_claiming_threads_than_connections_run_every_action(small_pool: None) -> None:
    with postgres.fresh_schema("wcpool") as url, WorkCenter.open(url) as wc:
        items = make_items(wc)
        finished = claim_in_threads(wc)
        assert len(finished) == len(set(finished)) == ITEMS
        assert {wc.work_item(item).status for item in items} == {"done"}


def test_a_runner_in_the_process_leaves_claims_a_connection(
    small_pool: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The runner's subscription holds a connection for as long as it listens: claims
    counted without it held the rest and waited for one another (found by acceptance
    testing). With three connections, claims take turns beside it; with two, a claim is
    refused at once, naming what the pool needs, not after the pool's wait.

    Eight claimers take one turn in no fixed order, so the wait for one is 10 s here: a
    second on a loaded machine failed a claimer still waiting its turn (CI), and claims
    stuck on each other fail after it all the same."""
    monkeypatch.setenv("POSTGRES_POOL_SIZE", "3")
    monkeypatch.setenv("POSTGRES_CONNECT_TIMEOUT", "10")
    with postgres.fresh_schema("wcpool") as url:
        with WorkCenter.open(url) as wc:
            items = make_items(wc)
        with WorkCenter.open(url, inline_projections=False) as wc:
            runner = ProjectionRunner(wc, poll=0.05).start()
            try:
                wait_until_listening(runner)
                finished = claim_in_threads(wc)
            finally:
                runner.stop()
            assert len(finished) == len(set(finished)) == ITEMS
            assert {wc.work_item(item).status for item in items} == {"done"}
        with WorkCenter.open(url) as wc:
            create_linear(wc, stages=("implement",))
        monkeypatch.setenv("POSTGRES_POOL_SIZE", "2")
        with WorkCenter.open(url, inline_projections=False) as wc:
            runner = ProjectionRunner(wc, poll=0.05).start()
            try:
                wait_until_listening(runner)
                before = wc.event_count()
                with pytest.raises(StoreUnavailable, match="give the pool at least 3"):
                    wc.claim_next("worker")
                assert wc.event_count() == before
            finally:
                runner.stop()


def wait_until_listening(runner: ProjectionRunner) -> None:
    deadline = time.monotonic() + 10
    while not runner.listening:
        assert runner.error is None, runner.error
        assert time.monotonic() < deadline, "the runner never listened"
        time.sleep(0.01)


def test_a_claim_held_while_its_save_waits_for_the_lock_is_not_ended_under_it(
    small_pool: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The claim's candidate connection is held while the save waits for the event
    table's lock. It was idle in a transaction then, which the session's idle timeout (the
    library's setting, 5 s by default) ended, and the claim, saved, was answered as a lost
    connection (ADR-0095); it holds no transaction open since ADR-0105."""
    monkeypatch.setenv("POSTGRES_IDLE_IN_TRANSACTION_SESSION_TIMEOUT", "1")
    with postgres.fresh_schema("wcpool") as url, WorkCenter.open(url) as wc:
        item = create_linear(wc, stages=("implement",))
        schema = url.rsplit("=", 1)[1]
        with postgres.connect() as blocker:
            blocker.autocommit = False
            blocker.execute(f'LOCK TABLE "{schema}".workcenter_events IN EXCLUSIVE MODE')
            threading.Timer(2.5, blocker.commit).start()
            claimed = wc.claim_next("worker")
        assert claimed is not None and claimed.work_item_id == item.id
        assert wc.action(claimed.action_id).status == "running"


def test_too_many_commands_waiting_for_a_connection_say_so(
    small_pool: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("POSTGRES_MAX_WAITING", "1")
    monkeypatch.setenv("POSTGRES_CONNECT_TIMEOUT", "5")
    with postgres.fresh_schema("wcpool") as url, WorkCenter.open(url) as wc:
        item = create_linear(wc)
        datastore = wc.store.recorder.datastore  # type: ignore[attr-defined]
        waited: list[Any] = []
        with ExitStack() as held:
            for _ in range(2):
                held.enter_context(datastore.get_connection())
            waiting = threading.Thread(target=lambda: waited.append(wc.work_item(item.id)))
            waiting.start()
            time.sleep(0.5)  # the first waits in the pool's queue
            with pytest.raises(StoreDisconnected, match="1 commands already waited for one"):
                wc.work_item(item.id)
        waiting.join()
        assert waited and waited[0].id == item.id


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
