"""The base of every read model: rows and position in one transaction, idempotently.

A view declares its ``TABLES`` (plus their create statements) and how one event
changes its rows (``_apply``, or ``_apply_batch`` for a whole page). ``apply``
takes the write lock first, reads the view's position inside that transaction
and skips every event at or below it, so a batch delivered twice, or a batch
another thread or process applied first, changes nothing. The same view classes
serve the inline lifecycle, the runner and a rebuild into shadow tables.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar

from eventsourcing.persistence import Tracking
from eventsourcing.sqlite import SQLiteCursor, SQLiteTrackingRecorder

from workcenter.domain.model import DomainEvent

Batch = Sequence[tuple[int, DomainEvent]]


class TrackedView(SQLiteTrackingRecorder):
    """A SQLite read model whose position is keyed by its projection name."""

    TABLES: ClassVar[tuple[str, ...]] = ()

    def apply(self, application_name: str, batch: Batch) -> int:
        """Apply the events after the view's position; returns how many were applied."""
        if not batch:
            return 0
        with self.datastore.transaction(commit=True) as c:
            return self.apply_within(
                c, application_name, batch, self.locked_position(c, application_name)
            )

    def shadow(self, datastore: Any) -> TrackedView:
        """The same view on another datastore (a rebuild's shadow file)."""
        return type(self)(datastore)

    def position_within(self, c: SQLiteCursor, application_name: str) -> int:
        """The position, read in the caller's transaction (which must hold the write lock)."""
        return self._max_tracking_id(application_name, c) or 0

    def apply_within(
        self, c: SQLiteCursor, application_name: str, batch: Batch, position: int
    ) -> int:
        """Apply the events after ``position`` and move the position, in the caller's
        transaction, which holds the write lock and read ``position`` under it."""
        fresh = [entry for entry in batch if entry[0] > position]
        if not fresh:
            return 0
        self._apply_batch(c, fresh)
        self._insert_tracking(c, Tracking(application_name, fresh[-1][0]))
        return len(fresh)

    def locked_position(self, c: SQLiteCursor, application_name: str) -> int:
        """The position, read after taking the write lock (a no-op write does that), so no
        other writer can move it before this transaction commits."""
        c.execute(
            "UPDATE tracking SET notification_id = notification_id WHERE application_name = ?",
            (application_name,),
        )
        return self._max_tracking_id(application_name, c) or 0

    def _apply_batch(self, c: SQLiteCursor, batch: Batch) -> None:
        for _, event in batch:
            self._apply(c, event)

    def _apply(self, c: SQLiteCursor, event: DomainEvent) -> None:  # pragma: no cover
        raise NotImplementedError

    def reset(self, application_name: str) -> None:
        """Drop every row and the position together, for a rebuild in place from zero."""
        with self.datastore.transaction(commit=True) as c:
            for table in self.TABLES:
                c.execute(f"DELETE FROM {table}")
            c.execute("DELETE FROM tracking WHERE application_name = ?", (application_name,))

    def _rows(self, sql: str, params: Iterable[Any] = ()) -> list[Any]:
        with self.datastore.transaction(commit=False) as c:
            c.execute(sql, tuple(params))
            return list(c.fetchall())

    def dump(self) -> dict[str, list[tuple[Any, ...]]]:
        """Every row of every table in a total order, to compare a rebuild with the live view."""
        return {
            t: [tuple(r) for r in self._rows(f"SELECT * FROM {t} ORDER BY 1")] for t in self.TABLES
        }


def apply_together(views: Mapping[str, TrackedView], batch: Batch) -> int:
    """Apply a batch to several views of one datastore in ONE transaction.

    Each view still reads its own position under the write lock and skips what
    it has; the views share one commit instead of paying one each.
    """
    if not views or not batch:
        return 0
    datastore = next(iter(views.values())).datastore
    applied = 0
    with datastore.transaction(commit=True) as c:
        for name, view in views.items():
            applied += view.apply_within(c, name, batch, view.locked_position(c, name))
    return applied
