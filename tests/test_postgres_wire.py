"""A one-exchange write sent on libpq's pipeline past psycopg's cursors (ADR-0104).

What the wire sends must be what psycopg would have sent (each parameter type, as the
server reads it back), its failures psycopg's errors, and a connection it used must be
fit for the next user: prepared statements the server dropped are prepared again, an
interrupted exchange closes its connection, a failed statement leaves it usable.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import postgres
import psycopg
import pytest
from conftest import create_linear, report
from eventsourcing.persistence import DataError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_read_ahead import assert_views_equal_a_rebuild

from workcenter.adapters import postgres_wire
from workcenter.application import WorkCenter
from workcenter.projections import sql

COLUMNS = "u uuid, i bigint, f float8, t text, b bytea, flag bool, n text"
ARRAYS = "ua uuid[], ia bigint[], ta text[], ba bytea[]"


@pytest.fixture
def backend() -> str:
    postgres.require_server()
    return "postgresql"


@pytest.fixture
def conn() -> Iterator[Any]:
    postgres.require_server()
    with postgres.connect() as connection:
        connection.execute(f"CREATE TEMP TABLE wire ({COLUMNS}, {ARRAYS})")
        connection.execute("CREATE TEMP TABLE keyed (k int PRIMARY KEY)")
        yield connection


def sent(conn: Any, *statements: tuple[str, tuple[Any, ...]]) -> list[Any]:
    """Send the statements as one batch; the cursors holding their answers."""
    batch = postgres_wire.Batch()
    cursors = [batch.cursor().execute(query, params) for query, params in statements]
    postgres_wire.send(conn, batch)
    return cursors


# No NUL: PostgreSQL's text cannot hold one (the stores replace it before, ADR-0089); no
# lone surrogate: UTF-8 cannot encode one (both left to psycopg, below).
TEXT = st.text(st.characters(exclude_characters="\x00", exclude_categories=["Cs"]), max_size=40)
INT8 = st.integers(-(2**63), 2**63 - 1)
FLOAT = st.floats(allow_nan=False)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    u=st.uuids(),
    i=INT8,
    f=FLOAT,
    t=TEXT,
    b=st.binary(max_size=64),
    flag=st.booleans(),
    ua=st.lists(st.uuids(), max_size=4),
    ia=st.lists(INT8, max_size=4),
    ta=st.lists(st.none() | TEXT, max_size=4).filter(lambda xs: any(x is not None for x in xs)),
    ba=st.lists(st.binary(max_size=24), min_size=1, max_size=4),
)
def test_each_parameter_reaches_the_server_as_it_was(
    conn: Any,
    u: uuid.UUID,
    i: int,
    f: float,
    t: str,
    b: bytes,
    flag: bool,
    ua: list[uuid.UUID],
    ia: list[int],
    ta: list[str | None],
    ba: list[bytes],
) -> None:
    conn.execute("DELETE FROM wire")
    row = (u, i, f, t, b, flag, None, ua, ia, ta, ba)
    sent(conn, (f"INSERT INTO wire VALUES ({', '.join(['%s'] * len(row))})", row))
    stored = conn.execute("SELECT * FROM wire").fetchone()
    assert stored == row


def test_the_answers_are_read_as_a_write_reads_them(conn: Any) -> None:
    call, clock, empty = sent(
        conn,
        ("SELECT ARRAY[1, 2, 9007199254740993]::bigint[] AS ids, 1.5::float8 AS started", ()),
        ("SELECT extract(epoch FROM clock_timestamp()) AS t, 'x' AS s, 7::bigint AS n", ()),
        ("SELECT 1 AS one WHERE false", ()),
    )
    assert call.fetchone() == {"ids": [1, 2, 9007199254740993], "started": 1.5}
    answer = clock.fetchone()
    assert isinstance(answer["t"], Decimal) and answer["s"] == "x" and answer["n"] == 7
    assert empty.fetchone() is None


def test_what_the_wire_does_not_send_is_refused_before_anything_is_sent() -> None:
    for value in (datetime.datetime.now(), [True], [1, "a"], [None], {"a": 1}):
        with pytest.raises(postgres_wire.Unencodable):
            postgres_wire.Batch().cursor().execute("SELECT %s", (value,))
    for query in ("SELECT %(a)s", "SELECT %b", "SELECT %t", "SELECT 5 % 2"):
        with pytest.raises(postgres_wire.Unencodable):
            postgres_wire.Batch().cursor().execute(query, (1,))
    # A percent sign doubled is one, as psycopg reads it.
    batch = postgres_wire.Batch()
    batch.cursor().execute("SELECT '%%', %s", (1,))
    assert batch.statements[0][1] == b"SELECT '%', $1"


def test_a_connection_whose_client_encoding_is_not_utf8_is_written_by_psycopg(
    conn: Any,
) -> None:
    assert postgres_wire.usable(conn)
    conn.execute("SET client_encoding TO 'LATIN1'")
    assert not postgres_wire.usable(conn)


def test_statements_the_server_dropped_are_prepared_again(conn: Any) -> None:
    for n in range(3):
        (answer,) = sent(conn, ("SELECT %s::bigint + 1 AS n", (n,)))
        assert answer.fetchone() == {"n": n + 1}
    conn.execute("DEALLOCATE ALL")  # as psycopg does after a ROLLBACK it ran
    (answer,) = sent(conn, ("SELECT %s::bigint + 1 AS n", (41,)))
    assert answer.fetchone() == {"n": 42}
    conn.execute("SELECT 1")  # the connection is still in step with psycopg


def test_a_failed_statement_raises_its_own_error_and_leaves_the_connection_usable(
    conn: Any,
) -> None:
    sent(conn, ("INSERT INTO keyed VALUES (%s)", (1,)))
    with pytest.raises(psycopg.errors.UniqueViolation):
        sent(
            conn,
            ("BEGIN", ()),
            ("INSERT INTO keyed VALUES (%s)", (2,)),
            ("INSERT INTO keyed VALUES (%s)", (1,)),
            ("INSERT INTO keyed VALUES (%s)", (3,)),
            ("COMMIT", ()),
        )
    sql.roll_back(conn)  # as the recorder does
    assert [k for (k,) in conn.execute("SELECT k FROM keyed ORDER BY k")] == [1]
    (answer,) = sent(conn, ("SELECT count(*)::bigint AS n FROM keyed", ()))
    assert answer.fetchone() == {"n": 1}


def test_an_interrupted_exchange_closes_its_connection(
    conn: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    def interrupted(pgconn: Any) -> Iterator[Any]:
        raise KeyboardInterrupt
        yield

    monkeypatch.setattr(postgres_wire, "_exchange", interrupted)
    with pytest.raises(KeyboardInterrupt):
        sent(conn, ("SELECT 1", ()))
    # Its answers unread, it would not be fit for psycopg: the pool discards it.
    assert conn.closed


@pytest.fixture
def wire_sends(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The statements of each write (a batch that calls ``wc_write_events``) sent on the
    wire."""
    sends: list[int] = []
    send = postgres_wire.send

    def spy(conn: Any, batch: postgres_wire.Batch) -> None:
        if any(b".wc_write_events(" in query for _, query, _ in batch.statements):
            sends.append(len(batch.statements))
        send(conn, batch)

    monkeypatch.setattr(postgres_wire, "send", spy)
    return sends


