"""A SQLite file's lock held past the lock timeout by another connection (a backup, a
maintenance tool, an operator's shell): a typed PoolBusy that writes nothing, waited
out by workers (ADR-0135). It escaped the API as the library's OperationalError, and
ended every worker on the machine with its Runs in hand (found by acceptance testing)."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest
from conftest import create_linear

from workcenter.adapters.executors import echo
from workcenter.adapters.postgres_connection import PoolBusy
from workcenter.adapters.worker import run_worker
from workcenter.application import WorkCenter


@pytest.fixture(autouse=True)
def short_lock_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SQLITE_LOCK_TIMEOUT", "1")


def held(db_path: Path) -> sqlite3.Connection:
    """Another connection holding the file's write lock until it rolls back."""
    holder = sqlite3.connect(db_path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    return holder


def test_a_command_kept_from_the_lock_is_refused_typed_writing_nothing(db_path: Path) -> None:
    with WorkCenter.open(db_path) as wc:
        create_linear(wc)
        before = wc.event_count()
        holder = held(db_path)
        try:
            with pytest.raises(PoolBusy, match="nothing was written: try again"):
                create_linear(wc)
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        assert wc.event_count() == before
        create_linear(wc)  # the lock gone, it goes through


def test_a_worker_waits_the_lock_out_and_finishes_its_runs(db_path: Path) -> None:
    with WorkCenter.open(db_path) as wc:
        items = [create_linear(wc, stages=("implement",)).id for _ in range(3)]
        holder = held(db_path)
        released = threading.Timer(2.5, lambda: (holder.execute("ROLLBACK"), holder.close()))
        released.start()
        try:
            stats = run_worker(wc, echo, worker="w", exit_when_idle=True, poll_seconds=0.05)
        finally:
            released.join()
        assert (stats.finished, stats.errors) == (3, 0), stats
        assert {wc.work_item(item).status for item in items} == {"done"}


def test_every_thread_held_up_by_the_lock_is_told_pool_busy(db_path: Path) -> None:
    """One WorkCenter shared by threads: the one holding the writer waits on the file's
    lock and is told PoolBusy; the others waited for the writer past the pool's own
    timeout and got the library's ConnectionUnavailableError, a 500 of the HTTP API and
    the end of a worker running Runs at once (found by acceptance testing, ADR-0136)."""
    with WorkCenter.open(db_path) as wc:
        create_linear(wc)
        before = wc.event_count()
        holder = held(db_path)
        failures: list[BaseException] = []

        def create() -> None:
            try:
                create_linear(wc)
            except BaseException as error:  # what escapes is the finding
                failures.append(error)

        threads = [threading.Thread(target=create) for _ in range(8)]
        try:
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(30)
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        assert len(failures) == 8 and {type(f) for f in failures} == {PoolBusy}, failures
        assert wc.event_count() == before
