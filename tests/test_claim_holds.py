"""Claims that do not herd (issue 18, ADR-0054).

On PostgreSQL a claim holds each candidate it tries (a transaction-scoped
advisory lock) and passes over the ones other claims hold, so concurrent claims
take different Actions instead of all racing for the oldest; the optimistic save
stays the fence. Here, in one process with two stores open: a held candidate is
passed over without being tried, it is claimable again once the other claim
ends, and the order stays oldest first. ``candidates_tried`` counts the
candidates a claim tried (instrumented, not timed); the 16-process test in
``test_scaleout_16.py`` reads it under real contention.
"""

from __future__ import annotations

import threading
import time
from typing import Any
from uuid import UUID

import postgres
import pytest
from conftest import create_linear

from workcenter.adapters.postgres_recorder import OneCommitPostgresRecorder
from workcenter.application import WorkCenter
from workcenter.projections import sql
from workcenter.projections.work_queue import CLAIM_LOCKS


@pytest.fixture(params=("sqlite", "postgresql"))
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def three_items(wc: WorkCenter) -> list[UUID]:
    """Three linear items, oldest first; the current Action of each is claimable."""
    actions = []
    for n in range(3):
        item = create_linear(wc, stages=("implement",), title=f"Item {n}")
        assert item.current_action_id is not None
        actions.append(item.current_action_id)
    return actions


def test_claims_take_the_oldest_first_each_trying_one(wc: WorkCenter) -> None:
    actions = three_items(wc)
    claims = [wc.claim_next("w1") for _ in actions]
    assert [c.action_id for c in claims if c] == actions
    assert [c.candidates_tried for c in claims if c] == [1, 1, 1]
    assert wc.claim_next("w1") is None


# SQLite has one writer: its claims hold nothing.
@pytest.mark.parametrize("backend", ["postgresql"])
def test_a_candidate_held_by_another_claim_is_passed_over_on_postgresql(
    wc: WorkCenter, other: WorkCenter
) -> None:
    actions = three_items(wc)
    # Another claim is in flight on the oldest Action: it holds it until its claim ends.
    with other._runs.claim_candidates(16) as candidates:
        assert next(candidates).action_id == actions[0]
        claim = wc.claim_next("w1")
        assert claim is not None
        assert (claim.action_id, claim.candidates_tried) == (actions[1], 1)
    # That claim ended without saving: the oldest is claimable again, and comes first.
    claim = wc.claim_next("w1")
    assert claim is not None
    assert (claim.action_id, claim.candidates_tried) == (actions[0], 1)


@pytest.mark.parametrize("backend", ["sqlite"])
def test_on_sqlite_a_claim_walks_the_queue_without_holding(
    wc: WorkCenter, other: WorkCenter
) -> None:
    actions = three_items(wc)
    with other._runs.claim_candidates(16) as candidates:
        assert [c.action_id for c in candidates] == actions
    claim = wc.claim_next("w1")
    assert claim is not None and claim.action_id == actions[0]


def test_a_stale_candidate_is_tried_and_counted(wc: WorkCenter) -> None:
    """The queue's row says ready, the aggregates say otherwise: the claim moves on to the
    next candidate and counts both (the fence is the aggregates, never the queue)."""
    actions = three_items(wc)
    first = wc.claim_next("w1")
    assert first is not None and first.action_id == actions[0]
    # Put the queue's row back to ready, as a view lagging behind the events would show it.
    view = wc.work_queue
    with sql.transaction(view.datastore, commit=True) as c:
        c.execute(
            "UPDATE wq_actions SET status = 'ready', ready_since = 0 WHERE action_id = ?",
            (actions[0].hex,),
        )
    claim = wc.claim_next("w1")
    assert claim is not None
    assert (claim.action_id, claim.candidates_tried) == (actions[1], 2)