def test_a_run_cycle_writes_by_the_wire(wc: WorkCenter, wire_sends: list[int]) -> None:
    item = create_linear(wc, stages=("implement",))
    claimed = wc.claim_next("worker-1")
    assert claimed is not None
    wc.renew_lease(claimed)
    wc.finish_run(claimed, report())
    assert len(wire_sends) == 4, wire_sends  # the create, the claim, the renewal, the finish
    assert wc.detail(item.id)["status"] == "done"  # type: ignore[index]
    assert wc.maintenance.verify_history().ok
    assert_views_equal_a_rebuild(wc)


def test_a_write_the_wire_cannot_send_goes_by_psycopg(
    wc: WorkCenter, wire_sends: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    def unencodable(value: Any) -> Any:
        raise postgres_wire.Unencodable("for this test")

    monkeypatch.setattr(postgres_wire, "encode", unencodable)
    item = create_linear(wc, stages=("implement",))
    claimed = wc.claim_next("worker-1")
    assert claimed is not None
    wc.finish_run(claimed, report())
    assert wire_sends == []
    assert wc.detail(item.id)["status"] == "done"  # type: ignore[index]
    assert wc.maintenance.verify_history().ok
    assert_views_equal_a_rebuild(wc)


def test_streams_read_on_the_wire_are_those_psycopg_reads(wc: WorkCenter) -> None:
    first, second = create_linear(wc, title="first"), create_linear(wc, title="second")
    claimed = wc.claim_next("worker-1")
    assert claimed is not None
    wc.finish_run(claimed, report())
    recorder: Any = wc.store.recorder
    after = [(first.id, 0), (second.id, 1), (claimed.action_id, 0), (uuid.uuid4(), 0)]
    on_the_wire = recorder.select_streams_after(after)
    recorder.wire = False
    assert on_the_wire == recorder.select_streams_after(after)
    assert [len(events) for events in on_the_wire][-1] == 0
    assert all(on_the_wire[:3])


def test_a_claims_reads_on_the_wire_send_at_their_syncs(wc: WorkCenter) -> None:
    datastore: Any = wc.store.recorder.datastore  # type: ignore[attr-defined]
    an_id = uuid.uuid4()
    with sql.claim_reads(datastore) as read:
        assert isinstance(read, postgres_wire.ReadExchange)
        first = read.cursor().execute("SELECT ? AS x, ?::uuid AS u", (1, an_id))
        series = read.cursor().execute("SELECT generate_series(1, 3) AS n")
        held = read.cursor().execute("SELECT pg_try_advisory_lock(?, ?) AS h", (7, 8))
        read.sync()
        row = first.fetchone()
        assert (row["x"], row[1]) == (1, an_id.hex)  # as psycopg's portable rows are
        assert first.fetchone() is None
        assert [n for (n,) in series.fetchall()] == [1, 2, 3]
        assert held.fetchone()[0] is True
        # Asked for before a sync: sent then.
        asked = read.cursor().execute("SELECT ? AS z", ("q",)).fetchone()
        assert asked[0] == "q"
        # A parameter the wire does not send: psycopg's cursor, on the same connection.
        stamp = datetime.datetime(2026, 1, 2, tzinfo=datetime.UTC)
        dated = read.cursor().execute("SELECT ?::text AS d", (stamp,))
        assert dated.fetchone()[0].startswith("2026-01-02")
        # No transaction is held between the exchanges (ADR-0105).
        conn = read._conn  # type: ignore[attr-defined]
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        assert not free_for_another_session(7, 8)
    # The holds taken are released at the end.
    assert free_for_another_session(7, 8)


@pytest.mark.parametrize("wire", [True, False])
def test_a_claims_reads_release_their_holds_however_they_end(
    wc: WorkCenter, monkeypatch: pytest.MonkeyPatch, wire: bool
) -> None:
    """A claim's holds are its session's advisory locks (ADR-0105): released when its
    reads end with a failed statement or an error of the caller's, on the wire or
    through psycopg's pipeline, and the connection is lent again in a good state."""
    datastore: Any = wc.store.recorder.datastore  # type: ignore[attr-defined]
    if not wire:
        monkeypatch.setattr(datastore, "read_exchange", None)
    with pytest.raises(DataError, match="division by zero"), sql.claim_reads(datastore) as read:
        read.cursor().execute("SELECT pg_try_advisory_lock(?, ?) AS h", (7, 9))
        read.sync()
        read.cursor().execute("SELECT 1 / 0 AS z")
        read.sync()
    assert free_for_another_session(7, 9)
    with pytest.raises(KeyError), sql.claim_reads(datastore) as read:
        read.cursor().execute("SELECT pg_try_advisory_lock(?, ?) AS h", (7, 9))
        read.sync()
        raise KeyError("the caller's")
    assert free_for_another_session(7, 9)
    with sql.claim_reads(datastore) as read:
        assert read.cursor().execute("SELECT ? AS n", (5,)).fetchone()[0] == 5


def free_for_another_session(*key: int) -> bool:
    """Whether another session can take advisory lock ``key`` (and gives it back)."""
    with postgres.connect() as other:
        (taken,) = other.execute("SELECT pg_try_advisory_lock(%s, %s)", key).fetchone()
        other.execute("SELECT pg_advisory_unlock_all()")
    return bool(taken)


def test_a_column_type_the_wire_has_no_loader_for_is_read_as_psycopg_reads_it(
    conn: Any,
) -> None:
    query = (
        "SELECT 1.50::numeric AS n, '{\"a\": [1, null]}'::jsonb AS j,"
        " '2026-01-02 03:04:05+00'::timestamptz AS t, ARRAY['x', NULL]::text[] AS a,"
        " '(1,2)'::point AS p, NULL::jsonb AS nothing"
    )
    read = postgres_wire.ReadExchange(conn)
    on_the_wire = read.cursor().execute(query).fetchone()
    by_psycopg = conn.execute(query).fetchone()
    assert list(on_the_wire) == list(by_psycopg)
    assert on_the_wire[0] == Decimal("1.50") and on_the_wire[1] == {"a": [1, None]}


def test_a_read_after_psycopg_dropped_every_prepared_statement_prepares_again(
    conn: Any,
) -> None:
    conn.execute("SELECT %s::int", (1,), prepare=True)
    conn._prepared.clear()  # as sql.roll_back does: dropped before psycopg's next statement
    read = postgres_wire.ReadExchange(conn)
    read.cursor().execute("BEGIN")
    assert read.cursor().execute("SELECT ? AS n", (1,)).fetchone()[0] == 1
    # psycopg's turn, in the transaction: it drops every prepared statement first.
    stamp = datetime.datetime(2026, 1, 2, tzinfo=datetime.UTC)
    read.cursor().execute("SELECT ?::text AS d", (stamp,))
    assert read.cursor().execute("SELECT ? AS n", (2,)).fetchone()[0] == 2
    read.cursor().execute("COMMIT")
    read.sync()
    assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


def server_prepared(conn: Any) -> int:
    (count,) = conn.execute("SELECT count(*) FROM pg_prepared_statements").fetchone()
    return int(count)


def test_a_failed_exchange_leaves_no_prepared_statement_behind_on_the_server(
    conn: Any,
) -> None:
    """A statement the server prepared before another failed stays prepared (a prepared
    statement outlives a rollback): the wire keeps its name and uses it again, rather than
    prepare it anew under another name for every failure, each copy held by the server
    for the connection's life (found by acceptance testing)."""
    statements = (
        ("SELECT %s::bigint AS a", (1,)),
        ("SELECT %s::bigint AS b", (2,)),
        ("INSERT INTO keyed VALUES (%s)", (1,)),
    )
    sent(conn, ("INSERT INTO keyed VALUES (%s)", (1,)))
    before = server_prepared(conn)
    for _ in range(20):
        with pytest.raises(psycopg.errors.UniqueViolation):
            sent(conn, *statements)
    assert server_prepared(conn) == before + 2
    (answer,) = sent(conn, ("SELECT %s::bigint AS a", (7,)))
    assert answer.fetchone() == {"a": 7}


def test_text_holding_a_nul_is_left_to_psycopg() -> None:
    """libpq reads a text parameter up to its first NUL: sent by the wire, "a\\x00b" would
    be stored as "a" without a word. psycopg refuses it (``DataError``). Text that UTF-8
    cannot encode (a lone surrogate, found by the test above) is psycopg's to refuse too,
    not a ``UnicodeEncodeError`` out of the wire."""
    for value in ("a\x00b", ["a", "b\x00"], "\ud800", ["a", "b\udfff"]):
        with pytest.raises(postgres_wire.Unencodable):
            postgres_wire.Batch().cursor().execute("SELECT %s", (value,))


def test_a_list_of_ints_past_bigint_is_left_to_psycopg() -> None:
    """Not a ``struct.error`` out of the write: psycopg sends it as numbers."""
    for value in ([2**63], [-(2**63) - 1], [1, 2**70]):
        with pytest.raises(postgres_wire.Unencodable):
            postgres_wire.Batch().cursor().execute("SELECT %s", (value,))


def test_a_bigint_array_with_nulls_is_read_as_psycopg_reads_it(conn: Any) -> None:
    (answer,) = sent(conn, ("SELECT ARRAY[1, NULL, 3]::bigint[] AS ids", ()))
    assert answer.fetchone() == {"ids": [1, None, 3]}


def test_a_statement_without_parameters_is_sent_as_it_is(conn: Any) -> None:
    batch = postgres_wire.Batch()
    percent = batch.cursor().execute("SELECT '5 %% 2' AS t")
    postgres_wire.send(conn, batch)
    assert percent.fetchone() == {"t": "5 %% 2"}  # as psycopg sends it without parameters
    assert conn.execute("SELECT '5 %% 2' AS t").fetchone() == ("5 %% 2",)


def test_bytes_are_read_in_either_output_format(conn: Any) -> None:
    for output in ("hex", "escape"):
        conn.execute(f"SET bytea_output = {output}")
        (answer,) = sent(conn, ("SELECT %s::bytea AS b", (b"\x00\\'\xff ok",)))
        assert answer.fetchone() == {"b": b"\x00\\'\xff ok"}, output
