"""An operator's schema change on the store's tables while its processes run (ADR-0107).

docs/deployment.md lets table-locking maintenance (``ALTER TABLE`` among it) run while
workers run (ADR-0105). A column added to the event or snapshot table, then dropped,
must leave every read of a process that was already running working: a stream loaded
that is not in the process's cache (snapshots first, then events), a claim, and a page
of the log (a claim's catch-up of the work queue, the projection runner's subscription).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import Any

import postgres
import pytest
from click.testing import CliRunner
from conftest import create_linear
from eventsourcing.persistence import NotSupportedError

from workcenter.adapters.cli import cli
from workcenter.adapters.executors import echo
from workcenter.adapters.postgres_connection import PoolBusy, StoreDisconnected, held_up
from workcenter.adapters.postgres_recorder import OneCommitPostgresRecorder
from workcenter.adapters.worker_run import Reconnect
from workcenter.application import WorkCenter
from workcenter.projections.inline import InlineProjections
from workcenter.projections.runner import ProjectionRunner
from workcenter.projections.sql import LOCK_NOT_AVAILABLE


@pytest.fixture
def backend() -> str:
    return "postgresql"


@pytest.fixture
def worker(location: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[WorkCenter]:
    """A worker process's store: its own connections (two, each soon used by every read
    below), cache and prepared statements."""
    monkeypatch.setenv("POSTGRES_POOL_SIZE", "2")
    monkeypatch.setenv("POSTGRES_MAX_OVERFLOW", "0")
    center = WorkCenter.open(location, create=False, inline_projections=False)
    yield center
    center.close()


def work(wc: WorkCenter, worker: WorkCenter) -> None:
    """What a running worker and runner read, each statement prepared on their
    connections once run (psycopg prepares the library's reads at once)."""
    item = create_linear(wc, stages=("implement",))
    assert worker.work_item(item.id).id == item.id  # not in its cache: the library's load
    assert worker.store.recorder.select_notifications(1, 5)  # a page of the log
    claim = worker.claim_next("w1")
    assert claim is not None and claim.work_item_id == item.id
    worker.finish_run(claim, echo(claim))


@pytest.mark.parametrize("table", ["workcenter_events", "workcenter_snapshots"])
def test_a_column_added_then_dropped_breaks_no_read_of_a_running_process(
    wc: WorkCenter, worker: WorkCenter, location: str, table: str
) -> None:
    for _ in range(4):
        work(wc, worker)
    schema = location.rsplit("schema=", 1)[1]
    with postgres.connect() as conn:
        conn.execute(f'ALTER TABLE "{schema}".{table} ADD COLUMN operators_note text')
    # Before ADR-0107: NotSupportedError "cached plan must not change result type".
    for _ in range(4):
        work(wc, worker)
    with postgres.connect() as conn:
        conn.execute(f'ALTER TABLE "{schema}".{table} DROP COLUMN operators_note')
    for _ in range(4):
        work(wc, worker)


def test_a_runner_whose_read_of_the_log_fails_says_so_in_one_line(
    wc: WorkCenter, location: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The runner stops on a store error it cannot wait out: one line and exit 2 (before
    ADR-0107, the library's subscription wrapped such a failure in a RuntimeError, which
    reached the user as a traceback)."""
    create_linear(wc, stages=("implement",))

    def refused(*_: Any, **__: Any) -> Any:
        raise NotSupportedError("cached plan must not change result type")

    monkeypatch.setattr(OneCommitPostgresRecorder, "select_notifications", refused)
    result = CliRunner().invoke(cli, ["--db", location, "projections", "run"])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert result.output.strip().splitlines()[-1] == (
        "StoreUnavailable: cached plan must not change result type"
    )


@pytest.mark.parametrize(
    ("setting", "said"),
    [
        (("POSTGRES_LOCK_TIMEOUT", "1"), "POSTGRES_LOCK_TIMEOUT"),
        (("PGOPTIONS", "-c statement_timeout=300"), "the database cancelled a statement"),
    ],
)
def test_a_write_the_database_gives_up_is_a_passing_store_error(
    location: str, monkeypatch: pytest.MonkeyPatch, setting: tuple[str, str], said: str
) -> None:
    """A write that waits longer than ``POSTGRES_LOCK_TIMEOUT`` for an operator's lock on
    the event table, or whose statement the database cancels (a DBA's
    ``pg_cancel_backend``, a role's ``statement_timeout``), is refused by the server and
    rolled back: a ``PoolBusy`` (a ``StoreDisconnected``), which workers wait out and try
    again, said in one line without the server's PL/pgSQL context. Before ADR-0107 a lock
    waited out was the library's ``OperationalError``, which ended every worker (exit 2)
    under a 15 s maintenance lock, the reports of the Runs they had finished lost; a
    cancelled statement was until ADR-0138 (found by acceptance testing)."""
    monkeypatch.setenv(*setting)
    # One try, not the library's ten 0.2 s apart (its retry decorator's own).
    monkeypatch.setattr(
        OneCommitPostgresRecorder,
        "insert_events",
        OneCommitPostgresRecorder.insert_events.__wrapped__,  # type: ignore[attr-defined]
    )
    with WorkCenter.open(location, inline_projections=False) as wc:
        create_linear(wc, stages=("implement",))
        schema = location.rsplit("schema=", 1)[1]
        with postgres.connect() as conn, conn.transaction():
            conn.execute(f'LOCK TABLE "{schema}".workcenter_events IN ACCESS EXCLUSIVE MODE')
            with pytest.raises(PoolBusy) as refused:
                create_linear(wc, stages=("implement",))
        words = str(refused.value)
        assert said in words and "CONTEXT" not in words, words
        assert len(wc.list_work_items()) == 1  # nothing written
        create_linear(wc, stages=("implement",))  # the lock released: writes go on
        assert len(wc.list_work_items()) == 2


def test_the_projection_runner_waits_out_a_statement_the_database_gave_up(
    location: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The runner stopped (exit 2) on a lock waited out or a statement cancelled, where a
    worker waits (found by acceptance testing, ADR-0138): it waits, then catches up."""
    with WorkCenter.open(location, inline_projections=False) as wc:
        create_linear(wc, stages=("implement",))
        catch_up = InlineProjections.catch_up
        given_up = [2]

        def cancelled(self: Any, *args: Any, **kwargs: Any) -> Any:
            if given_up[0]:
                given_up[0] -= 1
                with postgres.connect() as conn:
                    conn.execute("SET statement_timeout = 1")
                    conn.execute("SELECT pg_sleep(1)")  # the server cancels it: 57014
            return catch_up(self, *args, **kwargs)

        monkeypatch.setattr(InlineProjections, "catch_up", cancelled)
        with ProjectionRunner(wc, poll=0.01) as runner:
            runner.wait(wc.store.recorder.max_notification_id(), timeout=30)
        assert runner.error is None and given_up == [0]


def test_a_worker_waiting_out_a_busy_store_says_so_once(caplog: pytest.LogCaptureFixture) -> None:
    """A worker backing off a busy store (a write that waited out the lock timeout, a
    pool with no connection free) logs one line as the wait begins, not one per try, and
    one again for the next wait; a lost connection is left to the store's own line."""
    stop = threading.Event()
    stop.set()  # each wait returns at once
    reconnect = Reconnect(stop)
    with caplog.at_level(logging.WARNING, logger="workcenter.store"):
        for _ in range(3):
            reconnect.wait(held_up(LOCK_NOT_AVAILABLE))
        reconnect.answered()
        reconnect.wait(held_up(LOCK_NOT_AVAILABLE))
        reconnect.answered()
        reconnect.wait(StoreDisconnected("lost the connection to the database"))
    said = [record.getMessage() for record in caplog.records]
    assert said == [f"{held_up(LOCK_NOT_AVAILABLE)}; waiting"] * 2
