"""The base of every read model: rows and position in one transaction, idempotently.

A view declares its ``TABLES`` (plus their create statements) and how one event
changes its rows (``_apply``, or ``_apply_batch`` for a whole page). ``apply``
takes the view's write lock first, reads the view's position inside that
transaction and skips every event at or below it, so a batch delivered twice,
or a batch another thread or process applied first, changes nothing. The same
view classes serve the inline lifecycle, the runner and a rebuild into shadow
tables, on SQLite and on PostgreSQL alike.

The position is the library's own tracking row, written by the library's
tracking recorder of the view's database (``SQLiteTrackingRecorder`` or
``PostgresTrackingRecorder``, both on a table named ``tracking``), which the
view holds and to which it hands its cursor (ADR-0032).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar

from eventsourcing.persistence import IntegrityError, Tracking, TrackingRecorder
from eventsourcing.sqlite import SQLiteCursor, SQLiteTrackingRecorder

from workcenter.domain.model import DomainEvent
from workcenter.projections import sql

Batch = Sequence[tuple[int, DomainEvent]]
TRACKING_TABLE = "tracking"


class _SQLiteTables(SQLiteTrackingRecorder):
    """The library's SQLite tracking recorder, creating a view's tables with its own."""

    def __init__(self, datastore: Any, statements: Sequence[str]) -> None:
        self.statements = list(statements)  # the library's __init__ reads them
        super().__init__(datastore)

    def construct_create_table_statements(self) -> list[str]:
        return [*super().construct_create_table_statements(), *self.statements]


def _tracking_recorder(datastore: Any, statements: Sequence[str]) -> Any:
    if not sql.is_postgres(datastore):
        return _SQLiteTables(datastore, statements)
    # Imported here: PostgreSQL support is an optional extra (psycopg).
    from eventsourcing.postgres import PostgresTrackingRecorder
    from psycopg.sql import SQL, Composed

    recorder = PostgresTrackingRecorder(datastore, tracking_table_name=TRACKING_TABLE)
    recorder.sql_create_statements.extend(
        Composed([SQL(sql.ddl(s, datastore))]) for s in statements
    )
    return recorder


class TrackedView(TrackingRecorder):
    """A read model whose position is keyed by its projection name."""

    TABLES: ClassVar[tuple[str, ...]] = ()
    # False for a view whose rows are a function of the events alone, never of their
    # notification ids: a PostgreSQL write can then send them before the ids are known,
    # in its one exchange (ADR-0070).
    ROWS_NEED_POSITIONS: ClassVar[bool] = True

    def __init__(self, datastore: Any) -> None:
        self.datastore = datastore
        self.tracking = _tracking_recorder(datastore, self.table_statements())

    def table_statements(self) -> list[str]:
        """The view's CREATE statements, in SQLite's types (``sql.ddl`` maps them)."""
        return []

    def create_table(self) -> None:
        self.tracking.create_table()

    # --- the position (the library's tracking recorder) -----------------------

    def insert_tracking(self, tracking: Tracking) -> None:
        self.tracking.insert_tracking(tracking)

    def max_tracking_id(self, application_name: str) -> int | None:
        return self.tracking.max_tracking_id(application_name)

    def _insert_tracking(self, c: Any, tracking: Tracking) -> None:
        self.tracking._insert_tracking(c, tracking)

    # --- writing --------------------------------------------------------------

    def apply(self, application_name: str, batch: Batch) -> int:
        """Apply the events after the view's position; returns how many were applied."""
        if not batch:
            return 0
        with sql.transaction(self.datastore, commit=True) as c:
            return self.apply_within(
                c, application_name, batch, self.locked_position(c, application_name)
            )

    def shadow(self, datastore: Any) -> TrackedView:
        """The same view on another datastore (a rebuild's shadow)."""
        return type(self)(datastore)

    def position_within(self, c: Any, application_name: str) -> int:
        """The position, read in the caller's transaction (a command's, holding the event
        store's write lock) after taking the view's lock."""
        if sql.is_postgres(self.datastore):
            # The event table's lock keeps other commands out, not a runner: wait for it.
            return self.locked_position(c, application_name)
        return self.tracking._max_tracking_id(application_name, c) or 0

    def apply_within(self, c: Any, application_name: str, batch: Batch, position: int) -> int:
        """Apply the events after ``position`` and move the position, in the caller's
        transaction, which holds the view's lock and read ``position`` under it."""
        fresh = self.rows_within(c, batch, position)
        if fresh:
            self._insert_tracking(c, Tracking(application_name, fresh[-1][0]))
        return len(fresh)

    def rows_within(self, c: Any, batch: Batch, position: int) -> Batch:
        """Apply the events after ``position`` to the rows only, in the caller's transaction
        (as ``apply_within``); returns them. The caller writes the new position before it
        commits (``write_positions``), so several views move theirs in one statement."""
        fresh = [entry for entry in batch if entry[0] > position]
        if fresh:
            self._apply_batch(c, fresh)
        return fresh

    def rows_of(self, c: Any, events: Sequence[DomainEvent]) -> None:
        """The rows of ``events`` for a view that does not need their positions
        (``ROWS_NEED_POSITIONS`` false), written in the caller's transaction, which has
        checked that the view is not behind them (ADR-0070)."""
        assert not self.ROWS_NEED_POSITIONS
        self._apply_batch(c, [(0, event) for event in events])

    def locked_position(self, c: Any, application_name: str) -> int:
        """The position, read after taking the view's write lock, so no other writer can
        move it before this transaction commits."""
        sql.lock_view(c, self.datastore, application_name)
        return self.tracking._max_tracking_id(application_name, c) or 0

    def _apply_batch(self, c: Any, batch: Batch) -> None:
        for _, event in batch:
            self._apply(c, event)

    def _apply(self, c: Any, event: DomainEvent) -> None:  # pragma: no cover
        raise NotImplementedError

    def reset(self, application_name: str) -> None:
        """Drop every row and the position together, for a rebuild in place from zero."""
        with sql.transaction(self.datastore, commit=True) as c:
            for table in self.TABLES:
                c.execute(f"DELETE FROM {table}")
            c.execute(
                f"DELETE FROM {TRACKING_TABLE} WHERE application_name = ?", (application_name,)
            )

    def _rows(self, statement: str, params: Iterable[Any] = ()) -> list[Any]:
        with sql.transaction(self.datastore, commit=False) as c:
            c.execute(statement, tuple(params))
            return list(c.fetchall())

    def dump(self) -> dict[str, list[tuple[Any, ...]]]:
        """Every row of every table in a total order, to compare a rebuild with the live view."""
        return {
            t: [tuple(r) for r in self._rows(f"SELECT * FROM {t} ORDER BY 1")] for t in self.TABLES
        }


