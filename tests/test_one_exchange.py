"""A PostgreSQL write in one exchange, and its way back to two (ADR-0070).

The server chains the events, moves the views' positions and writes the rows the client
built before the lock, after checking what the client assumed when it built them: no
view behind (the detail view may be, on the streams of the items it rewrites only) and
every stream the DTOs read still at the version they read. When the check fails the
write is rolled back and written the two-exchange way (ADR-0051); either way the views
must equal a rebuild and the chain must verify.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import postgres
import psycopg
import pytest
from conftest import FakeClock, create_linear, refused, report
from eventsourcing.persistence import IntegrityError
from test_read_ahead import assert_views_equal_a_rebuild, writes_without_views

from workcenter.adapters import postgres_write
from workcenter.adapters.executors import echo
from workcenter.adapters.postgres_recorder import OneCommitPostgresRecorder
from workcenter.adapters.worker import run_worker
from workcenter.application import WorkCenter
from workcenter.projections import sql
from workcenter.service_layer.history.hash_chain import HistoryConflict

REQUEST = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 64}


@pytest.fixture
def backend() -> str:
    postgres.require_server()
    return "postgresql"


@pytest.fixture
def exchanges(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """How each write went: "one", or "two" after the server sent it back."""
    went: list[str] = []
    write_once = OneCommitPostgresRecorder._write_once

    def spy(self: OneCommitPostgresRecorder, *args: Any, **kwargs: Any) -> Any:
        written = write_once(self, *args, **kwargs)
        went.append("one" if written is not None else "two")
        return written

    monkeypatch.setattr(OneCommitPostgresRecorder, "_write_once", spy)
    yield went


def test_a_run_cycle_writes_in_one_exchange_each(wc: WorkCenter, exchanges: list[str]) -> None:
    item = create_linear(wc, stages=("implement",))
    claimed = wc.claim_next("worker-1")
    assert claimed is not None
    wc.renew_lease(claimed)
    admission = wc.reserve_request(claimed.work_item_id, request=REQUEST, run_id=claimed.run_id)
    wc.settle_request(claimed.work_item_id, admission.request_id, usage={"input_tokens": 9})
    wc.finish_run(claimed, report())
    assert exchanges and set(exchanges) == {"one"}, exchanges
    assert wc.detail(item.id)["status"] == "done"  # type: ignore[index]
    assert wc.maintenance.verify_history().ok
    assert_views_equal_a_rebuild(wc)


def test_a_worker_counts_its_writes_sent_back(
    wc: WorkCenter, location: str, clock: FakeClock
) -> None:
    """What deployment.md tells operators to watch is in ``workcenter worker``'s summary
    (found by acceptance testing: it was in the process only)."""
    create_linear(wc, stages=("implement",))
    writes_without_views(location, clock, items=2)  # every view is now behind
    stats = run_worker(wc, echo, worker="w1", exit_when_idle=True, max_runs=1)
    assert stats.finished == 1
    assert stats.writes_sent_back >= 1
    assert stats.json()["writes_sent_back"] == stats.writes_sent_back
    assert f"writes sent back to two exchanges: {stats.writes_sent_back}" in stats.summary()


def test_views_behind_send_the_write_back_to_two_exchanges(
    wc: WorkCenter, location: str, clock: FakeClock, exchanges: list[str]
) -> None:
    create_linear(wc, stages=("implement",))
    writes_without_views(location, clock, items=2)  # every view is now behind
    exchanges.clear()
    create_linear(wc, stages=("implement",))
    assert exchanges == ["two"]
    assert wc.store.recorder.fallbacks == 1  # type: ignore[attr-defined]
    create_linear(wc, stages=("implement",))
    assert exchanges == ["two", "one"]  # the views caught up with the write before
    assert wc.maintenance.verify_history().ok
    assert_views_equal_a_rebuild(wc)


def test_a_stream_written_between_the_build_and_the_lock_sends_the_write_back(
    wc: WorkCenter,
    location: str,
    clock: FakeClock,
    exchanges: list[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The finish's DTO was built from the ledger as this process last saw it; another
    process reserves on that ledger after the build, before the write's lock: the server
    finds the ledger moved on, and the DTO is built again under the lock."""
    item = create_linear(wc, stages=("implement",))
    clock.advance(1)  # else the finish, at the creation time, stores a marker (ADR-0073)
    claimed = wc.claim_next("worker-1")
    assert claimed is not None
    write_once = OneCommitPostgresRecorder._write_once
    other = WorkCenter.open(location, clock=clock, create=False)

    def meanwhile(self: OneCommitPostgresRecorder, *args: Any, **kwargs: Any) -> Any:
        monkeypatch.setattr(OneCommitPostgresRecorder, "_write_once", write_once)
        admission = other.reserve_request(item.id, request=REQUEST, run_id=claimed.run_id)
        assert admission.allowed
        return write_once(self, *args, **kwargs)

    exchanges.clear()
    monkeypatch.setattr(OneCommitPostgresRecorder, "_write_once", meanwhile)
    try:
        wc.finish_run(claimed, report())
    finally:
        other.close()
    assert wc.store.recorder.fallbacks == 1  # type: ignore[attr-defined]
    detail = wc.detail(item.id)
    assert detail is not None and detail["status"] == "done"
    assert wc.maintenance.verify_history().ok
    assert_views_equal_a_rebuild(wc)


