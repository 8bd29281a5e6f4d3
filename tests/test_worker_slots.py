"""Several Runs at once in one worker process (ADR-0097): ``run_worker(runs_at_once=N)``
and ``workcenter worker --runs-at-once N``.

Agents spend their time waiting on models and tools; one process running 16 Runs at
once kept up with 16 processes on PostgreSQL on a sixteenth of the connections
(ADR-0095's measurement). A stop gives back every Run whose executor is still at
work, as a single-Run worker's stop does."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import postgres
import pytest
from conftest import action_spec, create_dynamic, create_linear, plan, report

from workcenter.adapters.executors import echo
from workcenter.adapters.providers.scripted_coordinator import scripted_coordinator
from workcenter.adapters.worker import run_worker
from workcenter.adapters.worker_run import StopSignals
from workcenter.application import Claim, WorkCenter
from workcenter.domain.errors import InvalidInput

ROOT = Path(__file__).resolve().parent.parent
WORKCENTER = [sys.executable, "-c", "from workcenter.adapters.cli import main; main()"]


def items(wc: WorkCenter, n: int) -> list[Any]:
    return [create_linear(wc, title=f"item {i}", stages=("implement",)).id for i in range(n)]


def test_runs_execute_at_once_and_every_item_is_done(wc: WorkCenter) -> None:
    made = items(wc, 6)
    together = threading.Barrier(3, timeout=10)  # broken unless three execute at once
    seen: list[str] = []

    def executor(claim: Claim) -> dict[str, Any]:
        together.wait()
        seen.append(threading.current_thread().name)
        return report()

    stats = run_worker(
        wc, executor, worker="w", runs_at_once=3, exit_when_idle=True, poll_seconds=0.01
    )
    assert (stats.claimed, stats.finished, stats.errors) == (6, 6, 0), stats
    assert stats.outcomes == {"completed": 6}
    assert len(set(seen)) == 3
    assert {wc.work_item(item).status for item in made} == {"done"}


def test_the_coordinator_plans_while_the_slots_run_and_idle_waits_for_its_work(
    wc: WorkCenter,
) -> None:
    """The main thread's Coordinator steps make work claimable: the worker is idle only
    once every slot has looked for work since the last step."""
    made = [create_dynamic(wc).id for _ in range(3)]
    stats = run_worker(
        wc,
        echo,
        worker="w",
        coordinator=scripted_coordinator(),
        runs_at_once=3,
        exit_when_idle=True,
        poll_seconds=0.01,
    )
    assert (stats.claimed, stats.finished, stats.errors) == (3, 3, 0), stats
    assert stats.coordinator_steps.get("decided", 0) >= 6
    assert {wc.work_item(item).status for item in made} == {"done"}


def test_a_postgresql_pool_of_two_serves_four_runs_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("POSTGRES_POOL_SIZE", "2")
    monkeypatch.setenv("POSTGRES_MAX_OVERFLOW", "0")
    monkeypatch.setenv("POSTGRES_CONNECT_TIMEOUT", "2")
    with postgres.fresh_schema("wcslots") as url, WorkCenter.open(url) as wc:
        made = items(wc, 12)
        stats = run_worker(
            wc, echo, worker="w", runs_at_once=4, exit_when_idle=True, poll_seconds=0.01
        )
        assert (stats.claimed, stats.finished, stats.errors) == (12, 12, 0), stats
        assert {wc.work_item(item).status for item in made} == {"done"}


def test_max_runs_counts_the_runs_of_every_slot(wc: WorkCenter) -> None:
    items(wc, 8)
    stats = run_worker(
        wc, lambda claim: report(), worker="w", runs_at_once=3, max_runs=5, poll_seconds=0.01
    )
    assert (stats.claimed, stats.finished) == (5, 5), stats
    assert wc.claim_next("another") is not None  # the rest were left for others


def test_a_stop_signal_gives_back_every_run_in_hand(wc: WorkCenter) -> None:
    """The executors cannot be interrupted in their threads: their Runs are given back
    (retryable), and what an executor reports after that is not recorded."""
    made = items(wc, 3)
    started = threading.Barrier(4, timeout=10)
    release = threading.Event()
    returned = threading.Event()
    signals = StopSignals()

    def executor(claim: Claim) -> dict[str, Any]:
        started.wait()
        release.wait(10)
        returned.set()
        return report()

    def stop_once_all_started() -> None:
        started.wait()
        signals._handle(signal.SIGTERM, None)  # as the signal would, in the main thread

    threading.Thread(target=stop_once_all_started).start()
    stats = run_worker(wc, executor, worker="w", runs_at_once=3, signals=signals, poll_seconds=0.01)
    assert (stats.claimed, stats.finished, stats.interrupted) == (3, 0, 3), stats
    before = wc.event_count()
    release.set()
    assert returned.wait(10)
    time.sleep(0.2)  # the abandoned executors' threads end without writing
    assert wc.event_count() == before
    for item in made:
        (action,) = wc.actions(wc.work_item(item)).values()
        (run,) = action.runs
        assert (run.status, action.status) == ("interrupted", "ready")
        assert "SIGTERM" in (run.end_reason or "")


def test_a_stop_without_signals_lets_each_run_in_hand_finish(wc: WorkCenter) -> None:
    """As a single-Run worker's: the API's stop event ends the loop, not the Runs."""
    items(wc, 4)
    stop = threading.Event()

    def executor(claim: Claim) -> dict[str, Any]:
        stop.set()
        time.sleep(0.05)
        return report()

    stats = run_worker(wc, executor, worker="w", runs_at_once=2, stop=stop, poll_seconds=0.01)
    assert 1 <= stats.claimed <= 2 and stats.claimed == stats.finished, stats
    assert stats.interrupted == 0


def test_a_failure_in_one_slot_ends_the_worker_and_is_raised(wc: WorkCenter) -> None:
    """A defect (here the caller's own callback) is not left to a thread's death while
    the other slots go on: the worker ends and raises it, as the single-Run loop does."""
    items(wc, 12)

    def on_event(kind: str, claim: Claim, detail: str) -> None:
        if kind == "finished":
            raise RuntimeError("the callback broke")

    with pytest.raises(RuntimeError, match="the callback broke"):
        run_worker(
            wc,
            lambda claim: report(),
            worker="w",
            runs_at_once=3,
            on_event=on_event,
            poll_seconds=0.01,
        )
    assert wc.claim_next("another") is not None  # most items were left


@pytest.mark.parametrize("value", [0, -1, 257, True, 1.5])
def test_runs_at_once_out_of_range_is_refused(wc: WorkCenter, value: Any) -> None:
    items(wc, 1)
    before = wc.event_count()
    with pytest.raises(InvalidInput, match="runs_at_once"):
        run_worker(wc, lambda claim: report(), worker="w", runs_at_once=value)
    assert wc.event_count() == before


SLOW_EXECUTOR = """
import pathlib, threading, time

lock = threading.Lock()

def slow(claim):
    with lock:
        marks = pathlib.Path(__file__).with_name("started")
        marks.write_text(marks.read_text() + "x" if marks.exists() else "x")
    time.sleep(60)
    return {"outcome": "completed"}
"""


def test_the_cli_runs_several_at_once_and_a_stop_gives_them_back(tmp_path: Path) -> None:
    db = str(tmp_path / "store.db")
    with WorkCenter.open(db) as wc:
        made = items(wc, 3)
    (tmp_path / "slow_executor.py").write_text(SLOW_EXECUTOR)
    worker = subprocess.Popen(
        [
            *WORKCENTER,
            "--db",
            db,
            "worker",
            "--executor",
            "slow_executor:slow",
            "--runs-at-once",
            "2",
            "--poll",
            "0.1",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path)])},
    )
    started = tmp_path / "started"
    try:
        deadline = time.monotonic() + 60
        while not (started.exists() and started.read_text() == "xx"):
            assert worker.poll() is None, worker.communicate()
            assert time.monotonic() < deadline, "two executors never started"
            time.sleep(0.05)
        worker.send_signal(signal.SIGTERM)
        out, err = worker.communicate(timeout=30)
    finally:
        if worker.poll() is None:
            worker.kill()
    assert worker.returncode == 143, err
    assert "Traceback" not in err
    assert "claimed 2, finished 0, interrupted 2" in out
    with WorkCenter.open(db) as wc:
        actions = [a for item in made for a in wc.actions(wc.work_item(item)).values()]
        runs = [run for action in actions for run in action.runs]
    assert sorted(run.status for run in runs) == ["interrupted", "interrupted"]


def test_the_cli_refuses_runs_at_once_out_of_range(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            *WORKCENTER,
            "--db",
            str(tmp_path / "s.db"),
            "worker",
            *("--executor", "x:y"),
            "--runs-at-once",
            "0",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    assert "'--runs-at-once': 0 is not in the range 1<=x<=256" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_stop_signal_while_the_stop_event_is_held_does_not_hang() -> None:
    """A signal's handler runs in the main thread between two bytecodes, perhaps while
    that thread holds the stop event's lock (waiting on it, or setting it for a first
    signal): setting the event there waited for ever (found by acceptance testing: a
    second SIGTERM froze the worker)."""
    signals = StopSignals()
    handled = threading.Event()

    def signalled_while_holding() -> None:
        with signals.event._cond:  # type: ignore[attr-defined]
            signals._handle(signal.SIGTERM, None)
            signals._handle(signal.SIGINT, None)
        handled.set()

    threading.Thread(target=signalled_while_holding, daemon=True).start()
    assert handled.wait(5), "the handler waited for the lock its own thread held"
    assert signals.event.wait(5)
    assert signals.signum == signal.SIGTERM


def test_signals_after_the_loop_only_confirm_the_stop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A burst of signals (a second Ctrl-C, a supervisor's repeated SIGTERM) that comes
    after the loop ended, while the summary is printed or the store closed, neither
    kills the process before its summary nor changes its status (it ended as
    "Aborted!" with status 1; ADR-0097)."""
    from click.testing import CliRunner

    from workcenter.adapters import cli
    from workcenter.adapters.worker_run import WorkerStats

    class Signalled(WorkerStats):
        def summary(self) -> str:
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)
            return super().summary()

    def stopped_loop(wc: WorkCenter, executor: Any, **options: Any) -> WorkerStats:
        os.kill(os.getpid(), signal.SIGTERM)  # the stop the loop ends on
        assert options["signals"].event.wait(5)
        return Signalled()

    monkeypatch.setattr(cli, "run_worker", stopped_loop)
    WorkCenter.open(str(tmp_path / "s.db")).close()
    result = CliRunner().invoke(
        cli.cli,
        [
            "--db",
            str(tmp_path / "s.db"),
            "worker",
            "--executor",
            "workcenter.adapters.executors:echo",
        ],
    )
    assert result.exit_code == 143, result.output
    assert "claimed 0, finished 0" in result.output


