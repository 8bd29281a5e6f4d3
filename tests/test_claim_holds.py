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

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any
from uuid import UUID

import postgres
import pytest
from conftest import action_spec, actions_by_sequence, create_dynamic, create_linear, plan

from workcenter.adapters.postgres_connection import StoreDisconnected
from workcenter.adapters.postgres_recorder import OneCommitPostgresRecorder
from workcenter.adapters.postgres_settings import CLAIM_HOLD_TIMEOUT_ENV
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


def test_a_claim_that_lost_its_items_stream_to_a_sibling_claim_tries_again(
    wc: WorkCenter, other: WorkCenter, monkeypatch: pytest.MonkeyPatch, backend: str
) -> None:
    """Two Actions of one item claimed at the same moment: the claim that saves second
    lost the race for the item's stream, not for its Action, which it still holds. It
    was answered None (on PostgreSQL every other candidate was held), so its worker
    slept with an Action ready; it now decides again on the states read and claims."""
    item = create_dynamic(wc)
    plan(wc, item.id, action_spec(), action_spec(type="review"))
    run_states = other._runs.repo.run_states
    raced: list[Any] = []

    def read_then_race(*args: Any, **kwargs: Any) -> Any:
        states = run_states(*args, **kwargs)
        if not raced:  # the sibling is claimed between this read and this claim's save
            raced.append(wc.claim_next("w1"))
        return states

    monkeypatch.setattr(other._runs.repo, "run_states", read_then_race)
    second = other.claim_next("w2")
    assert raced[0] is not None and second is not None
    assert {raced[0].action_id, second.action_id} == {
        a.id for a in actions_by_sequence(wc, item.id)
    }
    # On SQLite nothing is held: the first claim took the oldest, the second the next.
    assert second.candidates_tried == (1 if backend == "postgresql" else 2)


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


@pytest.mark.parametrize("backend", ["sqlite"])
def test_on_sqlite_claims_taken_meanwhile_do_not_make_a_claim_skip_ready_actions(
    wc: WorkCenter, other: WorkCenter, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A claim pages through the queue; other claims of the process take the Actions of
    its first page while it tries them. Its next page is the Actions after the last one
    it saw, not those after as many rows as it has read (which, with rows gone, skipped
    ready Actions and answered None while two were ready; ADR-0138)."""
    from workcenter.service_layer.handlers import claim as claims

    actions = [
        a
        for item in (create_linear(wc, stages=("implement",)) for _ in range(4))
        if (a := item.current_action_id) is not None
    ]
    monkeypatch.setattr(claims, "CLAIM_PAGE", 2)
    try_claim = claims._try_claim
    taken: list[UUID] = []

    def taken_meanwhile(*args: Any, **kwargs: Any) -> Any:
        if not taken:  # while this claim tries its first candidate, two claims take theirs
            monkeypatch.setattr(claims, "_try_claim", try_claim)
            taken.extend(c.action_id for c in (wc.claim_next("w1"), wc.claim_next("w1")) if c)
        return try_claim(*args, **kwargs)

    monkeypatch.setattr(claims, "_try_claim", taken_meanwhile)
    claim = other.claim_next("w2")
    assert taken == actions[:2]
    assert claim is not None
    assert (claim.action_id, claim.candidates_tried) == (actions[2], 3)


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


def hold_timeout(wc: WorkCenter, seconds: int) -> None:
    """As ``$WORKCENTER_POSTGRES_CLAIM_HOLD_TIMEOUT`` would set it for ``wc``'s claims."""
    wc.store.recorder.datastore.claim_hold_timeout = seconds  # type: ignore[attr-defined]


@pytest.mark.parametrize("backend", ["postgresql"])
def test_a_claim_frozen_between_its_exchanges_loses_its_holds(
    wc: WorkCenter, other: WorkCenter
) -> None:
    """A claim that sends nothing for the hold timeout (its thread stalled here) has its
    session ended by the server, and its holds with it: another claim takes the Action.
    The frozen claim, going on, meets a typed error, not a hang (ADR-0111)."""
    actions = three_items(wc)
    hold_timeout(other, 1)
    with pytest.raises(StoreDisconnected), other._runs.claim_candidates(16) as candidates:
        assert candidates is not None
        assert next(candidates).action_id == actions[0]
        assert free(actions[0]) == [False]
        time.sleep(2.5)
        assert free(actions[0]) == [True]
        claim = wc.claim_next("w1")
        assert claim is not None and claim.action_id == actions[0]
    # The next claim of the frozen store reconnects and goes on.
    claim = other.claim_next("w2")
    assert claim is not None and claim.action_id == actions[1]


@pytest.mark.parametrize("backend", ["postgresql"])
def test_a_claims_connection_goes_back_to_the_pool_without_the_timeout(
    wc: WorkCenter, location: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hold timeout is the claim's only: every connection of the pool, the claim's
    among them, is still open after idling longer than it once the claim ended."""
    actions = three_items(wc)
    monkeypatch.setenv("POSTGRES_POOL_SIZE", "2")
    monkeypatch.setenv("POSTGRES_MAX_OVERFLOW", "0")
    monkeypatch.setenv(CLAIM_HOLD_TIMEOUT_ENV, "1")
    with WorkCenter.open(location, create=False) as worker:
        claim = worker.claim_next("w1")
        assert claim is not None and claim.action_id == actions[0]
        time.sleep(2.5)
        datastore = worker.store.recorder.datastore  # type: ignore[attr-defined]
        with datastore.get_connection() as one, datastore.get_connection() as two:
            for conn in (one, two):
                row = conn.execute("SELECT current_setting('idle_session_timeout') AS t").fetchone()
                assert row["t"] == "0"


@pytest.mark.parametrize("backend", ["postgresql"])
def test_a_session_the_server_ended_for_idling_is_a_lost_connection(wc: WorkCenter) -> None:
    """The server's own words for it (SQLSTATE 57P05) are a ``StoreDisconnected``, as any
    lost connection is, never the driver's error."""
    datastore = wc.store.recorder.datastore  # type: ignore[attr-defined]
    with pytest.raises(StoreDisconnected), datastore.get_connection() as conn:
        conn.execute("SET idle_session_timeout = '500ms'")
        time.sleep(1.5)
        conn.execute("SELECT 1")


@pytest.mark.parametrize("backend", ["postgresql"])
def test_a_stopped_worker_process_gives_its_candidate_up(wc: WorkCenter, location: str) -> None:
    """A worker process stopped (SIGSTOP) while it holds a candidate: once the hold
    timeout passes, another worker claims that Action; continued, the stopped one is
    told its claim lost its connection, in one typed error (ADR-0111)."""
    actions = three_items(wc)
    script = Path(__file__).with_name("frozen_claim.py")
    env = {**os.environ, CLAIM_HOLD_TIMEOUT_ENV: "1"}
    child = subprocess.Popen(
        [sys.executable, str(script), location], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().split() == ["held", str(actions[0])]
        deadline = time.monotonic() + 10
        while Path(f"/proc/{child.pid}/stat").read_text().split(") ")[1][0] != "T":
            assert time.monotonic() < deadline, "the worker never stopped"
            time.sleep(0.05)
        assert free(actions[0]) == [False]
        time.sleep(2.5)
        claim = wc.claim_next("w1")
        assert claim is not None and claim.action_id == actions[0]
        child.send_signal(signal.SIGCONT)
        out, _ = child.communicate(timeout=30)
        assert out.split() == ["refused", "StoreDisconnected"]
        assert child.returncode == 0
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