def test_the_server_refuses_a_write_after_a_cut_tail_with_the_typed_error(
    wc: WorkCenter,
) -> None:
    """The chain's cut check runs on the server (the tamper tests cover the rest)."""
    create_linear(wc, stages=("implement",))
    datastore = wc.store.factory.datastore  # type: ignore[attr-defined]
    events = wc.store.recorder.events_table_name  # type: ignore[attr-defined]
    with datastore.transaction(commit=True) as c:
        c.execute(
            f"DELETE FROM {events} WHERE notification_id = (SELECT MAX(notification_id)"
            f" FROM {events})"
        )
    with refused(wc, HistoryConflict, match="deleted from the end"):
        create_linear(wc, stages=("implement",))
    assert wc.store.recorder.fallbacks == 0  # type: ignore[attr-defined]


def test_statements_are_held_back_until_the_sync(wc: WorkCenter) -> None:
    """What ``held_back`` rests on in psycopg: a pipelined statement executed in the block
    is queued, not sent, so the server gets the whole write at once."""
    datastore = wc.store.factory.datastore  # type: ignore[attr-defined]
    with datastore.get_connection() as conn, conn.pipeline() as pipeline:
        with postgres_write.held_back(conn):
            cursor = conn.cursor()
            cursor.execute("SELECT 1 AS one")
            assert pipeline.command_queue, "psycopg sent the statement at once"
        pipeline.sync()
        assert cursor.fetchone()["one"] == 1


