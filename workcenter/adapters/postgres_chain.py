"""The hash chain's SQL on PostgreSQL (``hash_chain.ChainTable`` and the reads of
``audit verify``): the twin of ``recorders.SQLiteChainTable`` (ADR-0028).

One row per event, keyed by its notification id, in a table beside the
library's events table. Links are written by the recorder inside the insert's
transaction, after the library's ``LOCK TABLE ... IN EXCLUSIVE MODE``, which
serialises every writer of the store: the chain cannot fork.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any
from uuid import UUID

from eventsourcing.persistence import StoredEvent

from workcenter.projections import sql
from workcenter.projections.sql import PortableCursor
from workcenter.service_layer.history import hash_chain
from workcenter.service_layer.history.hash_chain import (
    BATCH,
    ChainReads,
    Link,
    Row,
    Stream,
)
from workcenter.service_layer.history.late_links import LATE_TABLE, LateLinks, late_links

CHAIN_TABLE = "event_chain"


def _event_columns(table: str) -> str:
    # topic and state may be NULL in the library's table: a row edited to NULL must read,
    # and fail its digest, as on SQLite (the other columns are typed and NOT NULL).
    return (
        f"{table}notification_id, {table}originator_id::text, {table}originator_version,"
        f" COALESCE({table}topic, ''), COALESCE({table}state, ''::bytea)"
    )


_EVENT_COLUMNS = _event_columns("")


class PostgresChainTable:
    name = CHAIN_TABLE

    def __init__(self, datastore: Any, events_table: str, lock: Callable[[Any], None]) -> None:
        self.datastore = datastore
        self.events = events_table
        self._lock = lock
        self.create_statements = (
            f"CREATE TABLE IF NOT EXISTS {self.name} (position BIGINT PRIMARY KEY,"
            " previous BIGINT NOT NULL, digest BYTEA NOT NULL)",
            f"CREATE TABLE IF NOT EXISTS {LATE_TABLE} (first_position BIGINT NOT NULL,"
            " last_position BIGINT NOT NULL, count BIGINT NOT NULL,"
            " linked_at TIMESTAMPTZ NOT NULL)",
        )

    def create(self) -> None:
        with sql.transaction(self.datastore, commit=True) as c:
            for statement in self.create_statements:
                c.execute(statement)

    @contextmanager
    def write_transaction(self) -> Iterator[PortableCursor]:
        """A transaction holding the events table's lock, as every insert takes it."""
        with self.datastore.transaction(commit=True) as raw:
            self._lock(raw)
            yield PortableCursor(raw)

    def head(self, c: Any) -> Link | None:
        c.execute(
            f"SELECT position, previous, digest FROM {self.name} ORDER BY position DESC LIMIT 1"
        )
        row = c.fetchone()
        return Link(row[0], row[1], bytes(row[2])) if row else None

    def unchained(
        self, c: Any, after: int, before: int | None
    ) -> Sequence[tuple[int, StoredEvent]]:
        return self._events(c, after, before)

    def _events(self, c: Any, after: int, before: int | None) -> list[tuple[int, StoredEvent]]:
        statement = f"SELECT {_EVENT_COLUMNS} FROM {self.events} WHERE notification_id > ?"
        params: list[Any] = [after]
        if before is not None:
            statement += " AND notification_id < ?"
            params.append(before)
        c.execute(f"{statement} ORDER BY notification_id LIMIT ?", [*params, BATCH])
        return [(row[0], _stored(row, 1)) for row in c.fetchall()]

    def stream_digests(self, c: Any, streams: Mapping[Stream, int]) -> dict[Stream, bytes]:
        found: dict[Stream, bytes] = {}
        for stream, version in streams.items():
            c.execute(
                f"SELECT c.digest FROM {self.events} e"
                f" JOIN {self.name} c ON c.position = e.notification_id"
                " WHERE e.originator_id = ? AND e.originator_version = ?",
                (stream, version),
            )
            row = c.fetchone()
            if row is not None:
                found[stream] = bytes(row[0])
        return found

    # --- the reads a write sends with its insert (ADR-0051) --------------------

    def send_reads(self, head: Any, digests: Any, streams: Mapping[Stream, int]) -> None:
        """Send, on two raw cursors of a pipelined transaction holding the table lock, the
        reads of ``ChainReads``; ``take_reads`` takes their answers after the sync."""
        # The head is taken in a subquery first: with the LIMIT outside, PostgreSQL plans
        # the EXISTS as a hashed scan of every event, a cost that grew with the store
        # (about 1 ms at 2,000 events); this way it is one index probe.
        head.execute(
            f"SELECT c.position, c.previous, c.digest, EXISTS (SELECT 1 FROM {self.events} e"
            " WHERE e.notification_id = c.position)"
            f" FROM (SELECT * FROM {self.name} ORDER BY position DESC LIMIT 1) c",
            prepare=True,
        )
        if streams:
            # One statement for every stream, its (id, version) pairs as row values: a
            # plan that does not depend on them, which PostgreSQL keeps (ADR-0069).
            pairs = sql.row_values(len(streams))
            digests.execute(
                f"SELECT e.originator_id::text, c.digest FROM {self.events} e"
                f" JOIN {self.name} c ON c.position = e.notification_id"
                f" WHERE (e.originator_id, e.originator_version) IN ({pairs})",
                [value for stream, version in streams.items() for value in (stream, version)],
                prepare=True,
            )

    def take_reads(self, head: Any, digests: Any, streams: Mapping[Stream, int]) -> ChainReads:
        row = head.fetchone()
        found: dict[Stream, bytes] = {}
        if streams:
            found = {UUID(r[0]): bytes(r[1]) for r in digests.fetchall()}
        if row is None:
            return ChainReads(None, False, found)
        return ChainReads(Link(row[0], row[1], bytes(row[2])), bool(row[3]), found)

    def insert(self, c: Any, links: Sequence[Link]) -> None:
        # One statement for every link (a command writes a few): one message to send.
        raw = c.raw if isinstance(c, PortableCursor) else c
        raw.execute(
            f"INSERT INTO {self.name} VALUES {', '.join(['(%s, %s, %s)'] * len(links))}",
            [value for link in links for value in (link.position, link.previous, link.digest)],
        )

    def tail_cut(self, c: Any, head: Link, first: int) -> bool:
        # The sequence never gives a deleted event's id again, so a cut tail shows as a
        # head whose event is gone (one lookup by the events' unique index).
        if head.position >= first:
            return True
        c.execute(f"SELECT 1 FROM {self.events} WHERE notification_id = ?", (head.position,))
        return c.fetchone() is None

    def record_late(self, c: Any, first: int, last: int) -> None:
        c.execute(
            f"INSERT INTO {LATE_TABLE} SELECT ?, ?, count(*), now() FROM {self.events}"
            " WHERE notification_id BETWEEN ? AND ?",
            (first, last, first, last),
        )

    def linked_late(self) -> list[LateLinks]:
        with sql.transaction(self.datastore, commit=False) as c:
            c.execute(
                "SELECT first_position, last_position, count,"
                " to_char(linked_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')"
                f" FROM {LATE_TABLE} ORDER BY linked_at, first_position"
            )
            return [late_links(row) for row in c.fetchall()]

    def keep_late(self, linked: Sequence[LateLinks]) -> None:
        """Another store's record (``linked_late``), kept by its copy (``store_copy``)."""
        with sql.transaction(self.datastore, commit=True) as c:
            c.raw.executemany(
                f"INSERT INTO {LATE_TABLE} VALUES (%s, %s, %s, %s::timestamptz)",
                [(late.first, late.last, late.count, late.linked_at) for late in linked],
            )

    # --- reads for `audit verify` and `audit anchor` -------------------------

    def walk(self, streams: Sequence[UUID] | None) -> Generator[Row, None, None]:
        # REPEATABLE READ: the whole walk sees one snapshot, as SQLite's read transaction does.
        with sql.transaction(self.datastore, commit=False) as c:
            c.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            if streams is None:
                yield from self._walk_store(c)
            else:
                yield from self._walk_streams(c, streams)

    def _walk_store(self, c: Any) -> Iterator[Row]:
        after = 0
        while True:
            events = self._events(c, after, None)
            statement = f"SELECT position, previous, digest FROM {self.name} WHERE position > ?"
            params: list[Any] = [after]
            if events:
                statement += " AND position <= ?"
                params.append(events[-1][0])
            c.execute(f"{statement} ORDER BY position", params)
            links = [Link(r[0], r[1], bytes(r[2])) for r in c.fetchall()]
            yield from hash_chain.merge(events, links)
            if not events:
                return
            after = events[-1][0]

    def _walk_streams(self, c: Any, streams: Sequence[UUID]) -> Iterator[Row]:
        c.execute(
            f"SELECT {_event_columns('e.')}, c.position, c.previous, c.digest, p.digest"
            f" FROM {self.events} e"
            f" LEFT JOIN {self.name} c ON c.position = e.notification_id"
            f" LEFT JOIN {self.name} p ON p.position = c.previous"
            f" WHERE e.originator_id IN ({','.join('?' * len(streams))})"
            " ORDER BY e.notification_id",
            list(streams),
        )
        rows = []
        for row in c.fetchall():
            link = Link(row[5], row[6], bytes(row[7])) if row[5] is not None else None
            previous = bytes(row[8]) if row[8] is not None else None
            rows.append(Row(row[0], _stored(row, 1), link, previous))
        # Links whose event is gone, walked as missing (the SQLite twin's).
        c.execute(
            f"SELECT c.position, c.previous, c.digest FROM {self.name} c WHERE NOT EXISTS"
            f" (SELECT 1 FROM {self.events} e WHERE e.notification_id = c.position)"
        )
        rows.extend(Row(r[0], None, Link(r[0], r[1], bytes(r[2]))) for r in c.fetchall())
        yield from sorted(rows, key=lambda row: row.position)

    def extent(self) -> tuple[Link | None, int]:
        with sql.transaction(self.datastore, commit=False) as c:
            head = self.head(c)
            c.execute(f"SELECT MAX(notification_id) FROM {self.events}")
            return head, c.fetchone()[0] or 0

    def link_at(self, position: int) -> Link | None:
        with sql.transaction(self.datastore, commit=False) as c:
            c.execute(
                f"SELECT position, previous, digest FROM {self.name} WHERE position = ?",
                [position],
            )
            row = c.fetchone()
            return Link(row[0], row[1], bytes(row[2])) if row is not None else None


def _stored(row: Any, at: int) -> StoredEvent:
    return StoredEvent(
        originator_id=UUID(row[at]),
        originator_version=row[at + 1],
        topic=row[at + 2],
        state=bytes(row[at + 3]),
    )
