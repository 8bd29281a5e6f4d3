"""The WAL checkpointed by a thread of the process, off the writers' path (ADR-0084):
the thread copies the WAL into the database file while the commits' own checkpoint
waits for a far longer WAL, and a closed store has its thread stopped and no WAL left."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

from workcenter.adapters.wal_checkpoint import WalCheckpointer
from workcenter.application import WorkCenter

WAIT_SECONDS = 30.0  # how long a test waits for the thread (a bound, not a timing)


def checkpointer(wc: WorkCenter) -> WalCheckpointer:
    datastore: Any = wc.store.factory.datastore  # type: ignore[attr-defined]
    found: WalCheckpointer = datastore.pool.checkpointer
    return found


def events_in_the_database_file(path: Path) -> int:
    """Events in the database file itself: ``immutable`` reads no WAL."""
    main = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    try:
        count: int = main.execute("SELECT COUNT(*) FROM stored_events").fetchone()[0]
    except sqlite3.OperationalError:  # no table yet: the schema is in the WAL too
        return 0
    finally:
        main.close()
    return count


def test_the_thread_copies_the_wal_into_the_database_file(db_path: Path) -> None:
    with WorkCenter.open(db_path) as wc:
        thread = checkpointer(wc)
        assert thread.running
        for i in range(20):  # about 340 pages: the commits' own checkpoint waits for 16,000
            wc.create_work_item(title=f"t{i}", goal="g", acceptance_criteria=["c"], start=True)
        events = wc.event_count()
        deadline = time.monotonic() + WAIT_SECONDS
        while events_in_the_database_file(db_path) < events:
            assert time.monotonic() < deadline, "the thread never copied the WAL"
            time.sleep(0.05)
        assert thread.checkpoints > 0


def test_a_closed_store_stops_its_thread_and_leaves_no_wal(db_path: Path) -> None:
    wc = WorkCenter.open(db_path)
    thread = checkpointer(wc)
    wc.create_work_item(title="t", goal="g", acceptance_criteria=["c"], start=True)
    events = wc.event_count()
    assert thread.running
    wc.close()
    assert not thread.running
    wal = Path(f"{db_path}-wal")
    assert not wal.exists() or wal.stat().st_size == 0
    assert events_in_the_database_file(db_path) == events


def test_a_store_in_memory_has_no_thread() -> None:
    with WorkCenter.open("file:wal-memory?mode=memory&cache=shared") as wc:
        datastore: Any = wc.store.factory.datastore  # type: ignore[attr-defined]
        assert datastore.pool.checkpointer is None
        wc.create_work_item(title="t", goal="g", acceptance_criteria=["c"])
