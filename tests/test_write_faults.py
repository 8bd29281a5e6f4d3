"""A writer killed at any point leaves the inline read models consistent (ADR-0016).

A writer process (this file run as a script) keeps saving commands of every kind,
renewing one lease often enough to cross the snapshot interval, until the test
kills it with SIGKILL at a random moment. After each kill the store is opened
*without* the inline catch-up (which would repair a view left behind and hide
the fault), and then: every view written in the commands' transactions is at
the head, and every view equals a rebuild from zero. The writer is restarted on
the same file between kills.
"""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from contextlib import suppress
from pathlib import Path
from typing import Any

from workcenter.application import WorkCenter
from workcenter.bootstrap import EAGER_VIEWS
from workcenter.domain.errors import WorkcenterError

KILLS = 6
SEED = 7
STARTUP_TIMEOUT = 30.0
CRITERIA = ["Answer is cited"]
REPORT: dict[str, Any] = {
    "outcome": "completed",
    "summary": "answered",
    "evidence": ["ran the query"],
    "acceptanceChecks": [{"criterion": c, "status": "passed", "evidence": "ok"} for c in CRITERIA],
}


def writer_main(db: str, seed: int) -> None:
    """Save commands until killed."""
    rng = random.Random(seed)
    with WorkCenter.open(db) as wc:
        serial = 0
        while True:
            serial += 1
            item = wc.create_work_item(
                title=f"item {seed}.{serial}",
                goal="answer the question",
                acceptance_criteria=CRITERIA,
                delivery_target="response",
                start=True,
            )
            specs = [
                {
                    "type": "research",
                    "objective": f"step {j}",
                    "approach": "a",
                    "expectedOutcome": "b",
                    "workspaceMode": "read",
                }
                for j in range(1 + rng.randrange(3))
            ]
            with suppress(WorkcenterError):
                wc.plan_actions(item.id, expected_version=item.version, actions=specs)
            claim = wc.claim_next(f"writer-{seed}")
            if claim is None:
                continue
            for _ in range(rng.choice((1, 2, 60))):  # 60: past the snapshot interval
                wc.renew_lease(claim)
            if rng.random() < 0.3:
                wc.interrupt(claim, reason="stop")
            else:
                wc.finish_run(claim, REPORT)
            if rng.random() < 0.2:
                wc.cancel(item.id, reason="enough")


def event_count(db: Path) -> int:
    if not db.exists():
        return 0
    con = sqlite3.connect(db, timeout=5)
    try:
        row = con.execute("SELECT MAX(rowid) FROM stored_events").fetchone()
    except sqlite3.OperationalError:
        return 0
    finally:
        con.close()
    return int(row[0] or 0)


def write_until_killed(db: Path, seed: int, delay: float) -> int:
    """Start a writer, let it get going, kill it ``delay`` seconds later; the events at the kill."""
    env = os.environ | {"PYTHONPATH": os.pathsep.join(sys.path)}
    writer = subprocess.Popen(
        [sys.executable, __file__, str(db), str(seed)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        start = event_count(db)
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while event_count(db) <= start:
            assert writer.poll() is None, writer.stderr.read().decode() if writer.stderr else ""
            assert time.monotonic() < deadline, "the writer never wrote"
            time.sleep(0.01)
        time.sleep(delay)
        assert writer.poll() is None, writer.stderr.read().decode() if writer.stderr else ""
    finally:
        writer.send_signal(signal.SIGKILL)
        writer.wait(timeout=10)
        if writer.stderr:
            writer.stderr.close()
    return event_count(db)


def dumps(wc: WorkCenter) -> dict[str, Any]:
    return {name: view.dump() for name, view in wc.projections.views.items()}  # type: ignore[attr-defined]


def test_a_writer_killed_at_random_points_leaves_views_equal_to_a_rebuild(tmp_path: Path) -> None:
    db = tmp_path / "workcenter.db"
    rng = random.Random(SEED)
    for kill in range(KILLS):
        events = write_until_killed(db, seed=kill, delay=rng.uniform(0.05, 0.6))
        # No catch-up on open: a view the killed writer left behind must show as lag.
        with WorkCenter.open(db, inline_projections=False) as wc:
            assert wc.event_count() >= events
            status = {s.name: s for s in wc.maintenance.projection_status()}
            assert {n: status[n].lag for n in EAGER_VIEWS} == dict.fromkeys(EAGER_VIEWS, 0)
            wc.projections.catch_up()  # the detail view, kept on read
            live = dumps(wc)
            wc.maintenance.rebuild_projection()
            assert dumps(wc) == live, f"kill {kill}: a view differs from its rebuild"


if __name__ == "__main__":
    writer_main(sys.argv[1], int(sys.argv[2]))
