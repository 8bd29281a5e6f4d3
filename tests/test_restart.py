"""Workers survive their database (issue 18, ADR-0056).

**Restart**: a private PostgreSQL (``private_postgres.py``; the shared test server is
never restarted) is restarted while 4 worker processes run the library's worker
loop. Each worker logs one line about the lost database, retries with backoff and
goes on; every Action ends completed, no event a worker saw accepted is lost, no
Run is finished twice, the hash chain verifies and the views equal a rebuild.

**A connection dropped under a write** is ``StoreDisconnected`` (a typed
``WorkcenterError``), not a hang and not the library's bare error; nothing of the
command is stored, and the next command reconnects.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import UUID

import postgres
import psycopg
import pytest
from private_postgres import PrivateServer, private_server

from workcenter.adapters.postgres_connection import StoreDisconnected
from workcenter.application import WorkCenter
from workcenter.domain import action as act
from workcenter.domain.errors import WorkcenterError

ITEMS = 60
CRITERION = "It is done"
WORKERS = 4
WORKER = Path(__file__).with_name("loop_worker.py")
POOL = {"POSTGRES_POOL_SIZE": "2", "POSTGRES_MAX_OVERFLOW": "2"}
LOST_LINE = "lost the connection to the database"
BACK_LINE = "the database answers again"


def seed(store: str, items: int = ITEMS) -> list[UUID]:
    """Linear items of one stage each: their Action is claimable at once."""
    made = []
    with WorkCenter.open(store, boot_id="seeder") as wc:
        for n in range(items):
            item = wc.create_work_item(
                title=f"Restart item {n}",
                goal="Survive a restart",
                acceptance_criteria=[CRITERION],
                mode="linear",
                stages=("implement",),
                start=True,
            )
            made.append(item.id)
    return made


@pytest.fixture
def server() -> Iterator[PrivateServer]:
    with private_server() as running:
        yield running


def finished(records: list[list[Any]]) -> int:
    return sum(1 for r in records if r[1] == "finished")


def read_records(log: Path) -> list[list[Any]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def stop_when_ready(workers: list[subprocess.Popen[bytes]], log: Path) -> None:
    """SIGTERM to each worker once every one has said it catches it (within 60 s)."""
    deadline = time.monotonic() + 60
    while sum(1 for r in read_records(log) if r[1] == "ready") < len(workers):
        assert time.monotonic() < deadline, "a worker never came to catch its stop"
        time.sleep(0.1)
    for w in workers:
        w.send_signal(signal.SIGTERM)


def all_completed(wc: WorkCenter, items: list[UUID]) -> bool:
    return all(wc.work_item(i).status == "done" for i in items)


def test_four_workers_survive_a_postgresql_restart(server: PrivateServer, tmp_path: Path) -> None:
    items = seed(server.url)
    log = tmp_path / "workers.jsonl"
    env = os.environ | POOL
    workers = [
        subprocess.Popen(
            [sys.executable, str(WORKER), server.url, f"w{k}", str(log), "0.05", "3"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=open(tmp_path / f"w{k}.err", "wb"),  # noqa: SIM115
        )
        for k in range(WORKERS)
    ]
    try:
        deadline = time.monotonic() + 60
        while finished(read_records(log)) < ITEMS // 4:
            assert time.monotonic() < deadline, "the workers did not start"
            assert all(w.poll() is None for w in workers)
            time.sleep(0.05)
        before = finished(read_records(log))
        server.restart()
        with WorkCenter.open(server.url, boot_id="controller", create=False) as wc:
            deadline = time.monotonic() + 120
            while not all_completed(wc, items):
                assert time.monotonic() < deadline, "the workers did not finish after the restart"
                assert all(w.poll() is None for w in workers), "a worker died"
                time.sleep(0.2)
            stop_when_ready(workers, log)
            stats = [json.loads(w.communicate(timeout=30)[0]) for w in workers]
            assert [w.returncode for w in workers] == [0] * WORKERS
            records = read_records(log)
            # The workers went on after the restart.
            assert finished(records) > before
            check_no_loss(wc, items, records)
            assert wc.maintenance.verify_history().ok
            views_equal_a_rebuild(wc)
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
                w.wait()
    errs = [(tmp_path / f"w{k}.err").read_text() for k in range(WORKERS)]
    # Each worker said once that it lost the database and once that it answers again
    # (found by acceptance testing: nothing said it was back, ADR-0137), and nothing else
    # (no traceback) but the Runs it recovered, one line each (a lease that lapsed while
    # its worker waited for the database, ADR-0142).
    for err in errs:
        lines = [line for line in err.splitlines() if "workcenter.leases" not in line]
        assert len(lines) == 2 and LOST_LINE in lines[0] and BACK_LINE in lines[1], errs
    assert sum(s["claimed"] for s in stats) >= ITEMS


def check_no_loss(wc: WorkCenter, items: list[UUID], records: list[list[Any]]) -> None:
    """Every finish a worker saw accepted is stored with its outcome; no Run is finished
    twice; every Action completed once; no stream has a gap."""
    runs: dict[str, act.Run] = {}
    for item_id in items:
        for entry in wc.work_item(item_id).plan:
            action = wc.action(entry.action_id)
            assert action.status == "completed"
            assert sum(1 for r in action.runs if r.status == "completed") == 1
            history = wc.action_history(action.id)
            versions = [e.originator_version for e in history]
            assert versions == list(range(1, len(versions) + 1))
            ended = Counter(e.run_id for e in history if isinstance(e, act.RunFinished))
            assert all(n == 1 for n in ended.values()), ended
            runs |= {str(r.id): r for r in action.runs}
    seen = [r[2] for r in records if r[1] == "finished"]
    assert len(seen) == len(set(seen))
    for run_id in seen:
        assert runs[run_id].status == "completed"


def views_equal_a_rebuild(wc: WorkCenter) -> None:
    live = {name: view.dump() for name, view in wc.projections.views.items()}
    wc.maintenance.rebuild_projection()
    assert {name: view.dump() for name, view in wc.projections.views.items()} == live


# --- a connection dropped under a write --------------------------------------------


@pytest.fixture
def pg_url() -> Iterator[str]:
    with postgres.fresh_schema("wcdrop") as url:
        yield url


def test_a_connection_dropped_under_a_write_is_a_typed_error(pg_url: str) -> None:
    """The command's write waits for the events table (another session holds it); that
    session then ends the command's connection, as a server going down would."""
    [item_id] = seed(pg_url, items=1)
    schema = pg_url.rsplit("=", 1)[1]
    with WorkCenter.open(pg_url, boot_id="dropped", create=False) as wc:
        before = wc.event_count()
        with psycopg.connect(
            host=postgres.HOST, port=postgres.PORT, user=postgres.USER, dbname=postgres.DBNAME
        ) as blocker:
            blocker.execute(f'LOCK TABLE "{schema}".workcenter_events IN ACCESS EXCLUSIVE MODE')
            outcome: list[BaseException | object] = []

            def claim() -> None:
                try:
                    outcome.append(wc.claim_next("w1"))
                except BaseException as error:
                    outcome.append(error)

            thread = threading.Thread(target=claim)
            thread.start()
            # The recorder tries a lost write again a few times: each try is ended too.
            deadline = time.monotonic() + 30
            while thread.is_alive():
                assert time.monotonic() < deadline, "the command hung"
                waiting = blocked(blocker)
                if waiting is not None:
                    blocker.execute("SELECT pg_terminate_backend(%s)", (waiting,))
                time.sleep(0.02)
            blocker.rollback()
        [error] = outcome
        assert isinstance(error, StoreDisconnected) and isinstance(error, WorkcenterError)
        assert wc.event_count() == before
        claim_after = wc.claim_next("w1")
        assert claim_after is not None and claim_after.work_item_id == item_id


def blocked(blocker: psycopg.Connection[Any]) -> int | None:
    """The backend waiting for the blocker's lock, if one is."""
    row = blocker.execute(
        "SELECT pid FROM pg_stat_activity WHERE pg_backend_pid() = ANY(pg_blocking_pids(pid))"
    ).fetchone()
    return None if row is None else int(row[0])
