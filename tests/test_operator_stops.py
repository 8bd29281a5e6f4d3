"""Ctrl-C and SIGTERM on the operator's long verbs (ADR-0100): `audit verify`, `audit
decisions --replay` and `projections rebuild` ended as click's "Aborted!" with status 1,
the status of a broken or differing history, or were killed by SIGTERM (a rebuild leaving
its temporary copy behind). They now exit 130 or 143 after one line saying what was left
undone. Each test fails on the code before the fix."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import action_spec, create_dynamic, plan

from workcenter.application import WorkCenter
from workcenter.service_layer.repository import SNAPSHOT_INTERVAL

ROOT = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-c", "from workcenter.adapters.cli import main; main()"]
SIGNALS = [(signal.SIGINT, 130), (signal.SIGTERM, 143)]

# The CLI, with one step of the verb's work slowed down: there it touches a file and
# waits a second, in which the test sends its signal. A handler that only records the
# signal lets the wait end; the verb must then stop at its next step.
SLOWED_CLI = """
import pathlib, sys, time
from workcenter.projections import lifecycle
from workcenter.service_layer.maintenance import Maintenance

FLAG, SLOW = pathlib.Path(sys.argv[1]), sys.argv[2]

def slowed(progress, when=lambda *args: True):
    def step(*args):
        if when(*args) and not FLAG.exists():
            FLAG.touch()
            for _ in range(20):
                time.sleep(0.05)
        if progress is not None:
            progress(*args)
    return step

if SLOW == "verify":
    verify = Maintenance.verify_history
    Maintenance.verify_history = lambda self, scope=None, *, anchor=None, progress=None: (
        verify(self, scope, anchor=anchor, progress=slowed(progress)))
elif SLOW == "fold":  # the snapshot check's first stream, after the walk
    from workcenter.service_layer.repository import Repository
    fold = Repository.folds_of_events
    def slowed_fold(self, *args):
        slowed(None)()
        return fold(self, *args)
    Repository.folds_of_events = slowed_fold
elif SLOW == "replay":
    replay = Maintenance.replay_decisions
    Maintenance.replay_decisions = lambda self, scope=None, *, rules=None, progress=None: (
        replay(self, scope, rules=rules, progress=slowed(progress)))
else:  # a rebuild, slowed in the view named
    rebuild = lifecycle.rebuild
    lifecycle.rebuild = lambda projections, recorder, mapper, name, progress, watch: rebuild(
        projections, recorder, mapper, name,
        slowed(progress, lambda view, *_: view == SLOW), watch)

from workcenter.adapters.cli import main
sys.argv = ["workcenter", *sys.argv[3:]]
main()
"""


@pytest.fixture
def store(db_path: Path) -> str:
    with WorkCenter.open(db_path) as wc:
        for _ in range(2):
            item = create_dynamic(wc)
            plan(wc, item.id, action_spec())
    return str(db_path)


def stopped(
    tmp_path: Path, slow: str, args: list[str], signum: int
) -> subprocess.CompletedProcess[str]:
    """Run the slowed CLI, send ``signum`` once it waits, and return how it ended."""
    flag = tmp_path / "waiting"
    temp = tmp_path / "tmp"
    temp.mkdir(exist_ok=True)
    process = subprocess.Popen(
        [sys.executable, "-c", SLOWED_CLI, str(flag), slow, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(temp)},
    )
    try:
        deadline = time.monotonic() + 60
        while not flag.exists():
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "the verb never reached its slowed step"
            time.sleep(0.02)
        process.send_signal(signum)
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


def one_line(done: subprocess.CompletedProcess[str], signum: int, status: int) -> str:
    assert done.returncode == status, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr and "Aborted" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"interrupted by {signal.Signals(signum).name}: "), lines
    return lines[0]


@pytest.mark.parametrize(("signum", "status"), SIGNALS)
def test_an_interrupted_verify_is_no_broken_history(
    store: str, tmp_path: Path, signum: int, status: int
) -> None:
    done = stopped(tmp_path, "verify", ["--db", store, "audit", "verify", "--json"], signum)
    line = one_line(done, signum, status)
    assert "audit verify stopped" in line and "neither verified nor found broken" in line
    assert done.stdout == ""  # no verdict for a script to read


@pytest.fixture
def snapshotted(db_path: Path) -> str:
    """A store with snapshots to check: two Actions' streams renewed past 50 events."""
    with WorkCenter.open(db_path) as wc:
        plan(wc, create_dynamic(wc).id, action_spec(), action_spec("test", "Run it"))
        for _ in range(2):
            claimed = wc.claim_next("w", lease_seconds=3_600)
            assert claimed is not None
            while wc.action(claimed.action_id).version < SNAPSHOT_INTERVAL:
                assert wc.renew_lease(claimed)
    return str(db_path)


