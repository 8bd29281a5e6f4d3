"""The hash chain's properties (issue 12, ADR-0028): any sequence of valid commands
leaves a chain that verifies, any single-byte change to any stored event breaks it
at that event, and two processes writing one store at once (a SQLite file, a
PostgreSQL schema) never fork it."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import postgres
import pytest
from conftest import BACKENDS, SHM, FakeClock, action_spec, create_dynamic, create_linear, plan
from conftest import report as run_report
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from workcenter.application import WorkCenter
from workcenter.domain.errors import WorkcenterError

COMMANDS = st.lists(
    st.sampled_from(["dynamic", "linear", "plan", "run", "renew", "extend", "cancel"]),
    min_size=1,
    max_size=12,
)


@contextmanager
def _fresh_db() -> Iterator[Path]:
    base = SHM if SHM.is_dir() and os.access(SHM, os.W_OK) else None
    with tempfile.TemporaryDirectory(dir=base, prefix="workcenter-chain-") as directory:
        yield Path(directory) / "chain.db"


def _apply(wc: WorkCenter, clock: FakeClock, command: str) -> None:
    """Run ``command`` on what the store holds; a command with nothing to act on is
    skipped, and one the state refuses raises a typed refusal."""
    items = [row["id"] for row in wc.list_work_items()]
    if command == "dynamic":
        create_dynamic(wc, title=f"item {len(items)}")
    elif command == "linear":
        create_linear(wc, title=f"linear {len(items)}")
    elif not items:
        return
    elif command == "plan":
        dynamic = [i for i in items if wc.work_item(i).mode == "dynamic"]
        if dynamic and wc.work_item(dynamic[-1]).status in ("ready", "running", "waiting"):
            plan(wc, dynamic[-1], action_spec(objective=f"step {wc.event_count()}"))
    elif command in ("run", "renew"):
        claimed = wc.claim_next("w1", lease_seconds=60)
        if claimed is not None:
            clock.advance(1)
            if command == "renew":
                wc.renew_lease(claimed)
            wc.finish_run(claimed, run_report("completed"))
    elif command == "extend":
        ledger = wc.ledger(items[0])
        wc.extend_budget(items[0], expected_version=ledger.version, additions={"max_requests": 1})
    elif command == "cancel":
        item = wc.work_item(items[-1])
        if item.status not in ("done", "cancelled"):
            wc.cancel(item.id, reason="no longer needed")


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(commands=COMMANDS, data=st.data())
def test_valid_commands_verify_and_any_changed_byte_breaks_at_its_event(
    commands: list[str], data: st.DataObject
) -> None:
    with _fresh_db() as db:
        clock = FakeClock()
        with WorkCenter.open(db, clock=clock, boot_id="b") as wc:
            for command in commands:
                # A command the state refuses writes nothing: the chain must not mind it.
                with contextlib.suppress(WorkcenterError):
                    _apply(wc, clock, command)
            verdict = wc.maintenance.verify_history()
            assert verdict.ok, verdict.broken
            assert verdict.events == wc.event_count()
            for item in wc.list_work_items():
                assert wc.maintenance.verify_history(item["id"]).ok
        assume(verdict.events > 0)
        con = sqlite3.connect(db)
        positions = [r[0] for r in con.execute("SELECT rowid FROM stored_events")]
        # Indexes drawn before the sizes are known: ids are random, so lengths vary by run.
        position = positions[data.draw(st.integers(0, 10**6), label="event") % len(positions)]
        oid, version, topic, state = con.execute(
            "SELECT originator_id, originator_version, topic, state FROM stored_events"
            " WHERE rowid = ?",
            (position,),
        ).fetchone()
        column = data.draw(st.sampled_from(["state", "topic", "originator_id", "version"]))
        flip = data.draw(st.integers(1, 255), label="xor")
        if column == "state":
            at = data.draw(st.integers(0, 10**6), label="byte") % len(state)
            value: object = state[:at] + bytes([state[at] ^ flip]) + state[at + 1 :]
        elif column in ("topic", "originator_id"):
            text = topic if column == "topic" else oid
            at = data.draw(st.integers(0, 10**6), label="char") % len(text)
            changed = chr((ord(text[at]) ^ flip) % 128 or 1)
            assume(changed != text[at])
            value = text[:at] + changed + text[at + 1 :]
        else:
            value = version + data.draw(st.sampled_from([-1, 1, 1000]))
        column = "originator_version" if column == "version" else column
        try:
            con.execute(f"UPDATE stored_events SET {column} = ? WHERE rowid = ?", (value, position))
            con.commit()
        except sqlite3.IntegrityError:
            assume(False)  # the change would collide with another event's key
        finally:
            con.close()
        with WorkCenter.open(db, clock=clock, boot_id="b") as wc:
            broken = wc.maintenance.verify_history().broken
        assert broken is not None, (column, position)
        assert broken.position == position, (column, broken)


WRITER = """
import sys, time
from pathlib import Path
from typing import Any
from workcenter.application import WorkCenter
from workcenter.domain.errors import WorkcenterError
db, name, go, count = sys.argv[1], sys.argv[2], Path(sys.argv[3]), int(sys.argv[4])
with WorkCenter.open(db, boot_id=name) as wc:
    Path(f"{go}.{name}").touch()
    while not go.exists():
        time.sleep(0.005)
    for n in range(count):
        item = wc.create_work_item(title=f"{name} {n}", goal="g", acceptance_criteria=["c"],
                                   delivery_target="response", start=True)
        wc.plan_actions(item.id, expected_version=item.version, actions=[{
            "type": "research", "objective": f"{name} {n}", "approach": "a",
            "expectedOutcome": "o", "workspaceMode": "read"}])
