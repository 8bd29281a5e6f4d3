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

from workcenter.adapters.postgres_chain import PostgresChainTable
from workcenter.adapters.recorders import INLINE_WRITE, SNAPSHOTS, SnapshotWrite
from workcenter.projections import sql
from workcenter.projections.inline import InlineWrite
from workcenter.projections.sql import PortableCursor
from workcenter.service_layer.history import hash_chain


class OneCommitPostgresRecorder(PostgresApplicationRecorder):
    """Inserts a command's events, their links in the hash chain, then its snapshots and
    inline views, in one transaction."""

    # Set by the factory from the store's settings (ADR-0028), as on SQLite.
    chained = True

    def __init__(self, datastore: Any, **kwargs: Any) -> None:
        super().__init__(datastore, **kwargs)
        self.chain = PostgresChainTable(datastore, self.events_table_name, self._lock_table)

    def create_table(self) -> None:
        super().create_table()
        self.chain.create()

    def chain_unchained(self) -> int:
        """The migration run when a store is opened (see the SQLite twin)."""
        with sql.transaction(self.datastore, commit=False) as c:
            head = self.chain.head(c)
            c.execute(f"SELECT MAX(notification_id) FROM {self.events_table_name}")
            last = c.fetchone()[0] or 0
        if last <= (head.position if head else 0):
            return 0
        return hash_chain.chain_unchained(self.chain, self.chain.write_transaction)

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
            if self.chained and notification_ids:
                # After the library's table lock: no other writer can chain in between.
                hash_chain.append_links(
                    self.chain, PortableCursor(curs), notification_ids, stored_events
                )
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
