"""A Ctrl-C (or any interrupt that is not an ``Exception``) landing inside a command
leaves the ``WorkCenter`` usable, on both databases (found by an embedder, ADR-0137).
On SQLite, one landing between a transaction's ``BEGIN`` and the ``with`` that ends it
left the connection in its transaction, back in the pool: every later command failed
"cannot start a transaction within a transaction" (the library's untyped error) until
the store was opened again. On PostgreSQL, one landing mid-exchange left psycopg's
prepared statements out of step with the server's: later commands failed "prepared
statement ... does not exist". And pydantic turned one landing while it wrote an event
into its own error, the interrupt lost."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from conftest import create_linear
from eventsourcing.sqlite import SQLiteTransaction
from pydantic import BaseModel, field_serializer

from workcenter.adapters.persistence import encode_state
from workcenter.adapters.worker import run_worker
from workcenter.application import Claim, WorkCenter


@pytest.fixture
def backend() -> str:
    return "postgresql"


def test_a_command_after_an_interrupt_inside_a_sqlite_transaction_works(
    db_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    with WorkCenter.open(db_path) as wc:
        enter = SQLiteTransaction.__enter__
        armed = [True]

        def interrupted(self: SQLiteTransaction) -> Any:
            cursor = enter(self)  # BEGIN sent
            if armed[0] and self.commit:
                armed[0] = False
                raise KeyboardInterrupt
            return cursor

        monkeypatch.setattr(SQLiteTransaction, "__enter__", interrupted)
        events = wc.event_count()
        with pytest.raises(KeyboardInterrupt):
            create_linear(wc)
        assert wc.event_count() == events  # nothing of it was written
        for _ in range(3):  # the pool's every connection, whichever comes
            create_linear(wc)
        assert wc.event_count() > events
        assert wc.maintenance.verify_history().ok


class Interrupting(BaseModel):
    """A model whose writing runs Python code that is interrupted, as a Ctrl-C landing
    while pydantic writes an event is."""

    value: int

    @field_serializer("value")
    def interrupted(self, value: int) -> int:
        raise KeyboardInterrupt


def test_an_interrupt_while_pydantic_writes_an_event_is_an_interrupt() -> None:
    """pydantic turns an interrupt that lands while it writes JSON into its own error,
    the interrupt lost: an untyped error escaped the API and the caller's Ctrl-C was
    swallowed."""
    with pytest.raises(KeyboardInterrupt):
        encode_state(Interrupting(value=1))


def test_a_postgresql_connection_interrupted_in_use_is_not_used_again(wc: WorkCenter) -> None:
    datastore = wc.store.recorder.datastore  # type: ignore[attr-defined]
    with pytest.raises(KeyboardInterrupt), datastore.get_connection() as conn:
        raise KeyboardInterrupt
    assert conn.closed
    create_linear(wc)  # the pool makes another
    assert wc.maintenance.verify_history().ok


@pytest.mark.parametrize("interrupt", [KeyboardInterrupt, SystemExit, asyncio.CancelledError])
def test_an_executor_interrupted_gives_its_run_back_and_keeps_no_lease(
    db_path: Any, interrupt: type[BaseException]
) -> None:
    """An executor that raises what is not an ``Exception`` (a service's task cancelled,
    Ctrl-C) ends the worker with it, as before, and its Run is given back with the
    lease's renewer stopped. Before, the renewer went on renewing the lease for as long
    as the store stayed open: the Action was held, never recovered (found by an
    embedder, ADR-0138)."""

    def executor(claim: Claim) -> dict[str, Any]:
        raise interrupt

    with WorkCenter.open(db_path) as wc:
        item = create_linear(wc)
        before = set(threading.enumerate())
        with pytest.raises(interrupt):
            run_worker(wc, executor, worker="w", lease_seconds=3, max_runs=1)
        assert set(threading.enumerate()) <= before  # no renewer left
        assert item.current_action_id is not None
        action = wc.action(item.current_action_id)
        assert action.status == "ready"  # claimable again at once
        assert [r.end_reason for r in action.runs] == [
            f"worker interrupted by {interrupt.__name__}"
        ]
