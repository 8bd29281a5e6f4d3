"""The PostgreSQL twin of ``recorders.OneCommitSQLiteRecorder``: a command's events,
snapshots and inline read models in one transaction, one commit (ADR-0016, ADR-0032).

The library's ``PostgresApplicationRecorder.insert_events`` runs its post-insert
hook (``_fetch_ids_after_insert_events``) inside a ``try`` that holds an
exception until the transaction block has ended, so a view failing there
would commit the events anyway. This recorder owns ``insert_events`` instead:
it opens the transaction, lets the library lock the table, notify the
channel and insert the events exactly as it does, and then, with the same
connection and before the one commit, does the rest of the command's writing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from uuid import UUID

from eventsourcing.persistence import InterfaceError, Notification, OperationalError, StoredEvent
from eventsourcing.postgres import PostgresApplicationRecorder
from eventsourcing.utils import retry

from workcenter.adapters.recorders import INLINE_WRITE, SNAPSHOTS, SnapshotWrite
from workcenter.projections.inline import InlineWrite
from workcenter.projections.sql import PortableCursor


class OneCommitPostgresRecorder(PostgresApplicationRecorder):
    """Inserts a command's events, then its snapshots and inline views, in one transaction."""

    # A lost connection rolls the whole transaction back, so trying again is safe.
    @retry((InterfaceError, OperationalError), max_attempts=10, wait=0.2)
    def insert_events(
        self, stored_events: Sequence[StoredEvent], **kwargs: Any
    ) -> Sequence[int] | None:
        if not stored_events:
            return []
        with (
            self.datastore.get_connection() as conn,
            conn.transaction(),
            conn.cursor() as curs,
        ):
            self._insert_events(curs, stored_events, **kwargs)
            self._insert_stored_events(curs, stored_events, **kwargs)  # lock, notify, insert
            notification_ids = self._fetch_ids_after_insert_events(curs, stored_events, **kwargs)
            assert notification_ids is not None
            self._insert_along(PortableCursor(curs), notification_ids, **kwargs)
            return notification_ids

    def _insert_along(
        self, c: PortableCursor, notification_ids: Sequence[int], **kwargs: Any
    ) -> None:
        """What the SQLite twin does after ``super()._insert_events``: the snapshots due,
        then the inline read models, with the transaction's cursor."""
        snapshots: SnapshotWrite | None = kwargs.get(SNAPSHOTS)
        if snapshots is not None:
            snapshots.recorder._insert_stored_events(c.raw, snapshots.stored)  # type: ignore[attr-defined]
        inline: InlineWrite | None = kwargs.get(INLINE_WRITE)
        if inline is not None and notification_ids:
            inline.apply(c, notification_ids, self._read_gap)

    def _read_gap(
        self, c: PortableCursor, after: int, before: int, limit: int
    ) -> Sequence[Notification]:
        c.execute(
            "SELECT notification_id, originator_id, originator_version, topic, state"
            f' FROM "{self.datastore.schema}".{self.events_table_name}'
            " WHERE notification_id > ? AND notification_id < ?"
            " ORDER BY notification_id LIMIT ?",
            (after, before, limit),
        )
        return [
            Notification(
                id=row[0],
                originator_id=UUID(row[1]),
                originator_version=row[2],
                topic=row[3],
                state=bytes(row[4]),
            )
            for row in c.fetchall()
        ]
