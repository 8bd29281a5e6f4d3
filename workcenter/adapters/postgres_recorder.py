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

import contextlib
import time
from collections.abc import Mapping, Sequence
from typing import Any
from uuid import UUID

import psycopg
from eventsourcing.persistence import InterfaceError, Notification, OperationalError, StoredEvent
from eventsourcing.postgres import PostgresApplicationRecorder
from eventsourcing.utils import retry

from workcenter.adapters import postgres_columns, postgres_wire, postgres_write
from workcenter.adapters.postgres_chain import PostgresChainTable
from workcenter.adapters.postgres_columns import NamedColumnsNotifications, name_stream_columns
from workcenter.adapters.recorders import INLINE_WRITE, SNAPSHOTS, SnapshotWrite
from workcenter.projections import inline as inline_views
from workcenter.projections import sql, tracked
from workcenter.projections.inline import InlineWrite, Prebuilt
from workcenter.projections.sql import PortableCursor
from workcenter.service_layer.history import hash_chain


class OneCommitPostgresRecorder(NamedColumnsNotifications, PostgresApplicationRecorder):
    """Inserts a command's events, their links in the hash chain, then its snapshots and
    inline views, in one transaction. Its reads name the columns they take, so a column
    an operator adds or drops breaks none of them (``postgres_columns``, ADR-0107)."""

    # Set by the factory from the store's settings (ADR-0028), as on SQLite.
    chained = True
    # A list to collect, per write, (seconds from the reply that granted the table lock
    # to the commit's reply, seconds from the write's start to that reply), for
    # benchmarks (ADR-0052); None, the default, collects nothing.
    lock_holds: list[tuple[float, float]] | None = None
    # How each write commits (postgres_write.CommitMode): "on" unless the operator chose
    # "early-release" (the table lock released before the flush, ADR-0088) or "off" (no
    # flush waited for: a server crash may lose the last commands' writes, all of each,
    # never part of one, ADR-0053).
    synchronous_commit: postgres_write.CommitMode = "on"
    # As on SQLite: set by the composition root (a stream loaded from version 0 starts at
    # its newest snapshot).
    snapshots_table_name: str | None = None
    # A write whose rows were all built before the lock goes to the server in one
    # exchange (ADR-0070); off, every write takes the two-exchange way (for comparing).
    one_exchange = True
    # One-exchange writes sent on libpq's pipeline past psycopg's cursors (ADR-0104); off,
    # with psycopg's (for comparing).
    wire = True
    # One-exchange writes the server sent back to the two-exchange way (ADR-0070).
    fallbacks = 0

    def __init__(self, datastore: Any, **kwargs: Any) -> None:
        super().__init__(datastore, **kwargs)
        name_stream_columns(self)
        self.chain = PostgresChainTable(datastore, self.events_table_name, self._lock_table)
        # The server's digest hashes the id's 16 bytes, as hash_chain does a UUID's.
        if datastore.originator_id_type != "uuid":
            self.one_exchange = False

    def create_table(self) -> None:
        super().create_table()
        self.chain.create()
        postgres_write.install(
            self.datastore, self.events_table_name, self.chain.name, self.channel_name
        )

    def chain_unchained(self) -> None:
        """The migration run when a store is opened (see the SQLite twin)."""
        with sql.transaction(self.datastore, commit=False) as c:
            head = self.chain.head(c)
            c.execute(f"SELECT MAX(notification_id) FROM {self.events_table_name}")
            last = c.fetchone()[0] or 0
        if last <= (head.position if head else 0):
            return
        hash_chain.chain_unchained(self.chain, self.chain.write_transaction)

    # A lost connection rolls the whole transaction back, so trying again is safe.
    @retry((InterfaceError, OperationalError), max_attempts=10, wait=0.2)
    def insert_events(
        self, stored_events: Sequence[StoredEvent], **kwargs: Any
    ) -> Sequence[int] | None:
        """The command's write in two round trips, in psycopg's pipeline mode (ADR-0051):

        1. ``BEGIN``, the library's lock, notify and insert, and every read the rest
           needs (the chain's head and the digests its links follow, the views'
           locks and positions, the other streams the detail view builds from,
           ADR-0069), then one sync;
        2. the chain's links, the snapshots and the views' rows and positions,
           computed from those answers (the detail DTOs built before the lock when
           nothing newer was read), and the ``COMMIT`` (a view that must still read,
           as one lagging by more than ``GAP_LIMIT`` events, adds a round trip).

        A statement that fails (the optimistic insert's unique violation) raises at
        the first sync, and nothing after it runs; any exception leaves both blocks
        and the transaction rolls back."""
        if not stored_events:
            return []
        inline: InlineWrite | None = kwargs.get(INLINE_WRITE)
        names = inline.tracked_names() if inline is not None else None
        ahead = inline.streams_ahead() if inline is not None else None
        once: Prebuilt | None = None
        if self.one_exchange:
            once = Prebuilt() if inline is None else inline.prebuilt_write()
        streams = hash_chain.predecessors(stored_events) if self.chained else {}
        with self.datastore.get_connection() as conn:
            if once is not None:
                written = self._write_once(conn, stored_events, once, **kwargs)
                if written is not None:
                    if inline is not None:
                        inline.written_once()
                    return written
            started = time.time()  # the wall clock: compared with the server's, as below
            try:
                # BEGIN and COMMIT as statements: psycopg's transaction() block inside a
                # pipeline syncs on entering and leaving, a round trip each.
                with conn.pipeline() as pipeline:
                    insert = conn.cursor()
                    postgres_write.send_begin(insert, self.synchronous_commit)
                    self._insert_events(insert, stored_events, **kwargs)
                    self._insert_stored_events(insert, stored_events, **kwargs)  # lock, notify
                    granted: Any = None
                    released: Any = None
                    if self.lock_holds is not None:
                        # The server's clock after the lock's grant and the insert (a hold
                        # shorter by the insert than the one-exchange way times it).
                        granted = conn.cursor()
                        granted.execute(postgres_write.CLOCK)
                    head, digests = PortableCursor(conn.cursor()), PortableCursor(conn.cursor())
                    if self.chained:
                        self.chain.send_reads(head, digests, streams)
                    views = PortableCursor(conn.cursor())
                    if names:
                        tracked.send_positions(views, self.datastore, names)
                    others = gap = None
                    if ahead:
                        others = conn.cursor()
                        self.send_streams_after(others, ahead, newest=True)
                    if ahead is not None and names:
                        # The detail view lags after renewals and ledger writes (ADR-0037).
                        gap = conn.cursor()
                        self._send_gap(gap, stored_events, names)
                    pipeline.sync()
                    ids = self._fetch_ids_after_insert_events(insert, stored_events)
                    assert ids is not None
                    if self.chained:
                        reads = self.chain.take_reads(head, digests, streams)
                        hash_chain.append_links(self.chain, head, ids, stored_events, reads)
                    positions = tracked.take_positions(views, names) if names else None
                    if inline is not None and ahead is not None:
                        inline.take_ahead(
                            _take_streams(others, ahead) if others is not None else []
                        )
                    before = self._take_gap(gap) if gap is not None else None
                    self._insert_along(views, ids, positions, before, **kwargs)
                    insert.execute("COMMIT")
                    if self.lock_holds is not None:
                        released = conn.cursor()
                        released.execute(postgres_write.CLOCK)
                    postgres_write.send_flush(insert, self.synchronous_commit)
                # Leaving the pipeline synced it: the commit's answer is in.
            except BaseException:
                sql.roll_back(conn)
                raise
            if granted is not None and released is not None:
                self._hold(started, granted.fetchone()["t"], released.fetchone()["t"])
            return ids

    def insert_at(self, positions: Sequence[int], stored: Sequence[StoredEvent]) -> None:
        """A copy's page at the source's positions (the SQLite twin's): the position
        sequence is moved past the last, so the store's own writes follow them."""
        with self.chain.write_transaction() as c:
            c.raw.executemany(  # psycopg pipelines it: one exchange for the page
                f"INSERT INTO {self.events_table_name} (notification_id, originator_id,"
                " originator_version, topic, state) VALUES (%s, %s, %s, %s, %s)",
                [
                    (p, e.originator_id, e.originator_version, e.topic, e.state)
                    for p, e in zip(positions, stored, strict=True)
                ],
            )
            c.execute(
                "SELECT setval(pg_get_serial_sequence(?, 'notification_id'), ?)",
                [self.events_table_name, max(positions)],
            )
            if self.chained:
                hash_chain.append_links(self.chain, c, positions, stored)

    def _write_once(
        self, conn: Any, stored_events: Sequence[StoredEvent], once: Prebuilt, **kwargs: Any
    ) -> Sequence[int] | None:
        """The write in one exchange (ADR-0070): ``BEGIN``, ``wc_write_events`` (the
        library's lock, notify and insert, the chain, the views' locks, checks and
        positions, ADR-0075), the rows built before the lock, the snapshots and
        ``COMMIT``, all sent at the one sync: on the wire (ADR-0104), or held back in
        psycopg's pipeline where the wire does not apply (a write with snapshots, a
        parameter it does not encode). None if the server found what the rows did not
        see (``FALLBACK``): the transaction is rolled back and the caller writes the
        two-exchange way."""
        started = time.time()  # the wall clock: compared with the server's, on this machine
        snapshots: SnapshotWrite | None = kwargs.get(SNAPSHOTS)
        batch = None
        if self.wire and snapshots is None and postgres_wire.usable(conn):
            batch = postgres_wire.Batch()
            try:
                call, released = self._write_statements(batch, stored_events, once, None)
            except postgres_wire.Unencodable:
                batch = None  # a parameter the wire does not send: psycopg's cursors do
        try:
            if batch is not None:
                postgres_wire.send(conn, batch)  # ADR-0104
            else:
                with conn.pipeline(), postgres_write.held_back(conn):
                    call, released = self._write_statements(conn, stored_events, once, snapshots)
                # Leaving the pipeline sent everything and one sync, and took the answers.
        except psycopg.Error as raised:
            sql.roll_back(conn)
            error = _failed_statement(raised)
            if error.sqlstate == postgres_write.CUT:
                raise hash_chain.HistoryConflict(error.diag.message_primary or str(error)) from None
            if error.sqlstate == postgres_write.FALLBACK:
                self.fallbacks += 1
                return None
            if error is not raised:
                raise error from None
            raise
        except BaseException:
            sql.roll_back(conn)
            raise
        answer = call.fetchone()
        if released is not None:
            self._hold(started, answer["started"], released.fetchone()["t"])
        return list(answer["ids"])

    def _write_statements(
        self,
        target: Any,
        stored_events: Sequence[StoredEvent],
        once: Prebuilt,
        snapshots: SnapshotWrite | None,
    ) -> tuple[Any, Any]:
        """The one-exchange write's statements, executed on ``target``: psycopg's
        connection in its pipeline, or the wire's ``Batch`` (ADR-0104), which takes the
        same statements in the same order. Returns the cursors whose answers are read:
        the call's, and the server's clock after the commit when holds are timed."""
        postgres_write.send_begin(target.cursor(), self.synchronous_commit)
        call = postgres_write.send(
            target,
            self.datastore.schema,
            self.events_table_name,
            stored_events,
            self.datastore.lock_timeout,
            self.chained,
            once,
        )
        if snapshots is not None:
            snapshots.recorder._insert_stored_events(target.cursor(), snapshots.stored)  # type: ignore[attr-defined]
        target.cursor().execute("COMMIT")
        released = None
        if self.lock_holds is not None:
            # The server's clock once the commit ended, the lock released.
            released = target.cursor()
            released.execute(postgres_write.CLOCK)
        postgres_write.send_flush(target.cursor(), self.synchronous_commit)
        return call, released

    def read_exchange(self, conn: Any) -> postgres_wire.ReadExchange | None:
        """A claim's reads sent on the wire on ``conn``, if the wire is on and may write
        there (``sql.claim_reads``, ADR-0104)."""
        if self.wire and postgres_wire.usable(conn):
            return postgres_wire.ReadExchange(conn)
        return None

    def _hold(self, started: float, granted: Any, released: Any) -> None:
        """Note a write's hold of the table lock: from its grant to its commit's end, on
        the server's clock; not up to the reply's arrival here (the lock is no longer held
        while this process waits to be scheduled to read it, nor while the server flushes
        after an early release). Then the wait for the lock, from ``started`` (the wall
        clock of this machine, which the server shares)."""
        assert self.lock_holds is not None
        locked = float(granted)
        self.lock_holds.append((float(released) - locked, locked - started))

    def _insert_along(
        self,
        c: PortableCursor,
        notification_ids: Sequence[int],
        positions: Mapping[str, int] | None,
        gap: Sequence[Notification] | None,
        **kwargs: Any,
    ) -> None:
        """What the SQLite twin does after ``super()._insert_events``: the snapshots due,
        then the inline read models, with the transaction's cursor."""
        snapshots: SnapshotWrite | None = kwargs.get(SNAPSHOTS)
        if snapshots is not None:
            snapshots.recorder._insert_stored_events(c.raw, snapshots.stored)  # type: ignore[attr-defined]
        inline: InlineWrite | None = kwargs.get(INLINE_WRITE)
        if inline is not None and notification_ids:
            inline.apply(c, notification_ids, self._read_gap, positions, gap)

    @retry((InterfaceError, OperationalError), max_attempts=10, wait=0.2)
    def select_streams_after(
        self, after: Sequence[tuple[UUID, int]]
    ) -> list[Sequence[StoredEvent]]:
        """The events of each stream after its version, in one statement (one round trip,
        one snapshot): the SQLite twin's port (``StreamsAfter``), so a command's cached
        aggregates are brought up to date together (ADR-0051). A stream asked for after
        version 0 starts at its newest snapshot, if it has one (ADR-0069). The streams are
        distinct, as the repository asks for them. Sent on the wire where it can be
        (ADR-0104)."""
        with self.datastore.get_connection() as conn:
            if self.wire and postgres_wire.usable(conn):
                batch = postgres_wire.Batch()
                read = batch.cursor()
                with contextlib.suppress(postgres_wire.Unencodable):
                    self.send_streams_after(read, after)
                    postgres_wire.send(conn, batch)
                    return [events for events, _ in _take_streams(read, after)]
            with conn.cursor() as curs:
                self.send_streams_after(curs, after)
                return [events for events, _ in _take_streams(curs, after)]

    def send_streams_after(
        self, curs: Any, after: Sequence[tuple[UUID, int]], *, newest: bool = False
    ) -> None:
        """The statement of ``select_streams_after``, sent on a raw cursor (a pipelined
        write sends it with its insert, ADR-0069); ``_take_streams`` reads it. ``newest``
        also asks each stream's newest version.

        One simple select per stream joined by ``UNION ALL``: a plan that does not depend
        on the values, which PostgreSQL keeps, where unnested arrays were planned again
        at every execution."""
        events = f'"{self.datastore.schema}".{self.events_table_name}'
        snapshots = (
            f'"{self.datastore.schema}".{self.snapshots_table_name}'
            if self.snapshots_table_name is not None
            else None
        )
        columns = "originator_id, originator_version, topic, state"
        parts: list[str] = []
        params: list[Any] = []
        for i, (stream_id, version) in enumerate(after):
            if version == 0 and snapshots is not None:
                # The newest snapshot, then the events after it (a snapshot sorts first).
                parts.append(
                    f"(SELECT {i} AS i, 0 AS k, {columns} FROM {snapshots}"
                    " WHERE originator_id = %s ORDER BY originator_version DESC LIMIT 1)"
                )
                parts.append(
                    f"SELECT {i} AS i, 1 AS k, {columns} FROM {events} WHERE originator_id = %s"
                    " AND originator_version > (SELECT COALESCE(MAX(originator_version), 0)"
                    f" FROM {snapshots} WHERE originator_id = %s)"
                )
                params += [stream_id, stream_id, stream_id]
            else:
                parts.append(
                    f"SELECT {i} AS i, 1 AS k, {columns} FROM {events}"
                    " WHERE originator_id = %s AND originator_version > %s"
                )
                params += [stream_id, version]
            if newest:
                parts.append(
                    f"SELECT {i} AS i, 2 AS k, %s::uuid, COALESCE(MAX(originator_version), 0),"
                    f" NULL::text, NULL::bytea FROM {events} WHERE originator_id = %s"
                )
                params += [stream_id, stream_id]
        # Rows as tuples: ``_take_streams`` reads them by place, and a dict per row was
        # most of what reading them cost the client.
        curs.row_factory = psycopg.rows.tuple_row
        curs.execute(" UNION ALL ".join(parts) + " ORDER BY 1, 2, 4", params, prepare=True)

    def _send_gap(self, c: Any, stored_events: Sequence[StoredEvent], names: Sequence[str]) -> None:
        """Send the read of the events after the lowest position of the views ``names``
        (0 if one has none), other than the command's own, just inserted: a lagging
        view's gap, read with the insert (ADR-0069). At most ``GAP_LIMIT + 1``."""
        c.execute(
            "SELECT notification_id, originator_id, originator_version, topic, state"
            f' FROM "{self.datastore.schema}".{self.events_table_name}'
            " WHERE notification_id > (SELECT CASE WHEN COUNT(*) < %s THEN 0"
            " ELSE MIN(notification_id) END FROM tracking WHERE application_name = ANY(%s))"
            " AND (originator_id, originator_version) NOT IN"
            f" ({sql.row_values(len(stored_events))})"
            " ORDER BY notification_id LIMIT %s",
            (
                len(names),
                list(names),
                *(v for e in stored_events for v in (e.originator_id, e.originator_version)),
                inline_views.GAP_LIMIT + 1,
            ),
            prepare=True,
        )

    @staticmethod
    def _take_gap(c: Any) -> list[Notification]:
        return postgres_columns.notifications(c.fetchall())

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


def _take_streams(
    curs: Any, after: Sequence[tuple[UUID, int]]
) -> list[tuple[Sequence[StoredEvent], int]]:
    """Per stream of ``after``, in order: its events as ``send_streams_after`` read them,
    and its newest version (0 unless that was asked for, or if it has no event)."""
    found: list[tuple[list[StoredEvent], int]] = [([], 0) for _ in after]
    for i, kind, originator_id, version, topic, state in curs.fetchall():
        events, _ = found[i]
        if kind == 2:
            found[i] = (events, version)
            continue
        events.append(
            StoredEvent(
                originator_id=originator_id,
                originator_version=version,
                topic=topic,
                state=bytes(state),
            )
        )
    return [(events, newest) for events, newest in found]


def _failed_statement(error: psycopg.Error) -> psycopg.Error:
    """The error of the statement that failed, not of those the pipeline then skipped:
    leaving a pipeline takes its last answers in a ``finally``, so when the failure was
    raised first, the skipped statements' "pipeline aborted" replaces it, the failure
    kept as its ``__context__``."""
    while isinstance(error, psycopg.errors.PipelineAborted) and isinstance(
        error.__context__, psycopg.Error
    ):
        error = error.__context__
    return error
