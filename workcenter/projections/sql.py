"""One SQL text for the read models on SQLite and on PostgreSQL (ADR-0032).

The read models write their rows with plain SQL in the subset both databases
share: ``?`` parameters, ``INSERT ... ON CONFLICT ... DO UPDATE``, partial
indexes, unqualified table names. On SQLite that text runs as it is. On
PostgreSQL a cursor runs it through ``PortableCursor``: ``?`` becomes psycopg's
``%s``, rows come back as tuples that also answer to column names (the
library's own tracking statements read ``row["max"]``), and a ``uuid`` column
comes back as the 32-digit hex text SQLite stores, so the view code never
branches on the database. Unqualified names find the store's schema because
every connection of a Workcenter PostgreSQL datastore has ``search_path`` set
to it (``pin_search_path``).
"""

from __future__ import annotations

import re
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any, Final, Protocol
from uuid import UUID

from workcenter.projections import sqlite_turns

# A schema name is used in DDL and in ``search_path``, so only plain identifiers pass.
SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,47}$")
# SQLite's storage classes named in the views' DDL, and PostgreSQL's types for them.
_PG_TYPES = (
    (re.compile(r"\bBLOB\b"), "BYTEA"),
    (re.compile(r"\bREAL\b"), "DOUBLE PRECISION"),
    (re.compile(r"\bINTEGER\b"), "BIGINT"),
)


class Row(tuple[Any, ...]):
    """A row read by position, like SQLite's, or by column name, like the library's."""

    _names: dict[str, int]

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            key = self._names[key]
        return tuple.__getitem__(self, key)


def _portable(value: Any) -> Any:
    return value.hex if isinstance(value, UUID) else value


def _row_factory(cursor: Any) -> Any:
    names = {column.name: i for i, column in enumerate(cursor.description or ())}

    def make_row(values: Sequence[Any]) -> Row:
        row = Row(_portable(v) for v in values)
        row._names = names
        return row

    return make_row


class PortableCursor:
    """A psycopg cursor that runs the read models' SQLite-flavoured text."""

    def __init__(self, raw: Any) -> None:
        self.raw = raw
        raw.row_factory = _row_factory

    def execute(self, query: Any, params: Any = None, **kwargs: Any) -> PortableCursor:
        if isinstance(query, str):
            query = query.replace("?", "%s")
        self.raw.execute(query, params, **kwargs)
        return self

    def fetchone(self) -> Any:
        return self.raw.fetchone()

    def fetchall(self) -> list[Any]:
        return list(self.raw.fetchall())

    @property
    def rowcount(self) -> int:
        return int(self.raw.rowcount)

    @property
    def statusmessage(self) -> str | None:
        return self.raw.statusmessage


def is_postgres(datastore: Any) -> bool:
    # psycopg is an optional extra: without it loaded, no datastore can be PostgreSQL's.
    library = sys.modules.get("eventsourcing.postgres")
    return library is not None and isinstance(datastore, library.PostgresDatastore)


# Class 08 is "connection exception"; 57P01 to 57P03 are the server shutting down,
# crashing or not yet accepting connections; 57P05 and 25P03 a session it ended for
# idling too long (a claim's hold timeout, ADR-0111; an idle transaction's); client-side
# failures have no SQLSTATE.
DISCONNECTED_STATES = ("57P01", "57P02", "57P03", "57P05", "25P03")


def connection_lost(error: BaseException) -> bool:
    """Whether ``error``, or the first driver error it was raised from, is a lost or
    refused PostgreSQL connection, not a live server's refusal (a lock timeout, ...)."""
    psycopg = sys.modules.get("psycopg")  # optional: without it no connection was lost
    seen: BaseException | None = error
    while psycopg is not None and seen is not None:
        if isinstance(seen, psycopg.Error):
            if not isinstance(seen, psycopg.OperationalError | psycopg.InterfaceError):
                return False
            return disconnected_state(seen.sqlstate)
        seen = seen.__cause__ or seen.__context__
    return False


# SQLSTATEs of a statement the server gave up, its transaction rolled back, that passes:
# lock_not_available (a lock waited out: the session's lock_timeout), query_canceled
# (pg_cancel_backend, a statement_timeout).
LOCK_NOT_AVAILABLE: Final = "55P03"
QUERY_CANCELED: Final = "57014"
HELD_UP_STATES: Final = frozenset({LOCK_NOT_AVAILABLE, QUERY_CANCELED})


