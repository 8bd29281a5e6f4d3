"""Many worker processes on one store, a separate projection runner, and a controller
that SIGKILLs workers (issue 10, ADR-0034).

**Drain**: 4 worker processes on PostgreSQL drain 500 Actions of 100 WorkItems
while a ``workcenter projections run`` process keeps the read models. Every claim
is a new lease epoch, every Run is finished at most once and only by the lease
that holds it (the Runs that outlive their lease on purpose are refused), every
Action completes, every item is then completed, and the runner's views equal a
rebuild from zero.

**Faults**: the same scenario while the controller SIGKILLs a random worker
every second and starts a new one (at least 20 kills), with short leases, and
with a tenth of the items on a budget too small for their work: no event a
worker saw accepted is missing, no Action is left running or claimable (a
killed worker's Runs are recovered after their lease expires), and no ledger
holds more requests or tokens than its limits. The same with SQLite and 2
worker processes.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import UUID

import postgres
import pytest

from workcenter.adapters.postgres_settings import SYNCHRONOUS_COMMIT_ENV
from workcenter.application import WorkCenter
from workcenter.domain import action as act

ITEMS = 100
ACTIONS_PER_ITEM = 5
CRITERION = "Answer is cited"
# Five attempts per Action (the default budget allows three), so that a Run retried
# once and killed twice still leaves its Action attempts to complete with.
LIMITS = {"max_action_attempts": 5}
TIGHT_BUDGET = LIMITS | {"max_requests": 3}  # fewer requests than five Actions need
WORKER = Path(__file__).with_name("scaleout_worker.py")
DRAIN_TIMEOUT = 150.0


@pytest.fixture
def pg_url() -> Iterator[str]:
    with postgres.fresh_schema("wcso") as url:
        yield url


def seed(store: str, tight_items: int = 0) -> list[UUID]:
    """100 running dynamic items of 5 research Actions each; the first ``tight_items``
    on a budget too small for them."""
    items: list[UUID] = []
    with WorkCenter.open(store, boot_id="seeder", inline_projections=False) as wc:
        for n in range(ITEMS):
            item = wc.create_work_item(
                title=f"Pool item {n}",
                goal="Answer every question",
                acceptance_criteria=[CRITERION],
                delivery_target="response",
                limits=TIGHT_BUDGET if n < tight_items else LIMITS,
                start=True,
            )
            specs = [
                {
                    "type": "research",
                    "objective": f"Question {n}.{k}",
                    "approach": "look it up",
                    "expectedOutcome": "a cited answer",
                    "workspaceMode": "read",
                    "maxAttempts": 5,
                }
                for k in range(ACTIONS_PER_ITEM)
            ]
            wc.plan_actions(item.id, expected_version=item.version, actions=specs)
            items.append(item.id)
    return items


class Pool:
    """The worker processes, the runner process and their logs."""

    def __init__(
        self, store: str, directory: Path, lease: float, work: float, commit: str = "on"
    ) -> None:
        self.store, self.directory, self.lease, self.work = store, directory, lease, work
        self.stop_file = directory / "stop"
        self.log = directory / "workers.jsonl"
        self.workers: dict[str, subprocess.Popen[bytes]] = {}
        self.started = 0
        self.env = os.environ | {
            "WORKCENTER_INLINE_PROJECTIONS": "0",
            SYNCHRONOUS_COMMIT_ENV: commit,
        }
        self.runner: subprocess.Popen[bytes] | None = None
        self.runner_out = directory / "runner.jsonl"

    def start_worker(self) -> None:
        self.started += 1
        name = f"w{self.started}"
        self.workers[name] = subprocess.Popen(
            [
                sys.executable,
                str(WORKER),
                self.store,
                name,
                str(self.log),
                str(self.lease),
                str(self.work),
                str(self.stop_file),
            ],
            env=self.env,
            stderr=open(self.directory / f"{name}.err", "wb"),  # noqa: SIM115
        )

    def start_runner(self) -> None:
        self.runner = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "from workcenter.adapters.cli import main; main()",
                "--db",
                self.store,
                "projections",
                "run",
                "--json",
                "--report",
                "1",
            ],
            env=self.env,
            stdout=open(self.runner_out, "wb"),  # noqa: SIM115
            stderr=subprocess.STDOUT,
        )

    def kill_one(self, rng: random.Random) -> None:
        alive = [name for name, p in self.workers.items() if p.poll() is None]
        victim = rng.choice(alive)
        self.workers[victim].send_signal(signal.SIGKILL)
        self.workers[victim].wait()

    def alive(self) -> int:
        return sum(1 for p in self.workers.values() if p.poll() is None)

    def crashed(self) -> list[str]:
        """Workers that exited on their own (not killed, not stopped): their stderr."""
        return [
            (self.directory / f"{name}.err").read_text()
            for name, p in self.workers.items()
            if p.returncode not in (None, 0, -signal.SIGKILL)
        ]

    def stop(self) -> None:
        self.stop_file.touch()
        for p in self.workers.values():
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def stop_runner(self) -> list[dict[str, Any]]:
        assert self.runner is not None
        self.runner.send_signal(signal.SIGTERM)
        self.runner.wait(timeout=30)
        lines = self.runner_out.read_text().splitlines()
        # Stopped by its SIGTERM, as every long verb is (ADR-0100).
        assert self.runner.returncode == 128 + signal.SIGTERM, lines[-20:]
        # JSON Lines: a status per report, then the summary, which names the signal.
        *reports, summary = [json.loads(line) for line in lines]
        assert all("status" in report for report in reports)
        assert summary["stopped"] == "SIGTERM"
        return [*reports, summary]

    def records(self) -> list[list[Any]]:
        return [json.loads(line) for line in self.log.read_text().splitlines() if line.strip()]

    def close(self) -> None:
        self.stop_file.touch()
        for p in [*self.workers.values(), *([self.runner] if self.runner else [])]:
            if p.poll() is None:
                p.kill()
                p.wait()


def drained(wc: WorkCenter) -> bool:
    """No Action claimable and no Run live (the work queue, caught up)."""
    wc.projections.catch_up(names=["work_queue"])
    return not wc.work_queue.ready_actions(1) and not wc.work_queue.live_runs()


def check_ledger(wc: WorkCenter, items: list[UUID], records: list[list[Any]]) -> dict[str, Any]:
    """What every scenario must show; returns counts for the scenario's own checks."""
    by_run: dict[UUID, act.Run] = {}
    actions: dict[UUID, act.ActionState] = {}
    for item_id in items:
        for entry in wc.work_item(item_id).plan:
            action = wc.action(entry.action_id)
            actions[action.id] = action
            # One Run per lease epoch, in order; none left running.
            assert [r.lease_epoch for r in action.runs] == list(range(1, len(action.runs) + 1))
            assert action.current_run_id is None and action.status != "running"
            for run in action.runs:
                by_run[run.id] = run
            # No event lost inside a stream: versions 1..n, no gap.
            versions = [e.originator_version for e in wc.action_history(action.id)]
            assert versions == list(range(1, len(versions) + 1))
        ledger = wc.ledger(item_id)
        assert ledger.request_count <= ledger.limits.max_requests, ledger.id
        assert ledger.charged_tokens <= ledger.limits.max_tokens, ledger.id
    claims = [r for r in records if r[1] == "claim"]
    # Every claim a worker saw is a Run of that Action at that epoch, handed out once.
    assert len({r[3] for r in claims}) == len(claims)
    for _, _, action_id, run_id, epoch in claims:
        run = by_run[UUID(run_id)]
        assert (run.lease_epoch, UUID(action_id)) == (epoch, actions_of(run_id, actions))
    # Every finish a worker saw accepted is stored with its outcome; none twice.
    finishes = [r for r in records if r[1] == "finish"]
    assert not [k for k, n in Counter(r[2] for r in finishes).items() if n > 1]
    for _, _, run_id, outcome in finishes:
        assert by_run[UUID(run_id)].status == outcome
    # A Run that outlived its lease was refused, and the store shows it ended otherwise.
    stale = [r[2] for r in records if r[1] == "stale"]
    for run_id in stale:
        assert by_run[UUID(run_id)].status == "interrupted", by_run[UUID(run_id)]
    assert not [r for r in records if r[1] == "refused"]
    # Every stored Run was claimed through a claim a worker made (none from nowhere).
    assert len(by_run) >= len(claims)
    return {"actions": actions, "claims": len(claims), "stale": len(stale), "runs": len(by_run)}


