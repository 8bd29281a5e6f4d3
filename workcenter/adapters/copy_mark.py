"""The mark a copy leaves on the store it writes until its last event is in (ADR-0140).

A ``copy`` or ``rekey`` stopped or failed partway left a store holding the beginning of
the history, which verified, showed no lag and took commands: a script that checked a
copy with ``audit verify`` before moving writers onto it moved them onto a store
missing the history's end (found by acceptance testing). So the copy marks the new
store before its first page and takes the mark away after its last; every open of a
store that holds the mark is refused, naming it, until the store is removed.
"""

from __future__ import annotations

import sqlite3
from typing import Any, Final

from eventsourcing.persistence import PersistenceError

from workcenter.adapters.persistence import StoreUnavailable
from workcenter.domain.errors import InvalidInput
from workcenter.projections import sql

TABLE: Final = "workcenter_copy_unfinished"


def mark(datastore: Any, events_table: str, source: str, head: int, where: str) -> None:
    """Mark the new store as a copy of ``source`` (as shown to users) up to ``head``, in
    one transaction with the check that it holds no events: of copies into one store
    begun at once, one marks it and the others are refused here, writing nothing (each
    had found it empty, and one marked it again once the first had finished, found by
    acceptance testing)."""
    try:
        with sql.transaction(datastore, commit=True) as c:
            c.execute(f"CREATE TABLE {TABLE} (source TEXT NOT NULL, head BIGINT NOT NULL)")
            c.execute(f"SELECT 1 FROM {events_table} LIMIT 1")
            if c.fetchone() is not None:
                raise _Taken
            c.execute(f"INSERT INTO {TABLE} VALUES (?, ?)", (source, head))
    except _Taken:
        raise _written_meanwhile(where) from None
    except (PersistenceError, sqlite3.Error):
        refuse_unfinished(datastore, where)  # another copy's mark: said as such
        # Or its mark came and went: that copy ended between this one's mark and the look
        # (found in CI: the library's "table already exists" escaped the loser).
        if _holds_events(datastore, events_table):
            raise _written_meanwhile(where) from None
        raise


def _marked(datastore: Any, c: Any) -> bool:
    if sql.is_postgres(datastore):  # the schema is the connection's search path
        c.execute("SELECT 1 WHERE to_regclass(?) IS NOT NULL", (TABLE,))
    else:
        c.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (TABLE,))
    return c.fetchone() is not None


def _written_meanwhile(where: str) -> InvalidInput:
    return InvalidInput(
        f"the new store at {where} was written by another copy meanwhile: name a new, empty store"
    )


def _holds_events(datastore: Any, events_table: str) -> bool:
    with sql.transaction(datastore, commit=False) as c:
        c.execute(f"SELECT 1 FROM {events_table} LIMIT 1")
        return c.fetchone() is not None


class _Taken(Exception):
    """Another copy wrote the store between its check and the mark."""


def unmark(datastore: Any) -> None:
    """The copy is whole: the store opens as any other."""
    with sql.transaction(datastore, commit=True) as c:
        c.execute(f"DROP TABLE {TABLE}")


def refuse_unfinished(datastore: Any, where: str) -> None:
    """``StoreUnavailable`` if ``where`` is a copy under way or cut short."""
    try:
        with sql.transaction(datastore, commit=False) as c:
            if not _marked(datastore, c):
                return
            c.execute(f"SELECT source, head FROM {TABLE}")
            row = c.fetchone()
    except (PersistenceError, sqlite3.Error):
        # The mark was there and went before it was read: its copy ended meanwhile
        # (found in CI: the database's "does not exist" escaped).
        with sql.transaction(datastore, commit=False) as c:
            if not _marked(datastore, c):
                return
        raise
    copied = f"of {row[0]} up to position {row[1]:,} " if row is not None else ""
    raise StoreUnavailable(
        f"{where} is a copy {copied}still under way or cut short: it holds only the"
        " beginning of the history until its copy ends; if no copy is running, remove it"
        " and copy again"
    )
