"""A stopped worker finishes its delivery (ADR-0112).

A deliver Action is never run twice by itself: a Run of it that is interrupted fails
the Action and its item waits for a person's ``retry``. So the first SIGTERM or Ctrl-C
lets a delivery in hand finish and be recorded before the worker exits with its stop
status; a second interrupts it as before; every other Run is given back at once, as
before. Each test runs a real ``workcenter worker`` and reads the store afterwards.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from conftest import FakeClock, create_linear, report

from workcenter.adapters.postgres_connection import StoreDisconnected
from workcenter.adapters.worker import run_worker
from workcenter.adapters.worker_run import (
    SECOND_SIGNAL_LOST,
    Reconnect,
    StopSignals,
    WorkerStats,
    run_one,
)
from workcenter.application import Claim, WorkCenter

ROOT = Path(__file__).resolve().parent.parent
TESTS = Path(__file__).resolve().parent
WORKCENTER = [sys.executable, "-c", "from workcenter.adapters.cli import main; main()"]
WAIT = 60.0


class Worker:
    """A ``workcenter worker`` process running ``drain_executor:slow``, its stdout and
    stderr in files (read while it runs)."""

    def __init__(
        self,
        db: str,
        marks: Path,
        *options: str,
        deliver_seconds: float,
        other_seconds: float = 60,
    ) -> None:
        marks.mkdir()
        self.marks = marks
        self.out, self.err = marks.parent / "worker.out", marks.parent / "worker.err"
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(ROOT), str(TESTS)]),
            "DRAIN_MARKS": str(marks),
            "DRAIN_DELIVER_SECONDS": str(deliver_seconds),
            "DRAIN_OTHER_SECONDS": str(other_seconds),
        }
        with open(self.out, "wb") as out, open(self.err, "wb") as err:
            self.process = subprocess.Popen(
                [
                    *WORKCENTER,
                    *("--db", db),
                    "worker",
                    *("--executor", "drain_executor:slow", "--poll", "0.1"),
                    *options,
                ],
                stdout=out,
                stderr=err,
                env=env,
            )

    def wait_for(self, what: str, count: int = 1) -> None:
        deadline = time.monotonic() + WAIT
        while len(list(self.marks.glob(what))) < count:
            assert self.process.poll() is None, self.stderr()
            assert time.monotonic() < deadline, f"no {what} in time"
            time.sleep(0.05)

    def wait_for_line(self, words: str) -> None:
        deadline = time.monotonic() + WAIT
        while words not in self.stderr():
            assert self.process.poll() is None, self.stderr()
            assert time.monotonic() < deadline, f"no {words!r} in time: {self.stderr()}"
            time.sleep(0.05)

    def signal(self, signum: int) -> None:
        self.process.send_signal(signum)

    def end(self) -> int:
        try:
            return self.process.wait(timeout=WAIT)
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()

    def stdout(self) -> str:
        return self.out.read_text()

    def stderr(self) -> str:
        return self.err.read_text()


@pytest.fixture
def stopped(db_path: Path, tmp_path: Path) -> Iterator[list[Worker]]:
    """The test's workers, killed if a failed assertion left one running."""
    workers: list[Worker] = []
    yield workers
    for worker in workers:
        if worker.process.poll() is None:
            worker.process.kill()
            worker.process.wait()


def seed(db: str, *stages: str) -> list[UUID]:
    """One linear item of one stage per name, in that order of claims."""
    with WorkCenter.open(db) as wc:
        return [create_linear(wc, stages=(stage,), title=stage).id for stage in stages]


def started(
    db: str,
    tmp_path: Path,
    stopped: list[Worker],
    stages: tuple[str, ...],
    *args: str,
    deliver_seconds: float,
    other_seconds: float = 60,
) -> tuple[Worker, list[UUID]]:
    """A worker (given ``args``) with a Run of each of ``stages`` under way, and the
    items seeded for them."""
    items = seed(db, *stages)
    worker = Worker(
        db,
        tmp_path / "marks",
        *args,
        deliver_seconds=deliver_seconds,
        other_seconds=other_seconds,
    )
    stopped.append(worker)
    worker.wait_for("*.started", count=len(stages))
    return worker, items


def only_action(db: str, item_id: UUID) -> tuple[Any, str]:
    """The item's one Action and the item's status."""
    with WorkCenter.open(db) as wc:
        item = wc.work_item(item_id)
        (action,) = wc.actions(item).values()
        return action, item.status


