"""Operator verbs over the registered read models: status and an atomic rebuild.

**Status** reports each view's position, the head of the event sequence and the
lag: the number of notifications after the position (counted, not subtracted,
so gaps in ids never inflate it).

**Rebuild** replays the whole log from position zero into a *shadow* copy of the
view: the same view class on a temporary SQLite file, or on PostgreSQL in a
temporary schema of the same database, so view code needs no table-name
parameters. Each is held while its rebuild runs, so the next rebuild removes the
ones that rebuilds cut short left (``shadow_schema``, ADR-0092; ``shadow_file``,
ADR-0100). Readers keep reading the untouched live tables meanwhile. The
shadow is then swapped in with one transaction on the live database (SQLite:
``ATTACH`` the shadow; both: ``DELETE`` the live rows, ``INSERT … SELECT`` the
shadow's, set the position). If the live view moved past the shadow while it
was being built, the shadow catches up again before the swap, so the swap
never moves a view backwards.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any

from eventsourcing.sqlite import SQLiteCursor, SQLiteDatastore

from workcenter.projections import shadow_file, shadow_schema, sql
from workcenter.projections.inline import PAGE, InlineProjections

Progress = Callable[[str, int, int], None]
"""Called after each page with (view name, events applied so far, events to apply)."""


@dataclass(frozen=True)
class ProjectionStatus:
    name: str
    position: int
    head: int
    lag: int

    def json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class RebuildReport:
    name: str
    events: int
    seconds: float
    position: int
    # Shadow schemas of rebuilds cut short (PostgreSQL) that this one dropped first.
    removed_schemas: tuple[str, ...] = ()
    # Their temporary directories on SQLite (ADR-0100).
    removed_directories: tuple[str, ...] = ()

    @property
    def events_per_second(self) -> float:
        return self.events / self.seconds if self.seconds > 0 else 0.0

    def json(self) -> dict[str, Any]:
        return asdict(self) | {"events_per_second": round(self.events_per_second, 1)}


def count_after(recorder: Any, position: int, head: int) -> int:
    """How many notifications lie in (position, head]."""
    if head <= position:
        return 0
    column = sql.position_column(recorder)
    with sql.transaction(recorder.datastore, commit=False) as c:
        c.execute(
            f"SELECT COUNT(*) FROM {recorder.events_table_name}"
            f" WHERE {column} > ? AND {column} <= ?",
            (position, head),
        )
        return int(c.fetchone()[0])


def status(projections: InlineProjections, recorder: Any) -> list[ProjectionStatus]:
    # The positions first: the head read after them is at or past each, where writers
    # between a head read first and a position made a view "at 750/746" (found by
    # acceptance testing).
    positions = {name: projections.position(name) for name in projections.views}
    head = recorder.max_notification_id() or 0
    return [
        ProjectionStatus(name, position, head, count_after(recorder, position, head))
        for name, position in positions.items()
    ]


def _columns(c: SQLiteCursor, table: str) -> str:
    c.execute(f"PRAGMA main.table_info({table})")
    return ", ".join(f'"{row[1]}"' for row in c.fetchall())


# Catches the shadow up to the log's head; returns its new position. Given a SQLite
# cursor, it reads the log on it: the swap's, which holds the write lock (a store in
# memory has no other connection to read on meanwhile).
CatchUp = Callable[..., int]


def _swap(live: Any, name: str, shadow_path: str, catch_up: CatchUp) -> int:
    """Replace the live rows and position with the shadow's, in one transaction, the
    shadow caught up first under the write lock (no writer moves the live view then);
    returns the position swapped in."""
    with live.datastore.get_connection(commit=True) as conn:
        conn.cursor().execute("ATTACH DATABASE ? AS shadow", (shadow_path,))
        try:
            with conn.transaction(commit=True) as c:
                # A no-op write takes the write lock before the last catch-up.
                c.execute(
                    "UPDATE main.tracking SET notification_id = notification_id"
                    " WHERE application_name = ?",
                    (name,),
                )
                # The log holds every event the live view applied: the shadow caught
                # up now is at or past it.
                shadow_position = catch_up(c)
                for table in type(live).TABLES:
                    columns = _columns(c, table)
                    c.execute(f"DELETE FROM main.{table}")
                    c.execute(
                        f"INSERT INTO main.{table} ({columns}) SELECT {columns} FROM shadow.{table}"
                    )
                c.execute("DELETE FROM main.tracking WHERE application_name = ?", (name,))
                if shadow_position:
                    c.execute("INSERT INTO main.tracking VALUES (?, ?)", (name, shadow_position))
        finally:
            conn.cursor().execute("DETACH DATABASE shadow")
    return shadow_position


def _swap_postgres(live: Any, name: str, shadow: Any, catch_up: CatchUp) -> int:
    """The swap on PostgreSQL, the shadow a schema of the same database: as ``_swap``,
    under the view's write lock."""
    source = shadow.datastore.schema
    with sql.transaction(live.datastore, commit=True) as c:
        sql.lock_view(c, live.datastore, name)
        shadow_position = catch_up()
        for table in type(live).TABLES:
            c.execute(
                "SELECT column_name FROM information_schema.columns"
                " WHERE table_schema = ? AND table_name = ? ORDER BY ordinal_position",
                (source, table),
            )
            columns = ", ".join(f'"{row[0]}"' for row in c.fetchall())
            c.execute(f"DELETE FROM {table}")
            c.execute(f'INSERT INTO {table} ({columns}) SELECT {columns} FROM "{source}".{table}')
        c.execute("DELETE FROM tracking WHERE application_name = ?", (name,))
        if shadow_position:
            c.execute("INSERT INTO tracking VALUES (?, ?)", (name, shadow_position))
    return shadow_position