def free(*actions: UUID) -> list[bool]:
    """Whether another session can take each Action's claim hold now (and gives it back):
    a claim that ended holds none, whichever way it ended."""
    with postgres.connect() as conn:
        taken = []
        for action in actions:
            row = conn.execute(
                "SELECT pg_try_advisory_lock(%s, hashtext(%s))", (CLAIM_LOCKS, action.hex)
            ).fetchone()
            taken.append(bool(row and row[0]))
        conn.execute("SELECT pg_advisory_unlock_all()")
    return taken


@pytest.mark.parametrize("backend", ["postgresql"])
@pytest.mark.parametrize("one_exchange", [True, False])
def test_a_claim_ends_its_holds_however_it_ends(
    wc: WorkCenter, monkeypatch: pytest.MonkeyPatch, one_exchange: bool
) -> None:
    """A saved claim, one whose write the server sent back to two exchanges, one that
    lost a race to a stale candidate first, one that saved nothing: each leaves no
    candidate held once it ends."""
    monkeypatch.setattr(OneCommitPostgresRecorder, "one_exchange", one_exchange)
    actions = three_items(wc)
    claimed = wc.claim_next("w1")
    assert claimed is not None and claimed.action_id == actions[0]
    assert free(actions[0]) == [True]
    # A stale candidate first (its queue row put back to ready), then the next.
    with sql.transaction(wc.work_queue.datastore, commit=True) as c:
        c.execute(
            "UPDATE wq_actions SET status = 'ready', ready_since = 0 WHERE action_id = ?",
            (actions[0].hex,),
        )
    claimed = wc.claim_next("w1")
    assert claimed is not None and claimed.candidates_tried == 2
    assert free(actions[0], actions[1]) == [True, True]
    with wc._runs.claim_candidates(16) as candidates:  # tried, and left unsaved
        assert [next(candidates).action_id, next(candidates).action_id] == [
            actions[0],  # still stale
            actions[2],
        ]
        assert free(actions[2]) == [False]  # held meanwhile
    assert free(actions[0], actions[2]) == [True, True]


@pytest.mark.parametrize("backend", ["postgresql"])
@pytest.mark.parametrize("table", ["wq_actions", "workcenter_events", "tracking"])
def test_maintenance_locks_a_table_a_claim_read_while_the_claim_goes_on(
    wc: WorkCenter, monkeypatch: pytest.MonkeyPatch, table: str
) -> None:
    """An operator's ``ACCESS EXCLUSIVE`` lock (``ALTER TABLE``, ``VACUUM FULL``) on a
    table a claim in flight has read is granted at once, and the claim then waits for
    the maintenance and goes on. A claim holds its candidates, not the tables it read:
    had it held them, it would wait (reading and saving on other connections) for the
    maintenance that waits for it, through the worker, where PostgreSQL sees no
    deadlock (ADR-0105)."""
    actions = three_items(wc)
    entered, go = threading.Event(), threading.Event()
    run_states = wc._runs.repo.run_states

    def paused(*args: Any, **kwargs: Any) -> Any:
        entered.set()
        go.wait(30)
        return run_states(*args, **kwargs)

    monkeypatch.setattr(wc._runs.repo, "run_states", paused)
    claimed: list[Any] = []
    claiming = threading.Thread(target=lambda: claimed.append(wc.claim_next("w1")))
    claiming.start()
    try:
        assert entered.wait(30)  # the claim holds its candidate and its connection
        schema = wc.store.recorder.datastore.schema  # type: ignore[attr-defined]
        with postgres.connect() as conn:
            conn.execute("SET lock_timeout = '5s'")
            with conn.transaction():
                # Refused after 5 s (LockNotAvailable) while the claim holds the table.
                conn.execute(f'LOCK TABLE "{schema}".{table} IN ACCESS EXCLUSIVE MODE')
                go.set()
                # The claim reads and saves meanwhile: it waits for this transaction.
                time.sleep(0.3)
                assert claiming.is_alive()
    finally:
        go.set()
        claiming.join(30)
    assert not claiming.is_alive()
    assert [c.action_id for c in claimed] == [actions[0]]
    assert free(actions[0]) == [True]