def test_the_two_exchange_write_stays_when_turned_off(
    wc: WorkCenter, exchanges: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(OneCommitPostgresRecorder, "one_exchange", False)
    item = create_linear(wc, stages=("implement",))
    claimed = wc.claim_next("worker-1")
    assert claimed is not None
    wc.finish_run(claimed, report())
    assert exchanges == []
    assert wc.detail(item.id)["status"] == "done"  # type: ignore[index]
    assert wc.maintenance.verify_history().ok
    assert_views_equal_a_rebuild(wc)


def test_a_failed_statement_raises_its_own_error_however_the_answers_arrive(
    wc: WorkCenter, location: str, clock: FakeClock
) -> None:
    """Leaving a pipeline takes its last answers in a ``finally``: when the failure was
    taken first, psycopg raises the skipped statements' "pipeline aborted" over it (a
    lost connection, to ``watch_connections``). Repeated, since which comes first
    depends on timing."""
    from eventsourcing.persistence import IntegrityError

    item = create_linear(wc, stages=("implement",))
    stale = wc._repository.events(item.id)[-1:]  # type: ignore[attr-defined]
    for _ in range(20):
        with pytest.raises(IntegrityError):
            wc.store.events.put(stale)
    for i in range(5):
        writes_without_views(location, clock, items=1)
        create_linear(wc, title=f"after {i}", stages=("implement",))
    assert wc.store.recorder.fallbacks == 5  # type: ignore[attr-defined]
    assert wc.maintenance.verify_history().ok
    assert_views_equal_a_rebuild(wc)


def test_a_write_is_its_call_its_rows_and_its_commit(wc: WorkCenter) -> None:
    """The library's lock timeout, lock, notify and insert are done by the one call
    (ADR-0075), and each view's row is one statement: a renewal sends BEGIN, the call,
    the work queue's row, the detail view's marker (ADR-0076) and COMMIT (8 statements
    before, the library's four and the call among them). A claim and a finish write
    their item's queue row once (ADR-0087; twice before, its status and its update
    time)."""
    create_linear(wc, stages=("implement",))
    with postgres.statements() as seen:
        claimed = wc.claim_next("worker-1")
        assert claimed is not None
        sent = _heads(seen)
        seen.clear()
        wc.renew_lease(claimed)
        renewed = _heads(seen)
        seen.clear()
        wc.finish_run(claimed, report())
        finished = _heads(seen)
    # After the claim's reads (its candidate, then the Action, item and ledger).
    assert sent[sent.index("BEGIN") :] == [
        "BEGIN",
        "SELECT * FROM",
        "INSERT INTO WQ_RUNS",
        "UPDATE WQ_ACTIONS SET",
        "UPDATE WQ_ITEMS SET",
        "INSERT INTO DV_DETAILS",
        "COMMIT",
        # The claim's reads end by releasing the holds on its candidates: its session's
        # advisory locks, with no transaction of its own to commit (ADR-0105).
        "SELECT PG_ADVISORY_UNLOCK_ALL",
    ], sent
    # The write alone: the renewal is decided on the Action the claim left in the
    # worker's cache, unread (ADR-0078; a read of it went first before).
    assert renewed == [
        "BEGIN",
        "SELECT * FROM",
        "UPDATE WQ_RUNS SET",
        "INSERT INTO DV_DETAILS",
        "COMMIT",
    ], renewed
    assert finished == [
        "BEGIN",
        "SELECT * FROM",
        "DELETE FROM WQ_RUNS",
        "UPDATE WQ_ACTIONS SET",
        "UPDATE WQ_ITEMS SET",
        "UPDATE MB_ITEMS SET",  # the item's turns gated off: it is done
        "INSERT INTO DV_DETAILS",
        "COMMIT",
    ], finished


def _heads(seen: list[tuple[Any, Any]]) -> list[str]:
    """Each statement's first words, up to a parenthesis, in capitals."""
    texts = [q if isinstance(q, str) else q.as_string() for q, _ in seen]
    return [" ".join(t.split("(")[0].split()[:3]).upper() for t in texts]


def test_a_lost_race_through_the_call_is_the_librarys_integrity_error(
    wc: WorkCenter,
) -> None:
    """The optimistic insert's unique violation, raised inside the call, reaches the
    repository as the library's IntegrityError: it writes nothing and the connection
    stays usable."""
    item = create_linear(wc, stages=("implement",))
    head = wc.store.recorder.max_notification_id()
    stale = wc._repository.events(item.id)[-1:]  # type: ignore[attr-defined]
    for _ in range(3):
        with pytest.raises(IntegrityError):
            wc.store.events.put(stale)
    assert wc.store.recorder.max_notification_id() == head
    create_linear(wc, stages=("implement",))
    assert wc.maintenance.verify_history().ok


def test_a_failed_pipelines_roll_back_forgets_what_psycopg_prepared(wc: WorkCenter) -> None:
    """psycopg counts a statement prepared when it sends its ``Parse`` (at its sixth
    execution), before the answer; in a pipeline after a failed statement the server
    skips it, and psycopg forgets its statements on a ``ROLLBACK`` only in some states.
    Four worker processes met the difference ("prepared statement ... does not exist",
    ADR-0075): a failed pipeline's roll back clears psycopg's cache, so that psycopg
    deallocates everything before its next statement and both sides agree."""
    datastore = wc.store.factory.datastore  # type: ignore[attr-defined]
    add_one = "SELECT 1 + %s::int AS two"
    with datastore.get_connection() as conn:
        # A ROLLBACK seen while nothing was prepared: psycopg counts it, and so skips its
        # forgetting when it sees the next one (it does so for statements new to it only).
        conn.execute("ROLLBACK")
        for _ in range(5):
            conn.execute(add_one, (1,))
        with pytest.raises(psycopg.errors.DivisionByZero), conn.pipeline():
            conn.execute("BEGIN")
            conn.execute("SELECT 1 / 0")
            conn.execute(add_one, (1,))  # the sixth: prepared, its Parse skipped
            conn.execute("COMMIT")
        assert conn._prepared._names  # psycopg believes it prepared
        sql.roll_back(conn)
        assert not conn._prepared._names
        assert conn.execute(add_one, (1,)).fetchone()["two"] == 2
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
