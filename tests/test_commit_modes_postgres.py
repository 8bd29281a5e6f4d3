"""How a PostgreSQL command's write commits: ``on`` (the default), ``early-release``
(ADR-0088) and ``off`` (ADR-0053), set by ``WORKCENTER_POSTGRES_SYNCHRONOUS_COMMIT``.

``early-release`` commits the write without waiting for its WAL's flush, so the
event table's lock is released before the flush, and then waits for the flush in a
second, synchronous transaction of the same exchange: the command returns only once
its write is durable, with no round trip more.
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any
from uuid import UUID

import postgres
import pytest
from conftest import create_dynamic, create_linear
from private_postgres import private_server
from test_round_trips_postgres import CEILINGS

from workcenter.adapters import postgres_write, round_trips
from workcenter.adapters.persistence import StoreUnavailable
from workcenter.adapters.postgres_settings import SYNCHRONOUS_COMMIT_ENV
from workcenter.application import WorkCenter
from workcenter.domain.errors import InvalidInput, NotFound, WorkcenterError

SET_OFF = "SET LOCAL synchronous_commit = off"


@pytest.fixture
def backend() -> str:
    postgres.require_server()
    return "postgresql"


def texts(sent: list[tuple[Any, Any]]) -> list[str]:
    """The text of each statement ``postgres.statements`` saw."""
    return [str(query) for query, _ in sent]


def writes(sent: list[str]) -> list[list[str]]:
    """The statements of each write that sets its commit's mode: from its ``BEGIN`` to
    its flush's ``COMMIT``, or to its own when it has no flush."""
    found: list[list[str]] = []
    for i, statement in enumerate(sent):
        if statement == SET_OFF:
            end = i + 1
            while end < len(sent) and sent[end] != "COMMIT":
                end += 1
            if sent[end + 1 : end + 3] == list(postgres_write.FLUSH[:2]):
                end += 3
            found.append(sent[i - 1 : end + 1])
    return found


