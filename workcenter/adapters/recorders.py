"""The event recorder that commits a command's snapshots and inline read models with
its events: one transaction, one commit per command (ADR-0016).

The library's ``Application.save(*events, **kwargs)`` hands ``kwargs`` down to the
application recorder's ``_insert_events(cursor, stored_events, **kwargs)``, which
runs inside the transaction that inserts the events and returns their
notification ids. This subclass does the rest of the command's writing there,
with the same cursor, before the library commits: the events' links in the hash
chain (ADR-0028), then the snapshots and the inline read models.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from eventsourcing.persistence import Notification, StoredEvent
from eventsourcing.sqlite import (
    SQLiteAggregateRecorder,
    SQLiteApplicationRecorder,
    SQLiteCursor,
    SQLiteDatastore,
)

from workcenter.projections.inline import InlineWrite
from workcenter.service_layer.history import hash_chain
from workcenter.service_layer.history.hash_chain import (
    BATCH,
    Link,
    Row,
    Stream,
)
from workcenter.service_layer.history.late_links import LATE_TABLE, LateLinks, late_links

# The names of the keyword arguments a save passes down to the recorder.
SNAPSHOTS = "snapshots"
INLINE_WRITE = "inline_write"


@dataclass(frozen=True)
class SnapshotWrite:
    """Snapshots due after a command, for the snapshot table's recorder."""

    recorder: SQLiteAggregateRecorder
    stored: Sequence[StoredEvent]


class OneCommitSQLiteRecorder(SQLiteApplicationRecorder):
    """Inserts a command's events, their links in the hash chain, then its snapshots and
    inline views, in one transaction."""

    # Set by the factory from the store's settings before the store is used; off only to
    # measure what the chain costs (benchmarks/bench_hash_chain.py).
    chained = True
    # The store's snapshot table, set by the composition root: a stream loaded from
    # nothing (``select_streams_after`` from version 0) starts at its newest snapshot.
    snapshots_table_name: str | None = None

    def __init__(self, datastore: SQLiteDatastore, events_table_name: str = "stored_events"):
        super().__init__(datastore, events_table_name)
        self.chain = SQLiteChainTable(datastore, events_table_name)
        self.create_table_statements.extend(self.chain.create_statements)

    def chain_unchained(self) -> None:
        """The migration run when a store is opened: chain the events that have no link
        yet (all of them in a store written before the chain)."""
        with self.datastore.transaction(commit=False) as c:
            head = self.chain.head(c)
            c.execute(f"SELECT MAX(rowid) FROM {self.events_table_name}")
            last = c.fetchone()[0] or 0
        if last <= (head.position if head else 0):
            return  # the usual open: nothing to do, and no write lock taken
        hash_chain.chain_unchained(self.chain, self._write_transaction)

    @contextmanager
    def _write_transaction(self) -> Iterator[SQLiteCursor]:
        # BEGIN IMMEDIATE: the write lock first, so the head read after it stays the head.
        with self.datastore.get_connection(commit=True) as connection:
            c = connection.cursor()
            c.execute("BEGIN IMMEDIATE")
            try:
                yield c
            except BaseException:
                connection.rollback()
                raise
            connection.commit()

    def _insert_events(
        self, c: SQLiteCursor, stored_events: Sequence[StoredEvent], **kwargs: Any
    ) -> Sequence[int] | None:
        notification_ids = super()._insert_events(c, stored_events, **kwargs)
        if self.chained and notification_ids:
            # The insert above took SQLite's write lock: no other writer can chain between.
            hash_chain.append_links(self.chain, c, notification_ids, stored_events)
        snapshots: SnapshotWrite | None = kwargs.get(SNAPSHOTS)
        if snapshots is not None:
            snapshots.recorder._insert_events(c, snapshots.stored)
        inline: InlineWrite | None = kwargs.get(INLINE_WRITE)
        if inline is not None and notification_ids:
            inline.apply(c, notification_ids, self._read_gap)
        return notification_ids

    def insert_at(self, positions: Sequence[int], stored: Sequence[StoredEvent]) -> None:
        """A copy's page (``store_copy``): each event at its position in the store it is
        copied from, and chained there, so that the copy's chain and anchors are the
        source's even where the source's positions have gaps (PostgreSQL's, ADR-0133).
        A store's own writes take the next position, not these."""
        with self._write_transaction() as c:
            c.executemany(
                f"INSERT INTO {self.events_table_name}"
                " (rowid, originator_id, originator_version, topic, state) VALUES (?, ?, ?, ?, ?)",
                [
                    (p, _stored_id(e.originator_id), e.originator_version, e.topic, e.state)
                    for p, e in zip(positions, stored, strict=True)
                ],
            )
            if self.chained:
                hash_chain.append_links(self.chain, c, positions, stored)

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
        command's aggregates brought up to date together, for one transaction's cost.
        A stream asked for after version 0 starts at its newest snapshot, if it has one
        (the snapshot first, then the events after it)."""
        with self.datastore.transaction(commit=False) as c:
            found: list[Sequence[StoredEvent]] = []
            for stream_id, version in after:
                snapshot = self._newest_snapshot(c, stream_id) if version == 0 else None
                if snapshot is not None:
                    version = snapshot.originator_version
                c.execute(
                    f"SELECT originator_version, topic, state FROM {self.events_table_name}"
                    " WHERE originator_id = ? AND originator_version > ?"
                    " ORDER BY originator_version",
                    (stream_id.hex, version),
                )
                events = [_stream_event(stream_id, row) for row in c.fetchall()]
                found.append([snapshot, *events] if snapshot is not None else events)
            return found

    def _newest_snapshot(self, c: SQLiteCursor, stream_id: UUID) -> StoredEvent | None:
        if self.snapshots_table_name is None:
            return None
        c.execute(
            f"SELECT originator_version, topic, state FROM {self.snapshots_table_name}"
            " WHERE originator_id = ? ORDER BY originator_version DESC LIMIT 1",
            (stream_id.hex,),
        )
        row = c.fetchone()
        return None if row is None else _stream_event(stream_id, row)


def _stored_id(originator_id: UUID | str) -> str:
    """An originator id as the library's SQLite recorder stores it."""
    return originator_id.hex if isinstance(originator_id, UUID) else originator_id