"""


@contextmanager
def _two_writer_store(backend: str, tmp_path: Path) -> Iterator[tuple[str, Any]]:
    """A store's location and a function running a query on it (``?`` parameters)."""
    if backend == "sqlite":
        db = str(tmp_path / "two.db")

        def query(sql: str) -> list[tuple[Any, ...]]:
            con = sqlite3.connect(db)
            try:
                return con.execute(sql.format(events="stored_events", pos="rowid")).fetchall()
            finally:
                con.close()

        yield db, query
        return
    import psycopg

    with postgres.fresh_schema("wcwriters") as url:
        schema = url.rpartition("schema=")[2]

        def query(sql: str) -> list[tuple[Any, ...]]:
            statement = sql.format(events="workcenter_events", pos="notification_id")
            with psycopg.connect(
                host=postgres.HOST, port=postgres.PORT, user=postgres.USER, dbname=postgres.DBNAME
            ) as conn:
                conn.execute(f'SET search_path TO "{schema}"')
                return conn.execute(statement).fetchall()

        yield url, query


@pytest.mark.parametrize("backend", BACKENDS)
def test_two_processes_writing_at_once_never_fork_the_chain(backend: str, tmp_path: Path) -> None:
    count = 15
    with _two_writer_store(backend, tmp_path) as (db, query):
        WorkCenter.open(db).close()
        go = tmp_path / "go"
        writers = [
            subprocess.Popen(
                [sys.executable, "-c", WRITER, db, name, str(go), str(count)],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
            )
            for name in ("p1", "p2")
        ]
        try:
            deadline = time.monotonic() + 30
            while not all((tmp_path / f"go.{n}").exists() for n in ("p1", "p2")):
                assert time.monotonic() < deadline, "writers did not start"
                assert all(w.poll() is None for w in writers), [w.communicate() for w in writers]
                time.sleep(0.01)
            go.touch()
            outputs = [w.communicate(timeout=90)[0] for w in writers]
        finally:
            for w in writers:
                if w.poll() is None:
                    w.kill()
                    w.wait()
        assert [w.returncode for w in writers] == [0, 0], outputs
        positions = [r[0] for r in query("SELECT {pos} FROM {events} ORDER BY {pos}")]
        links = [
            tuple(r) for r in query("SELECT position, previous FROM event_chain ORDER BY position")
        ]
        titles = [r[0] for r in query("SELECT title FROM wq_items")]
        # Both wrote, interleaved; every event has one link, to the event just before it
        # (on PostgreSQL not always position - 1: a rolled-back insert burns ids).
        assert sorted(t.split()[0] for t in titles) == ["p1"] * count + ["p2"] * count
        assert links == list(zip(positions, [0, *positions[:-1]], strict=True))
        with WorkCenter.open(db) as wc:
            verdict = wc.maintenance.verify_history()
        assert verdict.ok and verdict.events == len(positions)