def test_the_mode_is_on_unless_set_and_refused_unless_known(
    location: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for value in ("sometimes", "early"):
        monkeypatch.setenv(SYNCHRONOUS_COMMIT_ENV, value)
        with pytest.raises(InvalidInput, match="on, early-release or off"):
            WorkCenter.open(location)
    for value, mode in (("", "on"), ("OFF", "off"), (" Early-Release ", "early-release")):
        monkeypatch.setenv(SYNCHRONOUS_COMMIT_ENV, value)
        with WorkCenter.open(location) as wc:
            assert wc.store.recorder.synchronous_commit == mode  # type: ignore[attr-defined]
    monkeypatch.delenv(SYNCHRONOUS_COMMIT_ENV)
    with WorkCenter.open(location) as wc:
        assert wc.store.recorder.synchronous_commit == "on"  # type: ignore[attr-defined]


def test_off_sets_each_write_and_waits_for_no_flush(
    location: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(SYNCHRONOUS_COMMIT_ENV, "off")
    with WorkCenter.open(location) as wc:
        with postgres.statements() as seen:
            create_dynamic(wc)
        sent = texts(seen)
        begins = [i for i, statement in enumerate(sent) if statement == "BEGIN"]
        assert begins
        assert all(sent[i + 1] == SET_OFF for i in begins)
        assert postgres_write.FLUSH[1] not in sent
        # No round trip more: the setting goes with the first exchange.
        assert round_trips.per_command(wc, rounds=1)["create"] == CEILINGS["create"]
        assert wc.maintenance.verify_history().ok


@pytest.mark.parametrize("one_exchange", [True, False], ids=["one-exchange", "two-exchange"])
def test_early_release_commits_then_waits_for_the_flush_in_the_same_exchange(
    location: str, monkeypatch: pytest.MonkeyPatch, one_exchange: bool
) -> None:
    monkeypatch.setenv(SYNCHRONOUS_COMMIT_ENV, "early-release")
    with WorkCenter.open(location) as wc:
        wc.store.recorder.one_exchange = one_exchange  # type: ignore[attr-defined]
        with postgres.statements() as seen:
            item = create_linear(wc)
            claimed = wc.claim_next("worker")
            assert claimed is not None
            assert wc.renew_lease(claimed)
        found = writes(texts(seen))
        assert len(found) == 3  # the create, the claim and the renewal
        for write in found:
            assert write[:2] == ["BEGIN", SET_OFF]
            assert any("wc_write_events" in s or "LOCK TABLE" in s for s in write)
            # The write's COMMIT, then at once the flush's transaction.
            assert write[-4:] == ["COMMIT", *postgres_write.FLUSH]
            assert write.count("COMMIT") == 2
        if one_exchange:
            counts = round_trips.per_command(wc, rounds=1)
            assert counts == CEILINGS
        assert wc.work_item(item.id).status == "running"
        assert wc.maintenance.verify_history().ok


@pytest.mark.parametrize("one_exchange", [True, False], ids=["one-exchange", "two-exchange"])
def test_a_hold_ends_at_the_commit_not_at_the_flush_after_it(
    location: str, monkeypatch: pytest.MonkeyPatch, one_exchange: bool
) -> None:
    """The hold a benchmark reads (``lock_holds``) is the table lock's: with early-release
    the flush after the commit is not in it, on either write path, however long the flush
    takes (here a third of a second more, against a hold of about a millisecond)."""
    monkeypatch.setenv(SYNCHRONOUS_COMMIT_ENV, "early-release")
    monkeypatch.setattr(postgres_write, "FLUSH", ("SELECT pg_sleep(0.3)", *postgres_write.FLUSH))
    with WorkCenter.open(location) as wc:
        recorder: Any = wc.store.recorder
        recorder.one_exchange = one_exchange
        recorder.lock_holds = holds = []
        took = time.monotonic()
        create_dynamic(wc)
        took = time.monotonic() - took
    assert took >= 0.3
    assert len(holds) == 1
    held, waited = holds[0]
    assert 0 < held < 0.3 and 0 <= waited < 0.3


# A transaction that takes an id but writes no WAL: its commit waits for no flush.
NO_WAL = ("BEGIN", "SELECT pg_current_xact_id()", "COMMIT")


def unflushed_after(conn: Any, table: str, flush: tuple[str, ...]) -> int:
    """Of 20 writes committed without waiting for their flush, each followed by the
    statements ``flush``: how many were not yet flushed after ``flush`` returned."""
    unflushed = 0
    for n in range(20):
        conn.execute("BEGIN")
        conn.execute(SET_OFF)
        conn.execute(f"INSERT INTO {table} VALUES (%s)", (n,))
        conn.execute("COMMIT")
        # The commit's record ends at or before the insert position read now.
        (committed,) = conn.execute("SELECT pg_current_wal_insert_lsn()").fetchone()
        for statement in flush:
            conn.execute(statement)
        (flushed,) = conn.execute("SELECT pg_current_wal_flush_lsn()").fetchone()
        unflushed += flushed < committed
    return unflushed


def test_the_flush_returns_once_the_commit_before_it_is_flushed() -> None:
    """What early-release relies on of PostgreSQL: a commit that does not wait for its
    flush returns before it (so the table lock is released before it), and FLUSH's
    commit returns only once the WAL up to it, that commit's included, is flushed,
    where a transaction writing no WAL does not wait."""
    postgres.require_server()
    with postgres.connect() as conn:
        table = f"wc_flush_probe_{uuid.uuid4().hex[:8]}"
        conn.execute(f"CREATE TABLE {table} (n int)")
        try:
            assert unflushed_after(conn, table, postgres_write.FLUSH) == 0
            # Most were not flushed yet: the server's WAL writer, which flushes what
            # commits left every 200 ms, rarely came first.
            assert unflushed_after(conn, table, ()) >= 10
            assert unflushed_after(conn, table, NO_WAL) >= 10
        finally:
            conn.execute(f"DROP TABLE {table}")


def test_a_server_that_refuses_the_flush_refuses_to_open_early_release(
    location: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with WorkCenter.open(location) as wc:
        create_dynamic(wc)
        before = wc.event_count()
    monkeypatch.setenv(SYNCHRONOUS_COMMIT_ENV, "early-release")
    monkeypatch.setattr(
        postgres_write, "FLUSH", ("BEGIN", "SELECT wc_no_such_function()", "COMMIT")
    )
    with pytest.raises(StoreUnavailable, match="early-release: the server refused its flush"):
        WorkCenter.open(location)
    monkeypatch.delenv(SYNCHRONOUS_COMMIT_ENV)
    with WorkCenter.open(location) as wc:
        assert wc.event_count() == before


# --- a server crash ------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["on", "early-release"])
def test_a_crashed_server_keeps_every_write_a_command_returned(
    mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Creates run back to back on a private server, which is then stopped as in a
    crash (``pg_ctl -m immediate``: its processes killed, what is in its WAL buffers
    lost): every create that returned is there after the restart, and the chain
    verifies. (With ``off`` the same run loses the last creates: ADR-0088.)"""
    monkeypatch.setenv(SYNCHRONOUS_COMMIT_ENV, mode)
    with private_server() as server:
        returned: list[UUID] = []
        stop = threading.Event()
        with WorkCenter.open(server.url, boot_id="crash") as wc:

            def create() -> None:
                while not stop.is_set():
                    try:
                        item = wc.create_work_item(
                            title=f"Crash item {len(returned)}",
                            goal="Outlive a crash",
                            acceptance_criteria=["It is kept"],
                        )
                    except WorkcenterError:
                        return  # the server is gone
                    returned.append(item.id)

            writer = threading.Thread(target=create)
            writer.start()
            deadline = time.monotonic() + 60
            while len(returned) < 100:
                assert time.monotonic() < deadline and writer.is_alive(), len(returned)
                time.sleep(0.01)
            server.stop()
            stop.set()
            # A create caught by the crash is tried again once the server is back (the
            # recorder's retries): what it then returns is as durable.
            server.start()
            writer.join(timeout=120)
            assert not writer.is_alive()
        with WorkCenter.open(server.url, boot_id="after", create=False) as wc:
            missing = []
            for item_id in returned:
                try:
                    wc.work_item(item_id)
                except NotFound:
                    missing.append(item_id)
            assert not missing, f"{len(missing)} of {len(returned)} returned creates lost"
            assert wc.maintenance.verify_history().ok