def _stream_event(stream_id: UUID, row: Any) -> StoredEvent:
    return StoredEvent(
        originator_id=stream_id,
        originator_version=row["originator_version"],
        topic=row["topic"],
        state=row["state"],
    )


class SQLiteChainTable:
    """The hash chain's SQL on SQLite (``hash_chain.ChainTable``): one row per event,
    keyed by its notification id (the events table's rowid), beside the library's
    table, whose layout stays the library's (ADR-0028)."""

    name = "event_chain"

    def __init__(self, datastore: SQLiteDatastore, events_table: str) -> None:
        self.datastore = datastore
        self.events = events_table
        self.create_statements = (
            f"CREATE TABLE IF NOT EXISTS {self.name} (position INTEGER PRIMARY KEY,"
            " previous INTEGER NOT NULL, digest BLOB NOT NULL)",
            f"CREATE TABLE IF NOT EXISTS {LATE_TABLE} (first_position INTEGER NOT NULL,"
            " last_position INTEGER NOT NULL, count INTEGER NOT NULL, linked_at TEXT NOT NULL)",
        )
        self._event_columns = _event_columns("")

    def head(self, c: SQLiteCursor) -> Link | None:
        c.execute(f"SELECT {_link_columns('')} FROM {self.name} ORDER BY position DESC LIMIT 1")
        row = c.fetchone()
        return Link(row[0], row[1], row[2]) if row else None

    def unchained(
        self, c: SQLiteCursor, after: int, before: int | None
    ) -> Sequence[tuple[int, StoredEvent]]:
        return self._events(c, after, before)

    def _events(
        self, c: SQLiteCursor, after: int, before: int | None
    ) -> list[tuple[int, StoredEvent]]:
        sql = f"SELECT {self._event_columns} FROM {self.events} WHERE rowid > ?"
        params: list[Any] = [after]
        if before is not None:
            sql += " AND rowid < ?"
            params.append(before)
        c.execute(f"{sql} ORDER BY rowid LIMIT ?", [*params, BATCH])
        return [(row[0], _stored(row, 1)) for row in c.fetchall()]

    def stream_digests(self, c: SQLiteCursor, streams: Mapping[Stream, int]) -> dict[Stream, bytes]:
        found: dict[Stream, bytes] = {}
        for stream, version in streams.items():
            c.execute(
                f"SELECT c.digest FROM {self.events} e JOIN {self.name} c ON c.position = e.rowid"
                " WHERE e.originator_id = ? AND e.originator_version = ?",
                (stream.hex if isinstance(stream, UUID) else stream, version),
            )
            row = c.fetchone()
            if row is not None:
                found[stream] = row[0]
        return found

    def insert(self, c: SQLiteCursor, links: Sequence[Link]) -> None:
        c.executemany(
            f"INSERT INTO {self.name} VALUES (?, ?, ?)",
            [(link.position, link.previous, link.digest) for link in links],
        )

    def tail_cut(self, c: SQLiteCursor, head: Link, first: int) -> bool:
        # SQLite gives a new row the highest rowid plus one, so a cut tail's positions
        # come back: the write's own first position is then at or before the head.
        return head.position >= first

    def record_late(self, c: SQLiteCursor, first: int, last: int) -> None:
        c.execute(
            f"INSERT INTO {LATE_TABLE} SELECT ?, ?, count(*),"
            " strftime('%Y-%m-%dT%H:%M:%SZ', 'now')"
            f" FROM {self.events} WHERE rowid BETWEEN ? AND ?",
            (first, last, first, last),
        )

    def linked_late(self) -> list[LateLinks]:
        with self.datastore.transaction(commit=False) as c:
            c.execute(f"SELECT * FROM {LATE_TABLE} ORDER BY linked_at, first_position")
            return [late_links(row) for row in c.fetchall()]

    def keep_late(self, linked: Sequence[LateLinks]) -> None:
        """Another store's record (``linked_late``), kept by its copy (``store_copy``)."""
        with self.datastore.transaction(commit=True) as c:
            c.executemany(
                f"INSERT INTO {LATE_TABLE} VALUES (?, ?, ?, ?)",
                [(late.first, late.last, late.count, late.linked_at) for late in linked],
            )

    # --- reads for `audit verify` and `audit anchor` -------------------------

    def walk(self, streams: Sequence[UUID] | None) -> Generator[Row, None, None]:
        """Every position of the store (or of ``streams``) with its event and link, in
        position order, read in one read transaction (a consistent snapshot)."""
        with self.datastore.transaction(commit=False) as c:
            if streams is None:
                yield from self._walk_store(c)
            else:
                yield from self._walk_streams(c, streams)

    def _walk_store(self, c: SQLiteCursor) -> Iterator[Row]:
        after = 0
        while True:
            events = self._events(c, after, None)
            sql = f"SELECT {_link_columns('')} FROM {self.name} WHERE position > ?"
            params: list[Any] = [after]
            if events:
                sql += " AND position <= ?"
                params.append(events[-1][0])
            c.execute(f"{sql} ORDER BY position", params)
            links = [Link(*row) for row in c.fetchall()]
            yield from hash_chain.merge(events, links)
            if not events:
                return
            after = events[-1][0]

    def _walk_streams(self, c: SQLiteCursor, streams: Sequence[UUID]) -> Iterator[Row]:
        c.execute(
            f"SELECT {_event_columns('e.')},"
            f" {_link_columns('c.')}, CAST(p.digest AS BLOB) FROM {self.events} e"
            f" LEFT JOIN {self.name} c ON c.position = e.rowid"
            f" LEFT JOIN {self.name} p ON p.position = c.previous"
            f" WHERE e.originator_id IN ({','.join('?' * len(streams))}) ORDER BY e.rowid",
            [s.hex for s in streams],
        )
        rows = []
        for row in c.fetchall():
            link = Link(row[5], row[6], row[7]) if row[5] is not None else None
            rows.append(Row(row[0], _stored(row, 1), link, row[8]))
        # A link whose event is gone may have been one of these streams' (a deleted
        # tail, a whole Action's stream): no stream can be told, so every such link is
        # walked as missing (found by acceptance testing: the item's walk passed).
        c.execute(
            f"SELECT {_link_columns('c.')} FROM {self.name} c WHERE NOT EXISTS"
            f" (SELECT 1 FROM {self.events} e WHERE e.rowid = c.position)"
        )
        rows.extend(Row(row[0], None, Link(*row)) for row in c.fetchall())
        yield from sorted(rows, key=lambda row: row.position)

    def extent(self) -> tuple[Link | None, int]:
        """The chain's head and the store's last position."""
        with self.datastore.transaction(commit=False) as c:
            head = self.head(c)
            c.execute(f"SELECT MAX(rowid) FROM {self.events}")
            return head, c.fetchone()[0] or 0

    def link_at(self, position: int) -> Link | None:
        with self.datastore.transaction(commit=False) as c:
            c.execute(f"SELECT {_link_columns('')} FROM {self.name} WHERE position = ?", [position])
            row = c.fetchone()
            return Link(*row) if row is not None else None


def _event_columns(table: str) -> str:
    # Cast, so that a row whose types were tampered with still reads, and fails.
    return (
        f"{table}rowid, {_blob(f'{table}originator_id')},"
        f" {_integer(f'{table}originator_version')}, {_blob(f'{table}topic')},"
        f" {_blob(f'{table}state')}"
    )


def _link_columns(table: str) -> str:
    return f"{table}position, {_integer(f'{table}previous')}, {_blob(f'{table}digest')}"


def _blob(column: str) -> str:
    return f"COALESCE(CAST({column} AS BLOB), x'')"


def _integer(column: str) -> str:
    return f"COALESCE(CAST({column} AS INTEGER), -1)"


def _stored(row: Any, at: int) -> StoredEvent:
    """The event of a row read with its columns cast to blobs (see ``_event_columns``)."""
    return StoredEvent(
        originator_id=hash_chain.originator(row[at]),
        originator_version=row[at + 1],
        topic=row[at + 2].decode(errors="surrogateescape"),
        state=row[at + 3],
    )