def held_up(error: BaseException) -> bool:
    """Whether ``error``, or the first driver error it was raised from, is a statement the
    server gave up that another try may get through (ADR-0138)."""
    psycopg = sys.modules.get("psycopg")
    seen: BaseException | None = error
    while psycopg is not None and seen is not None:
        if isinstance(seen, psycopg.Error):
            return seen.sqlstate in HELD_UP_STATES
        seen = seen.__cause__ or seen.__context__
    return False


def disconnected_state(state: str | None) -> bool:
    """Whether a driver error's SQLSTATE (None: the client's own failure) says the
    connection is lost or refused."""
    return state is None or state.startswith("08") or state in DISCONNECTED_STATES


@contextmanager
def transaction(datastore: Any, *, commit: bool) -> Iterator[Any]:
    """The datastore's transaction, with a cursor that runs the views' SQL text.

    On PostgreSQL a read transaction (``commit=False``) that ends without an error
    ends in a ``COMMIT``: psycopg answers a ``ROLLBACK`` by forgetting every statement
    it prepared on the connection (a ``DEALLOCATE ALL`` round trip next time, and
    each prepared again), and a transaction that only read ends alike either way.
    Every caller of ``commit=False`` only reads (ADR-0051)."""
    if is_postgres(datastore):
        with datastore.transaction(commit=True) as raw:
            yield PortableCursor(raw)
    else:
        with datastore.transaction(commit=commit) as c:
            yield c


class ReadPipeline:
    """A claim's PostgreSQL reads in psycopg's pipeline mode (see ``claim_reads``)."""

    def __init__(self, conn: Any, pipeline: Any) -> None:
        self._conn = conn
        self._pipeline = pipeline

    def cursor(self) -> PortableCursor:
        """A cursor of its own for each statement whose answer is taken after a sync: a
        pipelined cursor keeps only its last statement's answer."""
        return PortableCursor(self._conn.cursor())

    def sync(self) -> None:
        """Send what was queued and take every answer: one round trip."""
        self._pipeline.sync()


@contextmanager
def notified(recorder: Any) -> Iterator[Callable[[float], bool]]:
    """PostgreSQL: a connection held listening on the channel every write of ``recorder``
    notifies (claims in the process leave it aside, ADR-0095). Yields ``wait(timeout)``:
    whether a notification arrived within ``timeout`` seconds; it takes every one that
    had, so a burst of writes is one wake. Listening starts before the caller reads
    anything, so nothing committed after that read goes unnoticed."""
    datastore = recorder.datastore
    with datastore.listening(), datastore.get_connection() as conn:
        conn.execute('LISTEN "' + recorder.channel_name.replace('"', '""') + '"')

        def wait(timeout: float) -> bool:
            arrived = False
            for _ in conn.notifies(timeout=timeout, stop_after=1):
                arrived = True
            if arrived:
                for _ in conn.notifies(timeout=0.0):
                    pass
            return arrived

        try:
            yield wait
        finally:
            # Back in the pool, the connection must not gather notifications for others.
            with suppress(Exception):
                conn.execute("UNLISTEN *")


class Reads(Protocol):
    """What ``claim_reads`` yields: a cursor per statement, and the sync that sends
    those executed since the last (``ReadPipeline``, or the adapters' wire, ADR-0104)."""

    def cursor(self) -> PortableCursor: ...

    def sync(self) -> None: ...


# Ends a claim's reads: the holds on its candidates are its session's (ADR-0105), and
# so is the idle timeout that ends the session of a claim frozen between its exchanges
# (a stopped process, a lost machine), taking its holds with it (ADR-0111).
RELEASE_HOLDS = "SELECT pg_advisory_unlock_all(), set_config('idle_session_timeout', '0', false)"
HOLD_TIMEOUT = "SELECT set_config('idle_session_timeout', ?, false)"


