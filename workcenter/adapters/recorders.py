"""The event recorder that commits a command's snapshots and inline read models with
its events: one transaction, one commit per command (ADR-0016).

The library's ``Application.save(*events, **kwargs)`` hands ``kwargs`` down to the
application recorder's ``_insert_events(cursor, stored_events, **kwargs)``, which
runs inside the transaction that inserts the events and returns their
notification ids. This subclass does the rest of the command's writing there,
with the same cursor, before the library commits.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from eventsourcing.persistence import Notification, StoredEvent
from eventsourcing.sqlite import SQLiteAggregateRecorder, SQLiteApplicationRecorder, SQLiteCursor

from workcenter.projections.inline import InlineWrite

# The names of the keyword arguments a save passes down to the recorder.
SNAPSHOTS = "snapshots"
INLINE_WRITE = "inline_write"


@dataclass(frozen=True)
class SnapshotWrite:
    """Snapshots due after a command, for the snapshot table's recorder."""

    recorder: SQLiteAggregateRecorder
    stored: Sequence[StoredEvent]


class OneCommitSQLiteRecorder(SQLiteApplicationRecorder):
    """Inserts a command's events, then its snapshots and inline views, in one transaction."""

    def _insert_events(
        self, c: SQLiteCursor, stored_events: Sequence[StoredEvent], **kwargs: Any
    ) -> Sequence[int] | None:
        notification_ids = super()._insert_events(c, stored_events, **kwargs)
        snapshots: SnapshotWrite | None = kwargs.get(SNAPSHOTS)
        if snapshots is not None:
            snapshots.recorder._insert_events(c, snapshots.stored)
        inline: InlineWrite | None = kwargs.get(INLINE_WRITE)
        if inline is not None and notification_ids:
            inline.apply(c, notification_ids, self._read_gap)
        return notification_ids

    def _read_gap(
        self, c: SQLiteCursor, after: int, before: int, limit: int
    ) -> Sequence[Notification]:
        c.execute(
            f"SELECT rowid, * FROM {self.events_table_name}"
            " WHERE rowid > ? AND rowid < ? ORDER BY rowid LIMIT ?",
            (after, before, limit),
        )
        return [
            Notification(
                id=row["rowid"],
                originator_id=self.convert_originator_id(row["originator_id"]),
                originator_version=row["originator_version"],
                topic=row["topic"],
                state=row["state"],
            )
            for row in c.fetchall()
        ]

    def select_streams_after(
        self, after: Sequence[tuple[UUID, int]]
    ) -> list[Sequence[StoredEvent]]:
        """The events of each stream after its version, all read in one transaction: a
        command's aggregates brought up to date together, for one transaction's cost."""
        with self.datastore.transaction(commit=False) as c:
            found: list[Sequence[StoredEvent]] = []
            for stream_id, version in after:
                c.execute(
                    f"SELECT originator_version, topic, state FROM {self.events_table_name}"
                    " WHERE originator_id = ? AND originator_version > ?"
                    " ORDER BY originator_version",
                    (stream_id.hex, version),
                )
                found.append(
                    [
                        StoredEvent(
                            originator_id=stream_id,
                            originator_version=row["originator_version"],
                            topic=row["topic"],
                            state=row["state"],
                        )
                        for row in c.fetchall()
                    ]
                )
            return found
