"""A SQLite file's lock held past the lock timeout, as the error a PostgreSQL write held
up by a lock is (ADR-0135). Applied by the composition root to a SQLite store's
datastore, beside ``persistence.refuse_when_closed``."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from eventsourcing.persistence import OperationalError

from workcenter.adapters.postgres_connection import PoolBusy


def watch_locks(datastore: Any) -> None:
    """Make a wait for the file's lock past the lock timeout (``SQLITE_LOCK_TIMEOUT``,
    5 s by default) ``PoolBusy``, as a PostgreSQL write held up by a lock is (ADR-0107):
    typed, and waited out by workers. It escaped the API as the library's
    OperationalError, ended every worker on the machine with its Runs in hand, and was a
    500 of ``serve`` (found by acceptance testing, ADR-0135). The library's transactions
    take their connections from the instance's method, wrapped here."""
    original = datastore.get_connection

    @contextmanager
    def get_connection(*, commit: bool) -> Iterator[Any]:
        try:
            with original(commit=commit) as conn:
                yield conn
        except (OperationalError, sqlite3.OperationalError) as error:
            if "database is locked" not in str(error):
                raise
            raise PoolBusy(
                "the store's file stayed locked by another connection past its lock"
                " timeout (a backup, a maintenance tool, a long transaction?); nothing was"
                " written: try again"
            ) from error

    datastore.get_connection = get_connection