def actions_of(run_id: str, actions: dict[UUID, act.ActionState]) -> UUID:
    return next(a.id for a in actions.values() if any(str(r.id) == run_id for r in a.runs))


def complete_items(wc: WorkCenter, items: list[UUID]) -> None:
    """The coordinator's part: every item whose Actions all completed is completed."""
    for item_id in items:
        item = wc.work_item(item_id)
        runs = [str(wc.action(e.action_id).result_run_id) for e in item.plan]
        wc.complete(
            item_id,
            expected_version=item.version,
            completion={
                "summary": "All answered",
                "acceptanceResults": [
                    {"criterion": CRITERION, "status": "passed", "evidenceRunIds": runs}
                ],
                "evidenceRunIds": runs,
            },
        )


def views_equal_a_rebuild(wc: WorkCenter) -> None:
    live = {name: view.dump() for name, view in wc.projections.views.items()}
    assert len(live["work_queue"]["wq_items"]) == ITEMS
    wc.maintenance.rebuild_projection()
    assert {name: view.dump() for name, view in wc.projections.views.items()} == live


def wait_for_runner(wc: WorkCenter, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while any(row.lag for row in wc.maintenance.projection_status()):
        assert time.monotonic() < deadline, wc.maintenance.projection_status()
        time.sleep(0.2)


def test_four_worker_processes_drain_500_actions_on_postgresql(pg_url: str, tmp_path: Path) -> None:
    items = seed(pg_url)
    pool = Pool(pg_url, tmp_path, lease=2.0, work=0.005)
    try:
        pool.start_runner()
        for _ in range(4):
            pool.start_worker()
        with WorkCenter.open(pg_url, boot_id="controller", inline_projections=False) as wc:
            deadline = time.monotonic() + DRAIN_TIMEOUT
            while not drained(wc):
                assert time.monotonic() < deadline, "the pool did not drain"
                assert not pool.crashed(), pool.crashed()
                time.sleep(0.5)
            pool.stop()
            assert not pool.crashed(), pool.crashed()
            records = pool.records()
            seen = check_ledger(wc, items, records)
            assert all(a.status == "completed" for a in seen["actions"].values())
            assert len(seen["actions"]) == ITEMS * ACTIONS_PER_ITEM
            # Each claim was finished exactly once, by its worker, or refused as stale.
            finished = {r[2] for r in records if r[1] == "finish"}
            stale = {r[2] for r in records if r[1] == "stale"}
            claimed = {r[3] for r in records if r[1] == "claim"}
            assert claimed == finished | stale and not finished & stale
            assert seen["runs"] == seen["claims"]
            assert seen["stale"] > 0, "no Run outlived its lease"
            assert {r[0] for r in records if r[1] == "claim"} == {"w1", "w2", "w3", "w4"}
            complete_items(wc, items)
            assert {row["status"] for row in wc.list_work_items()} == {"done"}
            wait_for_runner(wc)
            reports = pool.stop_runner()
            views_equal_a_rebuild(wc)
        # The runner reported its lag as it went (it was behind while the workers ran),
        # and caught up to the head at the end (wait_for_runner).
        lags = [row["lag"] for report in reports if "status" in report for row in report["status"]]
        assert lags and max(lags) > 0
        assert reports[-1]["applied"] > 0
    finally:
        pool.close()


def run_with_faults(
    store: str, directory: Path, workers: int, interval: float, commit: str = "on"
) -> None:
    items = seed(store, tight_items=ITEMS // 10)
    pool = Pool(store, directory, lease=1.5, work=0.06, commit=commit)
    rng = random.Random(10)
    kills = 0
    try:
        pool.start_runner()
        for _ in range(workers):
            pool.start_worker()
        with WorkCenter.open(store, boot_id="controller", inline_projections=False) as wc:
            deadline = time.monotonic() + DRAIN_TIMEOUT
            next_kill = time.monotonic() + interval
            while kills < 20 or not drained(wc):
                assert time.monotonic() < deadline, f"not drained after {kills} kills"
                assert not pool.crashed(), pool.crashed()
                if kills < 20 and time.monotonic() >= next_kill:
                    pool.kill_one(rng)
                    kills += 1
                    pool.start_worker()
                    next_kill += interval
                time.sleep(0.05)
            pool.stop()
            assert not pool.crashed(), pool.crashed()
            records = pool.records()
            seen = check_ledger(wc, items, records)
            statuses = Counter(a.status for a in seen["actions"].values())
            tight = set(items[: ITEMS // 10])
            for action in seen["actions"].values():
                if action.work_item_id not in tight:
                    assert action.status == "completed", action
            for item_id in tight:
                ledger = wc.ledger(item_id)
                assert ledger.request_count == TIGHT_BUDGET["max_requests"]
                assert wc.work_item(item_id).status == "needs_attention"
            assert any(r[1] == "recovered" for r in records), "no killed Run was recovered"
            assert statuses["completed"] >= (ITEMS - len(tight)) * ACTIONS_PER_ITEM
            wait_for_runner(wc)
            pool.stop_runner()
            views_equal_a_rebuild(wc)
        assert kills >= 20 and pool.started == workers + kills
    finally:
        pool.close()


# Also with the table lock released before each write's flush (ADR-0088): a worker killed
# between its commit and its flush leaves a write that is committed, as one killed after.
@pytest.mark.parametrize("commit", ["on", "early-release"])
def test_killing_postgresql_workers_loses_nothing_and_overspends_nothing(
    pg_url: str, tmp_path: Path, commit: str
) -> None:
    run_with_faults(pg_url, tmp_path, workers=4, interval=1.0, commit=commit)


def test_killing_sqlite_workers_loses_nothing_and_overspends_nothing(tmp_path: Path) -> None:
    run_with_faults(str(tmp_path / "pool.db"), tmp_path, workers=2, interval=1.0)