@pytest.mark.parametrize(("signum", "status"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_stopped_worker_finishes_its_delivery_and_exits_with_its_stop_status(
    db_path: Path, tmp_path: Path, stopped: list[Worker], signum: int, status: int
) -> None:
    db = str(db_path)
    worker, (item_id,) = started(db, tmp_path, stopped, ("deliver",), "--json", deliver_seconds=2.5)
    with WorkCenter.open(db) as wc:
        before = wc.event_count()
    worker.signal(signum)
    assert worker.end() == status, worker.stderr()
    assert list(worker.marks.glob("deliver-*.returned")), "the worker left before the delivery"
    action, item_status = only_action(db, item_id)
    (run,) = action.runs
    assert (run.status, action.status, item_status) == ("completed", "completed", "done")
    with WorkCenter.open(db) as wc:
        assert wc.event_count() > before  # the finish, recorded after the signal
    stats = json.loads(worker.stdout())  # --json: the drain's line is not on stdout
    assert (stats["claimed"], stats["finished"], stats["interrupted"]) == (1, 1, 0), stats
    err = worker.stderr()
    assert "Traceback" not in err
    (line,) = [line for line in err.splitlines() if line.startswith("draining")]
    assert f"draining deliver {action.id}" in line
    assert signal.Signals(signum).name in line and "second stop signal" in line


@pytest.mark.parametrize(
    ("stage", "options", "second", "ended"),
    [
        # A delivery interrupted fails, and its item waits for a person's retry.
        ("deliver", (), signal.SIGTERM, ("failed", "needs_attention")),
        # A draining worker's other Run is given back (ADR-0141).
        ("implement", ("--drain",), signal.SIGINT, ("ready", "ready")),
    ],
)
def test_a_second_signal_interrupts_the_run_the_first_let_finish(
    db_path: Path,
    tmp_path: Path,
    stopped: list[Worker],
    stage: str,
    options: tuple[str, ...],
    second: int,
    ended: tuple[str, str],
) -> None:
    db = str(db_path)
    worker, (item_id,) = started(
        db, tmp_path, stopped, (stage,), *options, deliver_seconds=60, other_seconds=60
    )
    worker.signal(signal.SIGTERM)
    worker.wait_for_line(f"draining {stage}")
    worker.signal(second)
    assert worker.end() == 143, worker.stderr()
    assert not list(worker.marks.glob("*.returned"))
    action, item_status = only_action(db, item_id)
    (run,) = action.runs
    assert (run.status, action.status, item_status) == ("interrupted", *ended)
    assert signal.Signals(second).name in (run.end_reason or "")
    assert "claimed 1, finished 0, interrupted 1" in worker.stdout()
    assert "Traceback" not in worker.stderr()


def test_any_other_run_is_still_given_back_at_once(
    db_path: Path, tmp_path: Path, stopped: list[Worker]
) -> None:
    db = str(db_path)
    worker, (item_id,) = started(db, tmp_path, stopped, ("implement",), deliver_seconds=1.5)
    signalled = time.monotonic()
    worker.signal(signal.SIGTERM)
    assert worker.end() == 143, worker.stderr()
    assert time.monotonic() - signalled < 30  # its executor works for 60 s
    action, item_status = only_action(db, item_id)
    (run,) = action.runs
    assert (run.status, action.status, item_status) == ("interrupted", "ready", "ready")
    assert "draining" not in worker.stderr()
    assert "claimed 1, finished 0, interrupted 1" in worker.stdout()


def test_with_two_runs_at_once_the_delivery_drains_and_the_other_is_given_back(
    db_path: Path, tmp_path: Path, stopped: list[Worker]
) -> None:
    db = str(db_path)
    worker, (delivery, other) = started(
        db, tmp_path, stopped, ("deliver", "implement"), "--runs-at-once", "2", deliver_seconds=3
    )
    worker.signal(signal.SIGTERM)
    assert worker.end() == 143, worker.stderr()
    assert list(worker.marks.glob("deliver-*.returned"))
    assert not list(worker.marks.glob("implement-*.returned"))
    action, status = only_action(db, delivery)
    assert (action.runs[0].status, action.status, status) == ("completed", "completed", "done")
    action, status = only_action(db, other)
    assert (action.runs[0].status, action.status) == ("interrupted", "ready")
    assert "claimed 2, finished 1, interrupted 1" in worker.stdout()
    assert worker.stderr().count("draining deliver") == 1
    assert "Traceback" not in worker.stderr()


def test_with_two_runs_at_once_a_second_signal_interrupts_the_delivery(
    db_path: Path, tmp_path: Path, stopped: list[Worker]
) -> None:
    db = str(db_path)
    worker, (delivery, other) = started(
        db, tmp_path, stopped, ("deliver", "implement"), "--runs-at-once", "2", deliver_seconds=60
    )
    worker.signal(signal.SIGTERM)
    worker.wait_for_line("draining deliver")
    worker.signal(signal.SIGINT)
    assert worker.end() == 143, worker.stderr()
    action, status = only_action(db, delivery)
    assert (action.runs[0].status, action.status, status) == (
        "interrupted",
        "failed",
        "needs_attention",
    )
    assert "SIGINT" in (action.runs[0].end_reason or "")
    action, status = only_action(db, other)
    assert (action.runs[0].status, action.status) == ("interrupted", "ready")
    assert "claimed 2, finished 0, interrupted 2" in worker.stdout()


@pytest.mark.parametrize("runs_at_once", ["1", "2"])
def test_a_draining_worker_finishes_every_run_in_hand_spending_no_attempt(
    db_path: Path, tmp_path: Path, stopped: list[Worker], runs_at_once: str
) -> None:
    """``--drain`` (ADR-0141): before a store is copied the operator stops its workers
    without giving Runs back, which spends an attempt each and runs them again."""
    db = str(db_path)
    stages = ("implement", "research")[: int(runs_at_once)]
    worker, items = started(
        db,
        tmp_path,
        stopped,
        stages,
        "--drain",
        "--json",
        "--runs-at-once",
        runs_at_once,
        deliver_seconds=1,
        other_seconds=2.5,
    )
    worker.signal(signal.SIGTERM)
    assert worker.end() == 143, worker.stderr()
    assert len(list(worker.marks.glob("*.returned"))) == len(stages)
    for item_id in items:
        action, item_status = only_action(db, item_id)
        (run,) = action.runs
        assert (run.status, action.status, item_status) == ("completed", "completed", "done")
    stats = json.loads(worker.stdout())
    finished = len(stages)
    assert (stats["claimed"], stats["finished"], stats["interrupted"]) == (finished, finished, 0)
    err = worker.stderr()
    lines = [line for line in err.splitlines() if line.startswith("draining")]
    assert len(lines) == len(stages), err
    assert all("SIGTERM" in line and "second stop signal" in line for line in lines)
    assert "Traceback" not in err


def test_run_worker_with_stop_signals_finishes_the_delivery_and_says_so(
    db_path: Path,
) -> None:
    """The Python API, its caller having installed the handlers: the first signal while
    a delivery executes lets it finish, the drain said once to ``on_event``."""
    events: list[tuple[str, str]] = []
    with WorkCenter.open(str(db_path)) as wc:
        (item_id,) = [create_linear(wc, stages=("deliver",)).id]
        with StopSignals() as signals:

            def executor(claim: Claim) -> dict[str, Any]:
                signals._handle(signal.SIGTERM, None)  # as the signal would, in this thread
                time.sleep(0.2)  # the drain is said from another thread
                return report()

            stats = run_worker(
                wc,
                executor,
                worker="w",
                signals=signals,
                poll_seconds=0.01,
                on_event=lambda kind, claim, detail: events.append((kind, detail)),
            )
        assert (stats.claimed, stats.finished, stats.interrupted) == (1, 1, 0), stats
        (action,) = wc.actions(wc.work_item(item_id)).values()
        assert (action.runs[0].status, action.status) == ("completed", "completed")
    assert [kind for kind, _ in events] == ["claimed", "draining", "finished"]
    assert "SIGTERM" in events[1][1]


def test_a_delivery_claimed_as_the_stop_came_is_run_not_given_back(db_path: Path) -> None:
    """Given back unrun, a delivery fails: claimed just after the first signal (the loop
    sees the stop only after the claim it was writing), it is executed and recorded."""
    events: list[str] = []
    with WorkCenter.open(str(db_path)) as wc, StopSignals() as signals:
        (item_id,) = [create_linear(wc, stages=("deliver",)).id]
        signals._handle(signal.SIGTERM, None)
        stats = WorkerStats()
        claim = run_one(
            wc,
            lambda claim: report(),
            worker="w",
            stats=stats,
            signals=signals,
            on_event=lambda kind, claim, detail: events.append(kind),
        )
        assert claim is not None
        assert (stats.finished, stats.interrupted) == (1, 0), stats
        (action,) = wc.actions(wc.work_item(item_id)).values()
        assert action.status == "completed"
        # A non-deliver Run claimed then is given back before it executes, as before.
        other = create_linear(wc, stages=("implement",)).id
        ran = threading.Event()
        run_one(wc, lambda claim: ran.set() or report(), worker="w", stats=stats, signals=signals)
        assert not ran.is_set()
        (action,) = wc.actions(wc.work_item(other)).values()
        assert (action.runs[0].status, action.status) == ("interrupted", "ready")
    assert events == ["claimed", "draining", "finished"]


def test_a_drained_finish_waits_out_the_database_until_a_second_signal(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker's waits for the database end with its stop: a finish after the first
    signal gave up at once, and the delivery it had let finish lapsed (and failed) with
    its lease. It is tried again until the database answers, or a second signal."""
    with WorkCenter.open(str(db_path)) as wc, StopSignals() as signals:
        (item_id,) = [create_linear(wc, stages=("deliver",)).id]
        refusals = finishes_failing(wc, monkeypatch, 2)

        def executor(claim: Claim) -> dict[str, Any]:
            signals._handle(signal.SIGTERM, None)
            return report()

        stats, _ = one_run(wc, executor, signals)
        assert not refusals
        assert (stats.finished, stats.interrupted) == (1, 0), stats
        (action,) = wc.actions(wc.work_item(item_id)).values()
        assert action.status == "completed"

    # A second signal ends the wait: the finish is not recorded.
    with WorkCenter.open(str(db_path)) as wc, StopSignals() as signals:
        other = create_linear(wc, stages=("deliver",)).id
        tries: list[int] = []

        def down(claim: Claim, checked: Any) -> Any:
            tries.append(1)
            if len(tries) == 3:
                signals._handle(signal.SIGINT, None)
            raise StoreDisconnected("lost the connection to the database")

        monkeypatch.setattr(wc, "finish_run", down)

        def delivers(claim: Claim) -> dict[str, Any]:
            signals._handle(signal.SIGTERM, None)
            return report()

        stats, said = one_run(wc, delivers, signals)
        assert 3 <= len(tries) < 10
        # Counted and said (it was neither: found by acceptance testing).
        assert stats.lost == 1 and ("lost", SECOND_SIGNAL_LOST) in said
        (action,) = wc.actions(wc.work_item(other)).values()
        assert action.status == "running"  # its lease lapses; a recovery then fails it


def test_a_finish_after_a_stop_event_waits_out_the_database_while_the_lease_lasts(
    db_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ``stop`` event lets the Run in hand finish (ADR-0112), but the finish gave up at
    the first lost connection, the report lost and the Run lapsing with its lease. It is
    tried again while the lease can take it (ADR-0119)."""
    with WorkCenter.open(str(db_path), clock=clock) as wc:
        first = create_linear(wc, stages=("implement",)).id
        stop = threading.Event()
        refusals = finishes_failing(wc, monkeypatch, 2)

        def executor(claim: Claim) -> dict[str, Any]:
            stop.set()  # the embedder stops the worker while the Run is in hand
            return report()

        stats = run_worker(wc, executor, worker="w", lease_seconds=60, stop=stop)
        assert not refusals
        assert (stats.finished, stats.interrupted, stats.lost) == (1, 0, 0), stats
        assert wc.work_item(first).status == "done"

        # Past the lease the finish would be refused: the tries end with it.
        second = create_linear(wc, stages=("implement",)).id
        tries: list[int] = []

        def down(claim: Claim, checked: Any) -> Any:
            tries.append(1)
            if len(tries) == 2:
                clock.advance(61)
            raise StoreDisconnected("lost the connection to the database")

        monkeypatch.setattr(wc, "finish_run", down)
        stats, events = one_run(wc, executor)
        assert len(tries) == 2
        assert (stats.finished, stats.lost) == (0, 1), stats
        assert events[-1] == ("lost", "the lease ran out before the outcome could be recorded")
        (action,) = wc.actions(wc.work_item(second)).values()
        assert action.status == "running"  # recovery ends it once another worker looks


def one_run(
    wc: WorkCenter, executor: Any, signals: StopSignals | None = None
) -> tuple[WorkerStats, list[tuple[str, str]]]:
    """``run_one`` as the worker's loop calls it, waiting out the database until a stop
    (with ``signals``, their first) or the lease: its stats and the events it said."""
    said: list[tuple[str, str]] = []
    stats = WorkerStats()
    run_one(
        wc,
        executor,
        worker="w",
        stats=stats,
        on_event=lambda kind, _, detail: said.append((kind, detail)),
        signals=signals,
        reconnect=Reconnect(signals.event if signals is not None else threading.Event()),
    )
    return stats, said


def finishes_failing(wc: WorkCenter, monkeypatch: pytest.MonkeyPatch, times: int) -> list[Any]:
    """Make the next ``times`` finishes of ``wc`` fail as on a lost connection; the list of
    those failures still to come."""
    finish = wc.finish_run
    refusals = [StoreDisconnected("lost the connection to the database")] * times

    def flaky_finish(claim: Claim, checked: Any) -> Any:
        if refusals:
            raise refusals.pop()
        return finish(claim, checked)

    monkeypatch.setattr(wc, "finish_run", flaky_finish)
    return refusals