@contextmanager
def claim_reads(datastore: Any) -> Iterator[Reads]:
    """PostgreSQL only: a claim's reads, on a connection it holds while it reads and
    saves on others (and waits its turn for, ADR-0095), sent in pipelines: each ``sync``
    one round trip (ADR-0074). No transaction is held open: each statement is its own,
    so the claim holds no lock on a table it read while it waits on its other
    connections. (An operator's ``ACCESS EXCLUSIVE`` lock would wait for such a lock,
    and the claim's other connections for the operator's, a wait through the worker
    that PostgreSQL cannot see as a deadlock, ADR-0105.) The holds on candidates it
    takes are session advisory locks, released at its end however it ends, and with the
    session if the connection is lost, or if the claim sends nothing on it for
    ``datastore.claim_hold_timeout`` seconds (its process stopped, its machine lost: the
    server ends the session, ADR-0111). Sent on the wire where the store's recorder
    offers it (``datastore.read_exchange``, ADR-0104), else in psycopg's pipeline mode.

    Claim reads opened inside others on the same thread (a claim within a claim id's
    turn, ``claim_turn``) are the outer ones: one connection, one set of holds, released
    when the outer ends."""
    outer = _open_reads().get(id(datastore))
    if outer is not None:
        yield outer
        return
    exchange = getattr(datastore, "read_exchange", None)
    # Sent first, with the claim's first reads.
    hold_timeout = (f"{datastore.claim_hold_timeout}s",)
    with datastore.get_connection(held=True) as conn:
        try:
            wire = exchange(conn) if exchange is not None else None
            if wire is not None:
                wire.cursor().execute(HOLD_TIMEOUT, hold_timeout)
                with _opened(datastore, wire):
                    yield wire
                wire.cursor().execute(RELEASE_HOLDS)
                wire.sync()
                return
            with conn.pipeline() as pipeline:
                reads = ReadPipeline(conn, pipeline)
                reads.cursor().execute(HOLD_TIMEOUT, hold_timeout)
                with _opened(datastore, reads):
                    yield reads
                conn.cursor().execute(RELEASE_HOLDS)
        except BaseException:
            release_holds(conn)
            raise


# The first key of a claim id's turn: apart from the candidates' holds and the views'
# write locks (ADR-0118).
CLAIM_ID_TURNS = 0x57C2
TAKE_TURN = "SELECT pg_advisory_lock(?, hashtext(?))"


@contextmanager
def claim_turn(
    datastore: Any, client_claim_id: str, ask: Callable[[Reads], Callable[[], Any]]
) -> Iterator[Any]:
    """PostgreSQL: the turn of the claims with ``client_claim_id`` in every process of the
    store (a session advisory lock keyed by the store's schema and the id, waited for);
    ``ask`` sends reads after the lock, in the same exchange, and returns what takes
    their answer, which is yielded. A claim made inside the turn reads on its
    connection, and the turn ends with its holds, after that claim's save (ADR-0118).
    On SQLite, nothing is read and None is yielded, the turn held by a lock of a file
    beside the store's (``sqlite_turns``, ADR-0123); in memory, where one process holds
    the store, by none."""
    if not is_postgres(datastore):
        if datastore.pool.is_sqlite_memory_mode:
            yield None
        else:
            with sqlite_turns.turn(datastore.pool.db_name, client_claim_id):
                yield None
        return
    with claim_reads(datastore) as read:
        read.cursor().execute(TAKE_TURN, (CLAIM_ID_TURNS, f"{datastore.schema}:{client_claim_id}"))
        answer = ask(read)
        read.sync()
        yield answer()


def _open_reads() -> dict[int, Reads]:
    """This thread's claim reads in progress, by the id of their datastore."""
    by_store: dict[int, Reads] | None = getattr(_claims, "reads", None)
    if by_store is None:
        by_store = _claims.reads = {}
    return by_store


@contextmanager
def _opened(datastore: Any, reads: Reads) -> Iterator[None]:
    by_store = _open_reads()
    by_store[id(datastore)] = reads
    try:
        yield
    finally:
        del by_store[id(datastore)]


_claims = threading.local()


def release_holds(conn: Any) -> None:
    """After a claim's reads failed: release the holds they took, and forget what psycopg
    prepared (``roll_back``). A lost connection took them with its session."""
    from psycopg import Error

    roll_back(conn)
    if not conn.closed:
        try:
            conn.execute(RELEASE_HOLDS)
        except Error:
            conn.close()  # a session that may still hold them ends


def roll_back(conn: Any) -> None:
    """End the transaction a failed pipeline left open (a failed statement, or an
    exception before the ``COMMIT`` was sent), and forget what psycopg prepared on the
    connection. On a broken connection there is nothing to end: the server rolled back,
    and the pool discards the connection.

    psycopg counts a statement as prepared when it sends its ``Parse`` (at its sixth
    execution), before the answer; in a pipeline a statement after a failed one is
    skipped, ``Parse`` included, and psycopg does not notice: the connection's next use
    of it fails with "prepared statement ... does not exist" (found by four worker
    processes, ADR-0075). Clearing psycopg's cache makes it send ``DEALLOCATE ALL`` before
    its next statement and prepare afresh: both sides agree again."""
    from psycopg import Error
    from psycopg.pq import TransactionStatus  # psycopg is the PostgreSQL extra's

    if conn.closed:
        return
    if conn.info.transaction_status != TransactionStatus.IDLE:
        with suppress(Error):
            conn.execute("ROLLBACK")
    prepared = getattr(conn, "_prepared", None)  # psycopg's PrepareManager
    if prepared is not None:
        prepared.clear()