def apply_together(views: Mapping[str, TrackedView], batch: Batch) -> int:
    """Apply a batch to several views of one datastore in ONE transaction.

    Each view still reads its own position under its write lock and skips what
    it has; the views share one commit instead of paying one each.
    """
    if not views or not batch:
        return 0
    datastore = next(iter(views.values())).datastore
    applied = 0
    with sql.transaction(datastore, commit=True) as c:
        for name, view in views.items():
            applied += view.apply_within(c, name, batch, view.locked_position(c, name))
    return applied


# --- several views' positions, one statement each way -----------------------------


def sharing_positions(views: Mapping[str, object]) -> Mapping[str, TrackedView] | None:
    """``views`` if they are TrackedViews of one datastore whose tracking table holds one
    row per view (the library's default), so one statement can read or write all of
    their positions; else None."""
    first = next(iter(views.values()), None)
    if not isinstance(first, TrackedView) or not first.datastore.single_row_tracking:
        return None
    if not all(
        isinstance(v, TrackedView) and v.datastore is first.datastore for v in views.values()
    ):
        return None
    return views  # type: ignore[return-value]


def positions_within(c: Any, datastore: Any, names: Sequence[str]) -> dict[str, int]:
    """The positions of the views ``names``, read in one statement in the caller's
    transaction, which holds the event store's write lock (a command's save).

    On SQLite that lock keeps every other writer out. On PostgreSQL it keeps out other
    commands but not a runner, so each view's own lock is taken first, in the order
    given (``position_within``)."""
    send_positions(c, datastore, names)
    return take_positions(c, names)


def send_positions(c: Any, datastore: Any, names: Sequence[str]) -> None:
    """The statements of ``positions_within``, sent (a pipeline sends them with the
    statements before them, ADR-0051); ``take_positions`` reads their answer."""
    if sql.is_postgres(datastore):
        sql.lock_views(c, datastore, names)
    marks = ", ".join("?" * len(names))
    c.execute(
        f"SELECT application_name, notification_id FROM {TRACKING_TABLE}"
        f" WHERE application_name IN ({marks})",
        tuple(names),
    )


def take_positions(c: Any, names: Sequence[str]) -> dict[str, int]:
    found = {row[0]: row[1] for row in c.fetchall()}
    return {name: found.get(name) or 0 for name in names}


def write_positions(c: Any, positions: Mapping[str, int], *, counted: bool = True) -> None:
    """Move several views' positions forward in one statement: the library's single-row
    upsert (``SQLiteTrackingRecorder``, ``PostgresTrackingRecorder``) for several rows.

    A position is never moved back or to where it is: like the library's, a write that
    would not move every position forward raises IntegrityError (another writer applied
    those events), and the caller's transaction rolls back. The rows moved are counted
    rather than returned: on SQLite a ``RETURNING`` clause made this statement cost
    several times the CPU (ADR-0042)."""
    if not positions:
        return
    rows = ", ".join(["(?, ?)"] * len(positions))
    c.execute(
        f"INSERT INTO {TRACKING_TABLE} VALUES {rows} ON CONFLICT (application_name)"
        " DO UPDATE SET notification_id = excluded.notification_id"
        f" WHERE {TRACKING_TABLE}.notification_id < excluded.notification_id",
        tuple(value for entry in positions.items() for value in entry),
    )
    if counted and _rows_changed(c) < len(positions):
        raise IntegrityError(
            f"Failed to record tracking for {sorted(positions)}: a position would not move forward"
        )


def _rows_changed(c: Any) -> int:
    """Rows the last statement inserted or updated, not those its WHERE kept (SQLite's
    ``changes()``, PostgreSQL's command tag). The library's SQLite cursor does not pass
    ``rowcount`` on; ``sql.PortableCursor`` does."""
    if isinstance(c, SQLiteCursor):
        return int(c.sqlite_cursor.rowcount)
    return int(c.rowcount)
