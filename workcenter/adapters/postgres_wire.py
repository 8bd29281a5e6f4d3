"""A command's write and a claim's reads sent on libpq's own pipeline, past psycopg's
cursors (ADR-0104).

psycopg turns each statement into a query object, adapts its parameters through its
adapters map, manages its prepared statements and keeps a cursor's results, all in
Python: about 35 us of a client's CPU a statement on the benchmark machine, and a run
cycle sends about twenty. The statements of the hot path are few and of a few kinds, so
here they are collected by stand-ins for psycopg's connection and cursors (``Batch``,
which ``postgres_write.send`` and the views' ``rows_of`` write into as they would into
psycopg's; ``ReadExchange``, which ``sql.claim_reads`` yields), their parameters
encoded by ``encode`` as psycopg types them, and sent with libpq's pipeline calls on the
connection psycopg holds, driven by psycopg's own generators and wait (so round trips
are counted, and a lost connection raises psycopg's ``OperationalError``, as before).
Answers are loaded from text as psycopg loads them: the column types these statements
read by loaders of the wire's own (``_LOADERS``), any other by psycopg's.

A parameter ``encode`` does not know raises ``Unencodable`` before anything is sent: a
write is then sent with psycopg's cursors, a read's statement by psycopg's cursor on the
same connection. Statements are prepared once per connection under names of their own;
a connection whose prepared statements were dropped (psycopg sends ``DEALLOCATE ALL``
after a ``ROLLBACK`` it ran) answers "does not exist", and a batch that is a transaction
of its own is sent again, prepared afresh (``send``).
"""

from __future__ import annotations

import binascii
import functools
import itertools
import re
import struct
import weakref
from collections.abc import Callable, Generator, Sequence
from typing import Any, Final, NamedTuple
from uuid import UUID

from psycopg import errors, generators, pq

from workcenter.projections.sql import PortableCursor

_EXEC: Final = pq.ExecStatus
_UNESCAPE: Final = pq.Escaping().unescape_bytea
# SQLSTATE of "prepared statement ... does not exist".
_NOT_PREPARED: Final = "26000"

# Type oids of what ``encode`` sends (PostgreSQL's catalogue, stable across versions).
_BOOL, _BYTEA, _INT8, _FLOAT8, _TEXT, _UUID = 16, 17, 20, 701, 25, 2950
_ARRAY_OF: Final = {_BYTEA: 1001, _INT8: 1016, _TEXT: 1009, _UUID: 2951}
_TEXT_FORMAT, _BINARY_FORMAT = 0, 1
_INT4: Final = struct.Struct("!i")
_INT8_BYTES: Final = struct.Struct("!q")


class Unencodable(TypeError):
    """A parameter of a type the wire write does not send: write with psycopg's cursors."""


Encoded = tuple[bytes | None, int, int]  # value, type oid, format


