"""The mark a copy leaves on the store it writes until its last event is in (ADR-0140).

A ``copy`` or ``rekey`` stopped or failed partway left a store holding the beginning of
the history, which verified, showed no lag and took commands: a script that checked a
copy with ``audit verify`` before moving writers onto it moved them onto a store
missing the history's end (found by acceptance testing). So the copy marks the new
store before its first page and takes the mark away after its last; every open of a
store that holds the mark is refused, naming it, until the store is removed.
"""

from __future__ import annotations

from typing import Any, Final

from workcenter.adapters.persistence import StoreUnavailable
from workcenter.projections import sql

TABLE: Final = "workcenter_copy_unfinished"


def mark(datastore: Any, source: str, head: int) -> None:
    """Mark the new store as a copy of ``source`` (as shown to users) up to ``head``."""
    with sql.transaction(datastore, commit=True) as c:
        c.execute(f"CREATE TABLE {TABLE} (source TEXT NOT NULL, head BIGINT NOT NULL)")
        c.execute(f"INSERT INTO {TABLE} VALUES (?, ?)", (source, head))


def unmark(datastore: Any) -> None:
    """The copy is whole: the store opens as any other."""
    with sql.transaction(datastore, commit=True) as c:
        c.execute(f"DROP TABLE {TABLE}")


def refuse_unfinished(datastore: Any, where: str) -> None:
    """``StoreUnavailable`` if ``where`` is a copy cut short."""
    with sql.transaction(datastore, commit=False) as c:
        if sql.is_postgres(datastore):  # the schema is the connection's search path
            c.execute("SELECT 1 WHERE to_regclass(?) IS NOT NULL", (TABLE,))
        else:
            c.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (TABLE,))
        if c.fetchone() is None:
            return
        c.execute(f"SELECT source, head FROM {TABLE}")
        row = c.fetchone()
    copied = f"of {row[0]} up to position {row[1]:,} " if row is not None else ""
    raise StoreUnavailable(
        f"{where} is a copy {copied}that was cut short: it holds only the beginning of the"
        " history; remove it and copy again"
    )
