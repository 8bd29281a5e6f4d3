"""Operator verbs over the registered read models: status and an atomic rebuild.

**Status** reports each view's position, the head of the event sequence and the
lag: the number of notifications after the position (counted, not subtracted,
so gaps in ids never inflate it).

**Rebuild** replays the whole log from position zero into a *shadow* copy of the
view: the same view class on a temporary SQLite file, or on PostgreSQL in a
temporary schema of the same database, so view code needs no table-name
parameters. Readers keep reading the untouched live tables meanwhile. The
shadow is then swapped in with one transaction on the live database (SQLite:
``ATTACH`` the shadow; both: ``DELETE`` the live rows, ``INSERT … SELECT`` the
shadow's, set the position). If the live view moved past the shadow while it
was being built, the shadow catches up again before the swap, so the swap
never moves a view backwards.
"""

from __future__ import annotations

import shutil
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from eventsourcing.sqlite import SQLiteCursor, SQLiteDatastore

from workcenter.projections import sql
from workcenter.projections.inline import PAGE, InlineProjections

Progress = Callable[[str, int, int], None]
"""Called after each page with (view name, events applied so far, events to apply)."""
SWAP_ATTEMPTS = 5


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

    @property
    def events_per_second(self) -> float:
        return self.events / self.seconds if self.seconds > 0 else 0.0

    def json(self) -> dict[str, Any]:
        return asdict(self) | {"events_per_second": round(self.events_per_second, 1)}


class _LiveMovedOn(Exception):
    """The live view passed the shadow during the build: catch the shadow up again."""


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
    head = recorder.max_notification_id() or 0
    report = []
    for name in projections.views:
        position = projections.position(name)
        report.append(ProjectionStatus(name, position, head, count_after(recorder, position, head)))
    return report


def _columns(c: SQLiteCursor, table: str) -> str:
    c.execute(f"PRAGMA main.table_info({table})")
    return ", ".join(f'"{row[1]}"' for row in c.fetchall())


def _swap(live: Any, name: str, shadow_path: str, shadow_position: int) -> None:
    """Replace the live rows and position with the shadow's, in one transaction."""
    with live.datastore.get_connection(commit=True) as conn:
        conn.cursor().execute("ATTACH DATABASE ? AS shadow", (shadow_path,))
        try:
            with conn.transaction(commit=True) as c:
                # A no-op write takes the write lock before the position is read.
                c.execute(
                    "UPDATE main.tracking SET notification_id = notification_id"
                    " WHERE application_name = ?",
                    (name,),
                )
                c.execute(
                    "SELECT MAX(notification_id) FROM main.tracking WHERE application_name = ?",
                    (name,),
                )
                if (c.fetchone()[0] or 0) > shadow_position:
                    raise _LiveMovedOn
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


def _swap_postgres(live: Any, name: str, shadow: Any, shadow_position: int) -> None:
    """The swap on PostgreSQL: the shadow is a schema of the same database."""
    source = shadow.datastore.schema
    with sql.transaction(live.datastore, commit=True) as c:
        if live.locked_position(c, name) > shadow_position:
            raise _LiveMovedOn
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


# What the store does to a PostgreSQL datastore so that a lost connection is its typed
# error (the application passes it in: projections import no adapter).
Watch = Callable[[Any], None]


class _Shadow:
    """Where a rebuild builds its copy: a temporary SQLite file, or a temporary schema."""

    def __init__(self, live: Any, name: str, watch: Watch) -> None:
        self.live = live
        self.directory: str | None = None
        if sql.is_postgres(live.datastore):
            self.datastore: Any = _shadow_schema(live.datastore, name)
            watch(self.datastore)
        else:
            self.directory = tempfile.mkdtemp(prefix="workcenter-rebuild-")
            self.path = str(Path(self.directory) / f"{name}.sqlite")
            self.datastore = SQLiteDatastore(self.path)
        self.view = live.shadow(self.datastore)
        self.view.create_table()

    def swap(self, name: str, position: int) -> None:
        if self.directory is None:
            _swap_postgres(self.live, name, self.view, position)
        else:
            _swap(self.live, name, self.path, position)

    def close(self) -> None:
        if self.directory is None:
            schema = self.datastore.schema
            try:
                with sql.transaction(self.datastore, commit=True) as c:
                    c.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
            except Exception as error:
                if not sql.connection_lost(error):
                    raise
                self.datastore.close()
                # The same error (the store's typed one: ``watch``), saying what the
                # operator must remove by hand once the database is back.
                left = (
                    f"the rebuild's schema {schema} is left in the database: remove it with"
                    f' DROP SCHEMA "{schema}" CASCADE once the database is back'
                )
                raise type(error)(f"{str(error).rstrip('.')}; {left}") from error
        self.datastore.close()
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)


def _shadow_schema(live: Any, name: str) -> Any:
    """A datastore on the live one's database, in a new schema of its own."""
    from eventsourcing.postgres import PostgresDatastore  # an optional extra

    # The live schema's name cut to 31 characters, so that the shadow's is one a store may
    # have (sql.SCHEMA_NAME: at most 48); the random part keeps it apart from others.
    schema = f"{live.schema[:31]}_rebuild_{uuid.uuid4().hex[:8]}"
    params = sql.connection_params(live)
    datastore = PostgresDatastore(
        dbname=params["dbname"],
        host=params["host"],
        port=params["port"],
        user=params["user"],
        password=params["password"],
        schema=schema,
    )
    sql.pin_search_path(datastore)
    with sql.transaction(datastore, commit=True) as c:
        c.execute(f'CREATE SCHEMA "{schema}"')
    return datastore


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
    shadow = _Shadow(live, name, watch)
    try:
        total = count_after(recorder, 0, recorder.max_notification_id() or 0)
        applied = position = 0
        started = time.perf_counter()
        for _ in range(SWAP_ATTEMPTS):
            while page := recorder.select_notifications(
                start=position, limit=PAGE, inclusive_of_start=False
            ):
                batch = [(n.id, mapper.to_domain_event(n)) for n in page]
                shadow.view.apply(name, batch)
                applied += len(batch)
                position = page[-1].id
                total = max(total, applied)
                if progress is not None:
                    progress(name, applied, total)
            try:
                shadow.swap(name, position)
            except _LiveMovedOn:
                continue
            break
        else:  # pragma: no cover - writers outran five catch-ups in a row
            raise RuntimeError(f"could not swap in the rebuilt {name} view: writers kept ahead")
        return RebuildReport(name, applied, time.perf_counter() - started, position)
    finally:
        shadow.close()
