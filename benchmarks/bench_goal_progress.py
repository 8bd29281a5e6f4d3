"""Goal progress derived for one long-lived item, at several sizes (ADR-0136).

Every write of an item builds its detail DTO, and with it its goal progress from all
its Runs: the cost of one derivation is a write's cost on a long-lived item. An item
with ``--criteria`` criteria gets 8 Actions of 5 attempts each, every Run reporting a
check of every criterion and ``--evidence`` lines of evidence, failing retryably (a
contradicting Run: it counts against every criterion it checked); the derivation is
then timed after 8, 16, 24, 32 and 40 Runs. Run from the repository root; to compare
two versions, run each from its own checkout (``PYTHONPATH=that/checkout``)::

    .venv/bin/python benchmarks/bench_goal_progress.py --criteria 200
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from workcenter.application import WorkCenter
from workcenter.domain import goal_progress


class Clock:
    def __init__(self) -> None:
        self.at = datetime(2026, 1, 1, tzinfo=UTC)

    def now(self) -> datetime:
        return self.at


def spec(k: int) -> dict[str, Any]:
    return {
        "type": "research",
        "objective": f"Step {k}",
        "approach": "Read the code and run the tests",
        "expectedOutcome": "A verified answer with evidence",
        "workspaceMode": "read",
        "maxAttempts": 5,
    }


def timed_derivation(wc: WorkCenter, item_id: Any, repeats: int) -> float:
    item = wc.work_item(item_id)
    actions = list(wc.actions(item).values())
    started = time.perf_counter()
    for _ in range(repeats):
        goal_progress.derive_goal_progress(
            criteria=item.acceptance_criteria,
            contract_revision=item.contract_revision,
            delivery_target=item.delivery_target,
            actions=actions,
        )
    return (time.perf_counter() - started) / repeats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--criteria", type=int, default=200)
    parser.add_argument("--evidence", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    criteria = [f"criterion {i}: " + "x" * 200 for i in range(args.criteria)]
    clock = Clock()
    with tempfile.TemporaryDirectory() as directory:
        wc = WorkCenter.open(Path(directory) / "fat.db", clock=clock)
        item = wc.create_work_item(
            title="A long-lived item",
            goal="Everything checked",
            acceptance_criteria=criteria,
            delivery_target="response",
            start=True,
            limits={"max_action_attempts": 5, "max_requests": 10**6, "max_tokens": 10**12},
        )
        wc.plan_actions(item.id, expected_version=2, actions=[spec(k) for k in range(8)])
        report = {
            "outcome": "retryable",
            "summary": "ran the checks",
            "error": "a tool crashed",
            "evidence": [f"check {k}: ran " + "y" * 100 for k in range(args.evidence)],
            "acceptanceChecks": [
                {"criterion": c, "status": "passed", "evidence": "ran it"} for c in criteria
            ],
        }
        runs = 0
        print("runs  derive ms")
        while (claim := wc.claim_next("bench")) is not None:
            clock.at += timedelta(seconds=10)
            wc.finish_run(claim, report)
            runs += 1
            if runs % 8 == 0:
                ms = timed_derivation(wc, item.id, args.repeats) * 1000
                print(f"{runs:4d}  {ms:9.2f}")
                sys.stdout.flush()
        wc.close()


if __name__ == "__main__":
    main()