@pytest.mark.parametrize(
    ("verb", "refusal"),
    [
        (["worker", "--runs-at-once", "abc"], "'abc' is not a valid integer."),
        (["worker", "--max-runs", "1.5"], "'1.5' is not a valid integer."),
        (["worker", "--poll", "abc"], "'abc' is not a valid number of seconds."),
        (["serve", "--port", "eighty"], "'eighty' is not a valid integer."),
    ],
)
def test_a_number_that_is_not_one_is_refused_in_plain_words(
    tmp_path: Path, verb: list[str], refusal: str
) -> None:
    """click's own words were "'abc' is not a valid integer range" (and "a valid
    seconds"), as if a range had been asked for."""
    from click.testing import CliRunner

    from workcenter.adapters import cli

    result = CliRunner().invoke(cli.cli, ["--db", str(tmp_path / "s.db"), *verb])
    assert result.exit_code == 2
    assert refusal in result.output
    assert not (tmp_path / "s.db").exists()


@pytest.mark.parametrize("runs_at_once", [1, 3])
def test_runs_and_coordinator_steps_take_turns(wc: WorkCenter, runs_at_once: int) -> None:
    """A worker that also coordinates takes one due Coordinator step, then looks for a
    Run, in turn: it ran every due step (up to 100) before each claim, so on a store with
    a backlog of wakes (an old store moved, 2,000 running dynamic items) it claimed 127
    Runs in 90 s, and with a model's seconds a step, none for minutes (found by
    acceptance testing, ADR-0138)."""
    for _ in range(6):
        create_dynamic(wc)  # each started: a wake due
    items(wc, 1)
    stats = run_worker(
        wc,
        echo,
        worker="w",
        coordinator=scripted_coordinator(),
        runs_at_once=runs_at_once,
        max_runs=1,
        poll_seconds=0.01,
    )
    assert stats.claimed == 1, stats
    assert sum(stats.coordinator_steps.values()) <= runs_at_once, stats


def test_a_wake_that_waits_for_a_running_action_does_not_hold_up_the_others(
    wc: WorkCenter,
) -> None:
    """The oldest due wake may not begin while its item has an Action running (a user's
    message waits for it): a worker taking one step a pass tried only it, ran none, and
    took the Coordinator for idle, every other item's wake held up behind it (found by
    acceptance testing of ADR-0138's one step a pass)."""
    held = create_dynamic(wc)
    plan(wc, held.id, action_spec())
    coordinator = scripted_coordinator()
    assert wc.claim_next("w") is not None  # its Action runs: its wakes wait
    wc.post_user_message(held.id, "also look at the logs")
    waiting = create_dynamic(wc)  # started: a wake due, after the held item's
    stats = run_worker(
        wc, echo, worker="w", coordinator=coordinator, runs=False, exit_when_idle=True
    )
    assert stats.coordinator_steps.get("decided", 0) >= 1, stats
    assert wc.work_item(waiting.id).plan, "the waiting item's wake was never taken"