# What the store does to a PostgreSQL datastore so that a lost connection is its typed
# error (the application passes it in: projections import no adapter).
Watch = Callable[[Any], None]


@contextmanager
def _shadow(live: Any, name: str, watch: Watch) -> Iterator[_Built]:
    """Where a rebuild builds its copy: a temporary SQLite file, or a temporary schema."""
    if sql.is_postgres(live.datastore):
        with shadow_schema.held(live.datastore, watch) as schema:
            view = live.shadow(schema.datastore)
            view.create_table()
            yield _Built(
                view,
                lambda catch_up: _swap_postgres(live, name, view, catch_up),
                schema.removed,
                (),
            )
        return
    with shadow_file.held(name) as held:
        datastore = SQLiteDatastore(held.path)
        try:
            view = live.shadow(datastore)
            view.create_table()
            yield _Built(
                view,
                lambda catch_up: _swap(live, name, held.path, catch_up),
                (),
                held.removed,
            )
        finally:
            datastore.close()


@dataclass(frozen=True)
class _Built:
    view: Any
    swap: Callable[[CatchUp], int]
    # Shadow schemas that rebuilds cut short had left, dropped before this one began.
    removed: tuple[str, ...]
    removed_directories: tuple[str, ...]


def rebuild(
    projections: InlineProjections,
    recorder: Any,
    mapper: Any,
    name: str,
    progress: Progress | None,
    watch: Watch,
) -> RebuildReport:
    """Replay the log from zero into a shadow of view ``name`` and swap it in atomically."""
    live: Any = projections.views[name]  # a TrackedView with TABLES
    with _shadow(live, name, watch) as shadow:
        total = count_after(recorder, 0, recorder.max_notification_id() or 0)
        applied = position = 0
        started = time.perf_counter()

        def catch_up(on: Any = None) -> int:
            nonlocal applied, position, total
            while page := (
                recorder.select_notifications(start=position, limit=PAGE, inclusive_of_start=False)
                if on is None
                else recorder._read_gap(on, position, sys.maxsize, PAGE)
            ):
                batch = [(n.id, mapper.to_domain_event(n)) for n in page]
                shadow.view.apply(name, batch)
                applied += len(batch)
                position = page[-1].id
                total = max(total, applied)
                if progress is not None:
                    progress(name, applied, total)
            return position

        catch_up()
        # Writers went on meanwhile: the swap catches the shadow up to them again, under
        # the view's write lock, which holds them off for those last events only. (It
        # tried five times to find the view not moved on, then failed with a traceback
        # while workers ran: found by acceptance testing.)
        position = shadow.swap(catch_up)
        seconds = time.perf_counter() - started
        return RebuildReport(
            name, applied, seconds, position, shadow.removed, shadow.removed_directories
        )
