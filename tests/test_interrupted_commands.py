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

from datetime import UTC, datetime
from typing import Any
from uuid import uuid4

import pytest
from conftest import create_linear
from eventsourcing.sqlite import SQLiteTransaction
from pydantic_core import PydanticSerializationError

from workcenter.adapters.persistence import encode_state
from workcenter.application import WorkCenter
from workcenter.domain import work_item as wi
from workcenter.domain.actor import OPERATOR


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


def test_an_interrupt_while_pydantic_writes_an_event_is_an_interrupt(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """pydantic turns a Ctrl-C that lands while it writes JSON into its own error, the
    interrupt lost: an untyped error escaped the API and the caller's Ctrl-C was
    swallowed."""

    class Interrupted:
        def to_json(self, *args: Any, **kwargs: Any) -> bytes:
            raise PydanticSerializationError("Error serializing to JSON: KeyboardInterrupt: ")

    event = wi.StatusChanged(
        originator_id=uuid4(),
        originator_version=2,
        timestamp=datetime.now(UTC),
        actor=OPERATOR,
        status="ready",
        current_action_id=None,
    )
    monkeypatch.setattr(wi.StatusChanged, "__pydantic_serializer__", Interrupted())
    with pytest.raises(KeyboardInterrupt):
        encode_state(event)


def test_a_postgresql_connection_interrupted_in_use_is_not_used_again(wc: WorkCenter) -> None:
    datastore = wc.store.recorder.datastore  # type: ignore[attr-defined]
    with pytest.raises(KeyboardInterrupt), datastore.get_connection() as conn:
        raise KeyboardInterrupt
    assert conn.closed
    create_linear(wc)  # the pool makes another
    assert wc.maintenance.verify_history().ok