def _element(value: Any) -> tuple[int, bytes]:
    if isinstance(value, UUID):
        return _UUID, value.bytes
    if isinstance(value, bool):
        raise Unencodable("a list of booleans")
    if isinstance(value, int):
        if not -(2**63) <= value < 2**63:
            raise Unencodable("a list of ints past bigint")
        return _INT8, _INT8_BYTES.pack(value)
    if isinstance(value, str):
        return _TEXT, _text(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return _BYTEA, bytes(value)
    raise Unencodable(f"a list of {type(value).__name__}")


def _text(value: str) -> bytes:
    """A str's bytes; one holding a NUL is psycopg's to refuse (``DataError``): libpq
    would send a text parameter up to its first NUL, the rest lost without a word. So is
    one that UTF-8 cannot encode (a lone surrogate): psycopg says so as it always did."""
    if "\x00" in value:
        raise Unencodable("text holding a NUL")
    try:
        return value.encode()
    except UnicodeEncodeError:
        raise Unencodable("text that UTF-8 cannot encode") from None


def _array(values: Sequence[Any]) -> Encoded:
    """A one-dimensional array in PostgreSQL's binary format; an empty one as text, its
    type left to the server (no element to name it by)."""
    if not values:
        return b"{}", 0, _TEXT_FORMAT
    oid = None
    parts = []
    for value in values:
        if value is None:
            parts.append(_INT4.pack(-1))
            continue
        element_oid, data = _element(value)
        if oid is None:
            oid = element_oid
        elif oid != element_oid:
            raise Unencodable("a list of mixed types")
        parts.append(_INT4.pack(len(data)) + data)
    if oid is None:
        raise Unencodable("a list of nulls")
    has_null = int(any(v is None for v in values))
    header = struct.pack("!iiiii", 1, has_null, oid, len(values), 1)
    return header + b"".join(parts), _ARRAY_OF[oid], _BINARY_FORMAT


def _integer(value: int) -> Encoded:
    """An int typed by its size, as psycopg types it: the server then resolves functions
    and operators as it does for psycopg's (``pg_try_advisory_lock(int, int)``)."""
    if -(2**15) <= value < 2**15:
        oid = 21  # int2
    elif -(2**31) <= value < 2**31:
        oid = 23  # int4
    elif -(2**63) <= value < 2**63:
        oid = _INT8
    else:
        oid = 1700  # numeric
    return str(value).encode(), oid, _TEXT_FORMAT


def encode(value: Any) -> Encoded:
    """A parameter as psycopg would send it: str as "unknown" (the server infers its
    type from the statement), the rest typed. A subclass (a str enum's member, say) is
    sent as its nearest base that is sent, as psycopg adapts it; bool before int."""
    for kind in type(value).__mro__:
        by_type = _BY_TYPE.get(kind)
        if by_type is not None:
            return by_type(value)
    raise Unencodable(type(value).__name__)


def _as_bytes(value: bytes | bytearray | memoryview) -> Encoded:
    return bytes(value), _BYTEA, _BINARY_FORMAT


# What each type is sent as, found by the value's exact type first (one lookup).
_BY_TYPE: Final[dict[type, Callable[[Any], Encoded]]] = {
    type(None): lambda _: (None, 0, _TEXT_FORMAT),
    str: lambda v: (_text(v), 0, _TEXT_FORMAT),
    bool: lambda v: ((b"t" if v else b"f"), _BOOL, _TEXT_FORMAT),
    int: _integer,
    float: lambda v: (repr(v).encode(), _FLOAT8, _TEXT_FORMAT),
    UUID: lambda v: (v.bytes, _UUID, _BINARY_FORMAT),
    bytes: _as_bytes,
    bytearray: _as_bytes,
    memoryview: _as_bytes,
    list: _array,
    tuple: _array,
}

_PLACEHOLDER: Final = re.compile(r"%.?", re.DOTALL)


@functools.lru_cache(maxsize=512)
def _numbered(query: str) -> bytes:
    """psycopg's ``%s`` placeholders as ``$1``, ``$2``, ... (``%%`` is a percent sign);
    any other (``%b``, ``%t``, ``%(name)s``) is psycopg's to send."""
    count = 0

    def number(match: re.Match[str]) -> str:
        nonlocal count
        if match.group() == "%%":
            return "%"
        if match.group() != "%s":
            raise Unencodable(f"the placeholder {match.group()!r}")
        count += 1
        return f"${count}"

    return _PLACEHOLDER.sub(number, query).encode()


def usable(conn: Any) -> bool:
    """Whether the wire may write on ``conn``: its text is sent in UTF-8, which must be
    the connection's client encoding (it is unless an operator set another)."""
    return bool(conn.info.encoding == "utf-8")


class _Column(NamedTuple):
    name: str


class _Statement:
    """One statement of a batch, and after the exchange its answer: the cursor a caller
    of ``execute`` holds. Its rows are dicts by column name, or made by ``row_factory``
    (set by ``sql.PortableCursor``) as psycopg's cursor makes them."""

    def __init__(self, owner: Batch | ReadExchange) -> None:
        self._owner = owner
        self.row_factory: Any = None
        self.result: pq.abc.PGresult | None = None
        # The connection that answered: psycopg's loaders of the types the wire has none for.
        self.context: Any = None
        self._next_row = 0

    def execute(self, query: Any, params: Sequence[Any] | None = None, **_: Any) -> _Statement:
        if not isinstance(query, str):
            raise Unencodable("a composed query")
        self.result = None
        self._next_row = 0
        self._owner.add(self, query, params)
        return self

    @property
    def description(self) -> list[_Column]:
        result = self._answer()
        return [_Column((result.fname(i) or b"").decode()) for i in range(result.nfields)]

    def fetchone(self) -> Any:
        """The answer's next row, None after the last."""
        rows = self._rows(self._next_row, self._next_row + 1)
        return rows[0] if rows else None

    def fetchall(self) -> list[Any]:
        """The answer's rows not fetched yet."""
        return self._rows(self._next_row, None)

    def _answer(self) -> pq.abc.PGresult:
        if self.result is None:
            self._owner.answer(self)
        assert self.result is not None
        return self.result

    def _rows(self, first: int, end: int | None) -> list[Any]:
        result = self._answer()
        columns = range(result.nfields)
        loaders = [_loader(result.ftype(i), self.context) for i in columns]
        end = result.ntuples if end is None else min(end, result.ntuples)
        self._next_row = max(first, end)
        make: Callable[[list[Any]], Any] = (
            self.row_factory(self)
            if self.row_factory is not None
            else functools.partial(_by_name, [column.name for column in self.description])
        )
        return [
            make(
                [
                    None if (value := result.get_value(row, i)) is None else loaders[i](value)
                    for i in columns
                ]
            )
            for row in range(first, end)
        ]


def _by_name(names: list[str], values: list[Any]) -> dict[str, Any]:
    return dict(zip(names, values, strict=True))


# The types a write's answers and the reads sent on the wire hold, loaded from text as
# psycopg loads them (an id as a UUID, bytea as bytes).
_LOADERS: Final[dict[int, Callable[[bytes], Any]]] = {
    _BOOL: lambda v: v == b"t",
    # Hex, the server's default output; "escape" (an operator's bytea_output) by libpq.
    _BYTEA: lambda v: binascii.unhexlify(v[2:]) if v[:2] == b"\\x" else _UNESCAPE(v),
    _INT8: int,
    21: int,  # int2
    23: int,  # int4
    _TEXT: bytes.decode,
    1043: bytes.decode,  # varchar
    _UUID: lambda v: UUID(v.decode()),
    _FLOAT8: float,
    _ARRAY_OF[_INT8]: lambda v: [
        None if part == b"NULL" else int(part) for part in v[1:-1].split(b",") if part
    ],
}


def _loader(oid: int, context: Any) -> Callable[[bytes], Any]:
    """The wire's loader of a column type, else psycopg's (a type the hot path's
    statements do not return is read as psycopg reads it, only not as fast)."""
    loader = _LOADERS.get(oid)
    if loader is not None:
        return loader
    adapters = context.adapters
    found = adapters.get_loader(oid, pq.Format.TEXT) or adapters.get_loader(0, pq.Format.TEXT)
    return found(oid, context).load


# Each connection's prepared statements: query and parameter types -> name. Keyed by the
# libpq connection: a connection the pool replaces starts empty. Names are never used
# twice in a process: a statement forgotten here may still be prepared on the server.
_PREPARED: weakref.WeakKeyDictionary[Any, dict[tuple[bytes, tuple[int, ...]], bytes]] = (
    weakref.WeakKeyDictionary()
)
_NAMES: Final = itertools.count()


class Batch:
    """Stands in for a psycopg connection while a write's statements are collected."""

    def __init__(self) -> None:
        self.statements: list[tuple[_Statement, bytes, list[Encoded]]] = []

    def cursor(self) -> _Statement:
        return _Statement(self)

    def add(self, statement: _Statement, query: str, params: Sequence[Any] | None) -> None:
        """Take a statement; without parameters its text is sent as it is (a ``%`` in it
        is not a placeholder), as psycopg sends it."""
        if params is None:
            self.statements.append((statement, query.encode(), []))
            return
        self.statements.append((statement, _numbered(query), [encode(p) for p in params]))

    def answer(self, statement: _Statement) -> None:
        raise RuntimeError("a batch's answers are read after it was sent")


class ReadExchange:
    """A claim's reads on the wire (``sql.claim_reads``', ADR-0104):
    each ``sync`` sends those executed since the last, one round trip; a statement whose
    answer is asked for before its sync is sent then, as psycopg's pipeline does."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn
        self._batch = Batch()

    def cursor(self) -> PortableCursor:
        return PortableCursor(_Statement(self))

    def add(self, statement: _Statement, query: str, params: Sequence[Any] | None) -> None:
        try:
            self._batch.add(statement, query, params)
        except Unencodable:
            # Sent by psycopg's cursor, on the same connection, after what went before.
            self.sync()
            cursor = self._conn.cursor()
            cursor.execute(query, params)
            statement.result = cursor.pgresult
            statement.context = self._conn
            # psycopg may have dropped every prepared statement first (DEALLOCATE ALL):
            # the next batch prepares its own again.
            _PREPARED.pop(self._conn.pgconn, None)

    def answer(self, statement: _Statement) -> None:
        self.sync()
        if statement.result is None:
            raise RuntimeError("the statement was not executed")

    def sync(self) -> None:
        batch, self._batch = self._batch, Batch()
        if batch.statements:
            send(self._conn, batch)


def send(conn: Any, batch: Batch) -> None:
    """Send ``batch`` on ``conn`` in one exchange and give each statement its answer;
    raise the first failed statement's error (psycopg's class for its SQLSTATE). A
    statement prepared before but dropped since is prepared again, once, if the batch
    is a transaction of its own (sent on an idle connection): one sent inside a
    transaction cannot be sent again without what went before it."""
    idle = conn.pgconn.transaction_status == pq.TransactionStatus.IDLE
    try:
        _send_once(conn, batch)
    except errors.Error as error:
        if error.sqlstate != _NOT_PREPARED or not idle:
            raise
        _PREPARED.pop(conn.pgconn, None)
        _roll_back(conn)
        _send_once(conn, batch)


def _roll_back(conn: Any) -> None:
    if conn.pgconn.transaction_status == pq.TransactionStatus.INERROR:
        conn.pgconn.send_query(b"ROLLBACK")
        conn.wait(generators.execute(conn.pgconn))


def _send_once(conn: Any, batch: Batch) -> None:
    pgconn = conn.pgconn
    prepared = _PREPARED.setdefault(pgconn, {})
    # Whose answer each answer is, in order: a Parse's (None) or a statement's.
    answering: list[_Statement | None] = []
    # The Parses sent with this batch: the index of each one's answer, and its key.
    parses: list[tuple[int, tuple[bytes, tuple[int, ...]]]] = []
    pgconn.enter_pipeline_mode()
    try:
        for statement, query, params in batch.statements:
            oids = tuple(oid for _, oid, _ in params)
            name = prepared.get((query, oids))
            if name is None:
                name = f"wc_{next(_NAMES)}".encode()
                pgconn.send_prepare(name, query, param_types=oids)
                prepared[(query, oids)] = name
                parses.append((len(answering), (query, oids)))
                answering.append(None)
            answering.append(statement)
            pgconn.send_query_prepared(
                name,
                [value for value, _, _ in params],
                param_formats=[form for _, _, form in params],
            )
        pgconn.pipeline_sync()
        answers = conn.wait(_exchange(pgconn))
    except BaseException:
        # The names sent with this batch may not have been prepared: forget them all.
        _PREPARED.pop(pgconn, None)
        raise
    finally:
        if pgconn.pipeline_status != pq.PipelineStatus.OFF:
            try:
                pgconn.exit_pipeline_mode()
            except errors.Error:
                # Answers still unread (the exchange was interrupted) or a broken
                # connection: closed, the pool discards it rather than lend it half-read.
                conn.close()
    failed = [a for a in answers if a.status == _EXEC.FATAL_ERROR]
    if failed:
        error = errors.error_from_result(failed[0], encoding=conn.info.encoding)
        if error.sqlstate == _NOT_PREPARED:
            _PREPARED.pop(pgconn, None)  # dropped under the wire: every name is stale
        else:
            # A statement prepared stays prepared through the rollback (the server holds
            # it for the connection's life): only the Parses not answered are forgotten.
            for index, key in parses:
                if answers[index].status != _EXEC.COMMAND_OK:
                    prepared.pop(key, None)
        raise error
    for answerer, answer in zip(answering, answers, strict=True):
        if answerer is not None:
            answerer.result = answer
            answerer.context = conn


def _exchange(pgconn: Any) -> Generator[Any, Any, list[Any]]:
    """Flush what was sent, then take every answer up to the sync's."""
    yield from generators.send(pgconn)
    answers: list[Any] = []
    while True:
        results = yield from generators.fetch_many(pgconn)
        for result in results:
            if result.status == _EXEC.PIPELINE_SYNC:
                return answers
            answers.append(result)