def ddl(statement: str, datastore: Any) -> str:
    """A view's SQLite DDL in the datastore's own types."""
    if not is_postgres(datastore):
        return statement
    for pattern, name in _PG_TYPES:
        statement = pattern.sub(name, statement)
    return statement


def position_column(recorder: Any) -> str:
    """The events table's column of notification ids."""
    return "notification_id" if is_postgres(recorder.datastore) else "rowid"


def head_statement(recorder: Any) -> Any:
    """The statement that reads the last notification id of the event store."""
    if is_postgres(recorder.datastore):
        return recorder.max_notification_id_statement
    return recorder.select_max_notification_id_statement


def position_and_head(c: Any, recorder: Any, name: str) -> Callable[[], tuple[int, int]]:
    """Send the read of view ``name``'s position and the event store's last notification
    id, in one statement: on PostgreSQL each statement of a read transaction sees the
    commits made before it, so two statements could see a write between them and find a
    view that is current behind the head (ADR-0069). The answer is taken by calling what
    this returns, after a pipeline's sync where there is one (ADR-0074)."""
    if is_postgres(recorder.datastore):
        events = f'"{recorder.datastore.schema}".{recorder.events_table_name}'
        head = f"SELECT MAX(notification_id) FROM {events}"
    else:
        head = f"SELECT MAX(rowid) FROM {recorder.events_table_name}"
    c.execute(
        f"SELECT (SELECT MAX(notification_id) FROM tracking WHERE application_name = ?), ({head})",
        (name,),
    )

    def answer() -> tuple[int, int]:
        position, last = c.fetchone()
        return int(position or 0), int(last or 0)

    return answer


def lock_view(c: Any, datastore: Any, name: str) -> None:
    """Serialise the writers of view ``name`` until the caller's transaction ends.

    SQLite has one writer at a time, and a no-op write takes that lock. On
    PostgreSQL the event recorder's table lock serialises inline writers only, so
    runners, readers catching up and inline writers meet at a lock of the view's
    own (an advisory lock, released when the transaction ends). Advisory locks are
    the database's, not the schema's: the key names the schema, so stores sharing
    one database do not wait for each other's views (ADR-0052)."""
    if is_postgres(datastore):
        lock_views(c, datastore, [name])
    else:
        c.execute(
            "UPDATE tracking SET notification_id = notification_id WHERE application_name = ?",
            (name,),
        )


def pin_search_path(datastore: Any) -> None:
    """Every connection the datastore opens finds unqualified names in its schema.

    Called before the pool opens its first connection (the library opens it lazily):
    the pool's callback for each new connection, the library's own, is followed by a
    ``SET search_path``. Not by the ``options`` startup parameter, which a pooler
    between the processes and the server may refuse (PgBouncer closes the connection)
    or drop (ADR-0115). ``_configure`` is psycopg_pool's attribute for the callback it
    was given; the library builds the pool, so it cannot be passed in."""
    schema = datastore.schema
    if not SCHEMA_NAME.match(schema):
        raise ValueError(f"not a plain schema name: {schema!r}")
    pool = datastore.pool
    library: Callable[[Any], None] | None = pool._configure
    statement = f"SET search_path = {schema}"

    def configure(conn: Any) -> None:
        if library is not None:
            library(conn)  # autocommit, and the session's idle timeout
        conn.execute(statement)

    pool._configure = configure


def connection_params(datastore: Any) -> dict[str, Any]:
    """The keyword arguments the datastore's pool connects with (the library gives a dict)."""
    params = datastore.pool.kwargs
    assert isinstance(params, dict)
    return params


def lock_views(c: Any, datastore: Any, names: Sequence[str]) -> None:
    """``lock_view`` for several views of a PostgreSQL store, in one statement: its target
    list is evaluated left to right, so the locks are taken in the order given."""
    locks = ", ".join(["pg_advisory_xact_lock(hashtext(?))"] * len(names))
    c.execute(f"SELECT {locks}", tuple(f"workcenter:{datastore.schema}:{n}" for n in names))


def row_values(count: int) -> str:
    """``(%s, %s), ...`` for ``count`` pairs, for ``(a, b) IN (...)`` on PostgreSQL: unlike
    unnested arrays, its plan does not depend on the values, so a prepared statement
    keeps one plan instead of planning every execution (ADR-0069)."""
    return ", ".join(["(%s, %s)"] * count)
