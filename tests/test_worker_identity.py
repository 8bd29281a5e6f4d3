"""Issue 24, ADR-0048: workers started exactly as docs/deployment.md says (no
``--name``) never interrupt each other's live Runs.

Each scenario seeds 100 linear WorkItems of one ``deliver`` stage (a deliver step
is never retried: a Run interrupted by a peer fails its item for good), starts 4
``workcenter worker --executor ... --lease 60`` processes of the real CLI (on
PostgreSQL with ``WORKCENTER_INLINE_PROJECTIONS=0`` and a ``workcenter projections
run --report 30`` beside them), waits until every item is done, and stops them
with SIGTERM. Workers start one after another and poll idle at the end, so every
worker's start-up and idle recovery runs while its peers hold live Runs.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from uuid import UUID

import postgres
import pytest

from workcenter.application import WorkCenter

ITEMS = 100
WORKERS = 4
CRITERION = "The answer is delivered"
DRAIN_TIMEOUT = 150.0
TESTS = Path(__file__).parent
SUMMARY = re.compile(r"claimed (\d+), finished (\d+), interrupted (\d+), lost (\d+), errors (\d+)")


def cli() -> list[str]:
    """The installed ``workcenter`` command, as an operator runs it."""
    script = Path(sys.executable).with_name("workcenter")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "from workcenter.adapters.cli import main; main()"]


def seed(store: str) -> list[UUID]:
    with WorkCenter.open(store) as wc:
        return [
            wc.create_work_item(
                title=f"Deliver {n}",
                goal="The answer reaches the user",
                acceptance_criteria=[CRITERION],
                delivery_target="response",
                mode="linear",
                stages=["deliver"],
                start=True,
            ).id
            for n in range(ITEMS)
        ]


class Deployment:
    """The documented processes, their output in files."""

    def __init__(self, store: str, directory: Path, *, scale_out: bool) -> None:
        self.directory = directory
        self.env = os.environ | {
            "WORKCENTER_DB": store,
            "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
        }
        if scale_out:
            self.env["WORKCENTER_INLINE_PROJECTIONS"] = "0"
        self.processes: list[tuple[str, subprocess.Popen[bytes]]] = []

    def start(self, name: str, *args: str) -> None:
        out = open(self.directory / f"{name}.out", "wb")  # noqa: SIM115
        process = subprocess.Popen(
            [*cli(), *args], env=self.env, stdout=out, stderr=subprocess.STDOUT
        )
        self.processes.append((name, process))

    def stop(self) -> dict[str, str]:
        """SIGTERM to each, then their output by name."""
        for _, process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for _, process in self.processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        return {name: (self.directory / f"{name}.out").read_text() for name, _ in self.processes}

    def pids(self) -> set[int]:
        return {p.pid for name, p in self.processes if name.startswith("worker")}


def drain(store: str, items: list[UUID], deployment: Deployment) -> None:
    deadline = time.monotonic() + DRAIN_TIMEOUT
    with WorkCenter.open(store, create=False) as wc:
        while time.monotonic() < deadline:
            if all(wc.work_item(i).status in ("done", "needs_attention") for i in items):
                return
            assert all(p.poll() is None for _, p in deployment.processes), "a process died"
            time.sleep(0.5)
    pytest.fail("the workers did not drain the items in time")


def check(store: str, items: list[UUID], outputs: dict[str, str], pids: set[int]) -> None:
    interrupted: list[str] = []
    workers: set[str] = set()
    with WorkCenter.open(store, create=False) as wc:
        for item_id in items:
            item = wc.work_item(item_id)
            (entry,) = item.plan
            action = wc.action(entry.action_id)
            workers.update(run.worker for run in action.runs)
            interrupted += [
                f"{run.worker}@{run.owner_boot_id}: {run.end_reason}"
                for run in action.runs
                if run.status != "completed"
            ]
            assert (item.status, len(action.runs)) == ("done", 1), (item.status, action.runs)
    assert not interrupted, interrupted
    # Every worker named itself after its host and process: four names, none shared.
    assert {int(w.rsplit("-", 1)[1]) for w in workers} <= pids
    assert len(workers) > 1
    claimed = 0
    for name, text in outputs.items():
        if not name.startswith("worker"):
            continue
        assert "Traceback" not in text, text
        found = SUMMARY.search(text)
        assert found, text
        claims, finished, stopped, lost, errors = map(int, found.groups())
        assert (stopped, lost, errors) == (0, 0, 0), text
        assert finished == claims
        claimed += claims
    assert claimed == ITEMS


def scenario(store: str, directory: Path, *, scale_out: bool) -> None:
    items = seed(store)
    deployment = Deployment(store, directory, scale_out=scale_out)
    try:
        if scale_out:
            deployment.start("runner", "projections", "run", "--report", "30")
        for n in range(WORKERS):
            deployment.start(
                f"worker{n}", "worker", "--executor", "identity_executor:run", "--lease", "60"
            )
            time.sleep(0.5)  # one after another, as an operator starts them
        drain(store, items, deployment)
    finally:
        outputs = deployment.stop()
    check(store, items, outputs, deployment.pids())


@pytest.fixture
def pg_url() -> Iterator[str]:
    with postgres.fresh_schema("wcid") as url:
        yield url


def test_four_documented_workers_drain_100_items_on_postgres(pg_url: str, tmp_path: Path) -> None:
    scenario(pg_url, tmp_path, scale_out=True)


def test_four_documented_workers_drain_100_items_on_sqlite(tmp_path: Path) -> None:
    scenario(str(tmp_path / "workcenter.db"), tmp_path, scale_out=False)
