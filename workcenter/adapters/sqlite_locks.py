"""A SQLite file's lock held past the lock timeout, as the error a PostgreSQL write held
up by a lock is (ADR-0135), and no transaction left open on a connection given back
(ADR-0137). Applied by the composition root to a SQLite store's
datastore, beside ``persistence.refuse_when_closed``."""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from eventsourcing.persistence import ConnectionUnavailableError, DatabaseError, OperationalError

from workcenter.adapters.persistence import FILE_FAULTS, StoreUnavailable, sqlite_result
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
                try:
                    yield conn
                finally:
                    _ended(conn)
        except ConnectionUnavailableError as error:
            # The thread that holds the writer (or every reader) waits on the file's lock;
            # the others waited for it past the pool's timeout: the same hold-up, said
            # the same way (found by acceptance testing: the library's error escaped the
            # API from every thread but one, ADR-0136).
            raise PoolBusy(
                "no connection to the store's file came free in time: another connection"
                " kept the file locked (a backup, a maintenance tool, a long transaction?)"
                " or more commands ran at once than the pool serves; nothing was written:"
                " try again"
            ) from error
        except (OperationalError, sqlite3.OperationalError) as error:
            if "database is locked" in str(error):
                raise PoolBusy(
                    "the store's file stayed locked by another connection past its lock"
                    " timeout (a backup, a maintenance tool, a long transaction?); nothing"
                    " was written: try again"
                ) from error
            if sqlite_result(error) in FILE_FAULTS:
                raise _file_failed(error) from error
            raise  # the library's own (it takes "no such table" for a table to make)
        except (DatabaseError, sqlite3.DatabaseError) as error:
            if sqlite_result(error) in FILE_FAULTS:
                raise _file_failed(error) from error
            raise

    datastore.get_connection = get_connection


class StoreFull(PoolBusy):
    """The store's disk is full (SQLite's SQLITE_FULL): the command was rolled back,
    nothing written. It passes once space is freed, so it is waited out as a store held
    up is: a worker waits (a Run's outcome in hand is recorded once it fits, while its
    lease lasts), the CLI exits 75, the HTTP API answers 503 (found by acceptance
    testing: a worker exited with status 2, as for a store that cannot be used at all,
    ADR-0142)."""


SQLITE_FULL = 13


@contextmanager
def full_disk_said(db_path: str) -> Iterator[None]:
    """An open refused while the file system that holds ``db_path`` has no block left is
    ``StoreFull``: the store's side files could not be made (SQLite says "disk I/O
    error"), and that passes once space is freed (found by acceptance testing: said as a
    store that cannot be used, ADR-0142)."""
    try:
        yield
    except StoreUnavailable as refused:
        if isinstance(refused, StoreFull) or not _no_space_left(Path(db_path)):
            raise
        raise StoreFull(f"{refused}: its disk is full; free space and try again") from None


def _no_space_left(path: Path) -> bool:
    """Whether the file system of ``path`` has blocks and none free. One of no blocks at
    all (``/proc``'s) is not full: a store there was said to wait for space (found by
    acceptance testing, ADR-0145)."""
    try:
        found = os.statvfs(path.resolve().parent)
    except (OSError, ValueError, RuntimeError):
        # A path the file system cannot take, or a loop of symbolic links (its own
        # refusal, said as such; the loop was a traceback, ADR-0145).
        return False
    return found.f_blocks > 0 and found.f_bavail == 0


def _file_failed(error: Exception) -> StoreUnavailable:
    """The file could not be written or read (its disk full, a file-size limit, a
    read-only journal, a damaged page): typed, as the CLI said it, where the library's
    error escaped the Python API (found by acceptance testing, ADR-0138). The
    transaction was rolled back: nothing of the command was written."""
    if sqlite_result(error) == SQLITE_FULL:
        return StoreFull(
            f"the store's disk is full ({error}): nothing was written; free space and try again"
        )
    return StoreUnavailable(
        f"the store's file could not be written or read ({error}): nothing was written;"
        " free space or mend the file's permissions and try again (a damaged file: restore"
        " it from a backup)"
    )


def _ended(conn: Any) -> None:
    """Roll back a transaction left open on ``conn`` before it goes back to the pool: an
    interrupt (Ctrl-C) landing between a ``BEGIN`` and the ``with`` that ends it left it
    open, and every later command on the connection failed "cannot start a transaction
    within a transaction", the library's untyped error (found by an embedder, ADR-0137)."""
    # The library's connection wraps sqlite3's (eventsourcing is pinned: a rename of its
    # private attribute fails here, loudly, rather than turning this off).
    raw = conn._sqlite_conn
    if raw.in_transaction:
        # One that cannot roll back fails its next use, typed as ever.
        with contextlib.suppress(sqlite3.Error):
            raw.rollback()