@pytest.mark.parametrize(("signum", "status"), SIGNALS)
def test_a_verify_stopped_in_its_snapshot_check_says_the_events_were_verified(
    snapshotted: str, tmp_path: Path, signum: int, status: int
) -> None:
    """A stop after the walk said "stopped at position N of N", which read as a walk cut
    at its last page (ADR-0103's finding): it names the snapshot check now."""
    args = ["--db", snapshotted, "audit", "verify", "--json"]
    done = stopped(tmp_path, "fold", args, signum)
    line = one_line(done, signum, status)
    assert line.endswith(
        "audit verify stopped in its snapshot check, 1 of 2 snapshotted streams checked:"
        " every event was verified; the history is neither verified nor found broken"
    ), line
    assert done.stdout == ""  # no verdict for a script to read


def test_a_stop_in_the_snapshot_check_of_a_broken_history_still_says_it_is_broken(
    snapshotted: str, tmp_path: Path
) -> None:
    """The walk found a break before the check began: a stop during the check must not
    turn that verdict into "neither verified nor found broken"."""
    con = sqlite3.connect(snapshotted)
    with con:
        [(position, state)] = con.execute(
            "SELECT rowid, state FROM stored_events ORDER BY rowid LIMIT 1"
        )
        flipped = bytes([state[0] ^ 1]) + bytes(state[1:])
        con.execute("UPDATE stored_events SET state = ? WHERE rowid = ?", (flipped, position))
    con.close()
    done = stopped(tmp_path, "fold", ["--db", snapshotted, "audit", "verify"], signal.SIGINT)
    assert done.returncode == 1, (done.returncode, done.stdout, done.stderr)
    assert f"history of the store BROKEN at position {position} (digest)" in done.stdout
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(("signum", "status"), SIGNALS)
def test_an_interrupted_replay_is_no_difference(
    store: str, tmp_path: Path, signum: int, status: int
) -> None:
    args = ["--db", store, "audit", "decisions", "--replay"]
    line = one_line(stopped(tmp_path, "replay", args, signum), signum, status)
    assert "audit decisions --replay stopped after 1 of 2 items: no verdict" in line


@pytest.mark.parametrize(("signum", "status"), SIGNALS)
def test_an_interrupted_rebuild_says_which_views_it_rebuilt_and_removes_its_copy(
    store: str, tmp_path: Path, signum: int, status: int
) -> None:
    with WorkCenter.open(store) as wc:
        before = {row.name: row.position for row in wc.maintenance.projection_status()}
    done = stopped(tmp_path, "detail", ["--db", store, "projections", "rebuild"], signum)
    line = one_line(done, signum, status)
    assert line.endswith(
        "projections rebuild stopped: rebuilt work_queue, mailbox;"
        " not rebuilt (left as they were): detail"
    )
    assert "rebuilt work_queue: " in done.stdout and "rebuilt mailbox: " in done.stdout
    assert "rebuilt detail" not in done.stdout
    assert list((tmp_path / "tmp").iterdir()) == []  # its temporary copy went with it
    with WorkCenter.open(store) as wc:
        assert {row.name: row.position for row in wc.maintenance.projection_status()} == before
    # With --json the views rebuilt are on stdout too (it printed nothing, ADR-0140).
    args = ["--db", store, "projections", "rebuild", "--json"]
    (tmp_path / "json").mkdir()
    done = stopped(tmp_path / "json", "detail", args, signum)
    one_line(done, signum, status)
    assert [r["name"] for r in json.loads(done.stdout)] == ["work_queue", "mailbox"]


@pytest.mark.parametrize(("signum", "status"), SIGNALS)
def test_projections_run_json_is_json_lines_and_a_stop_exits_as_the_others_do(
    store: str, signum: int, status: int
) -> None:
    runner = subprocess.Popen(
        [*CLI, "--db", store, "projections", "run", "--report", "0.2", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert runner.stdout is not None
        first = runner.stdout.readline()  # a report: the runner follows the sequence
        runner.send_signal(signum)
        out, err = runner.communicate(timeout=60)
    finally:
        if runner.poll() is None:
            runner.kill()
    assert runner.returncode == status, err
    assert "Traceback" not in err
    lines = [json.loads(line) for line in (first + out).splitlines()]  # every line, whole
    assert all(isinstance(line, dict) for line in lines)
    *reports, summary = lines
    assert reports and all(set(r) == {"status"} for r in reports)
    assert summary["stopped"] == signal.Signals(signum).name
    assert set(summary["positions"]) == {"work_queue", "mailbox", "detail"}
