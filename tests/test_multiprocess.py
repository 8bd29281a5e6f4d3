"""Two OS processes drain one SQLite ledger concurrently.

The test seeds ~60 dynamic Actions across several WorkItems, then starts two
worker processes (this file run as a script) that open the same SQLite file
and loop ``claim_next`` / ``finish_run`` until every Action is completed. Some
first attempts report ``retryable`` so Actions go back to the queue while the
other process is claiming. Each worker records every claim and finish; the
test then checks that no claim was handed out twice, nothing was lost or left
running, and that the ledger agrees with what the workers recorded.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any
from uuid import UUID

from workcenter.application import WorkCenter

ITEMS = 8
ACTIONS_PER_ITEM = (8, 8, 8, 8, 7, 7, 7, 7)  # 60 Actions
CRITERIA = ["Answer is cited"]
WORKER_TIMEOUT = 45.0
# SQLite's busy handler backs a waiting writer off for up to 100 ms while the other
# process keeps writing; a worker that never pauses can starve the other one.
WORK_SECONDS = 0.003


def _completed(criteria: list[str]) -> dict[str, Any]:
    return {
        "outcome": "completed",
        "summary": "answered",
        "evidence": ["ran the query"],
        "acceptanceChecks": [
            {"criterion": c, "status": "passed", "evidence": "ok"} for c in criteria
        ],
    }


def _retry_first_attempt(run_id: UUID, attempt: int) -> bool:
    """About a third of first attempts fail in a retryable way (deterministic per Run)."""
    return attempt == 1 and run_id.int % 3 == 0


def worker_main(db: str, name: str, ready: str, go: str, out: str, ids_file: str) -> None:
    """One worker process: claim and finish until every seeded Action is completed."""
    action_ids = [UUID(a) for a in json.loads(Path(ids_file).read_text())]
    claims: list[list[Any]] = []
    finishes: list[list[Any]] = []
    errors: list[str] = []
    abort = Path(go).with_name("abort")
    with WorkCenter.open(db, boot_id=f"{name}-{os.getpid()}") as wc:
        Path(ready).touch()
        deadline = time.monotonic() + WORKER_TIMEOUT
        while not os.path.exists(go):  # start together with the other worker
            if time.monotonic() > deadline:
                raise SystemExit("never told to go")
            time.sleep(0.001)
        drained = False
        try:
            while time.monotonic() < deadline:
                claim = wc.claim_next(name)
                if claim is None:
                    if abort.exists():
                        break
                    # Nothing ready: done only when the other worker is not about to
                    # put a retryable Action back.
                    if all(wc.action(a).status == "completed" for a in action_ids):
                        drained = True
                        break
                    time.sleep(0.005)
                    continue
                claims.append(
                    [str(claim.action_id), str(claim.run_id), claim.lease_epoch, claim.attempt]
                )
                time.sleep(WORK_SECONDS)  # executing the Run lets the other worker in
                if _retry_first_attempt(claim.run_id, claim.attempt):
                    report: dict[str, Any] = {"outcome": "retryable", "error": "flaky network"}
                else:
                    report = _completed(list(claim.acceptance_criteria))
                try:
                    action = wc.finish_run(claim, report)
                except Exception as error:  # recorded, so the parent can report it
                    errors.append(f"finish {claim.run_id}: {error!r}")
                    break
                finishes.append([str(claim.run_id), report["outcome"], action.status])
        finally:
            if not drained:
                abort.touch()  # tell the other worker the pool can never drain
        if not drained and not errors:
            errors.append("stopped before the pool was drained")
    Path(out).write_text(json.dumps({"claims": claims, "finishes": finishes, "errors": errors}))


def _seed(db: Path) -> list[UUID]:
    action_ids: list[UUID] = []
    with WorkCenter.open(db, boot_id="seeder") as wc:
        for n, count in enumerate(ACTIONS_PER_ITEM):
            item = wc.create_work_item(
                title=f"Pool item {n}",
                goal="Answer every question",
                acceptance_criteria=CRITERIA,
                delivery_target="response",
                start=True,
            )
            specs = [
                {
                    "type": "research",
                    "objective": f"Question {n}.{k}",
                    "approach": "look it up",
                    "expectedOutcome": "a cited answer",
                    "workspaceMode": "read",
                    "maxAttempts": 3,
                }
                for k in range(count)
            ]
            item = wc.plan_actions(item.id, expected_version=item.version, actions=specs)
            action_ids.extend(e.action_id for e in item.plan)
    return action_ids


def test_two_processes_drain_one_pool(tmp_path: Path) -> None:
    db = tmp_path / "pool.db"
    action_ids = _seed(db)
    assert len(action_ids) == sum(ACTIONS_PER_ITEM) == 60
    ids_file = tmp_path / "actions.json"
    ids_file.write_text(json.dumps([str(a) for a in action_ids]))
    go = tmp_path / "go"
    names = ("p1", "p2")
    procs: dict[str, subprocess.Popen[str]] = {}
    for name in names:
        procs[name] = subprocess.Popen(
            [
                sys.executable,
                __file__,
                str(db),
                name,
                str(tmp_path / f"{name}.ready"),
                str(go),
                str(tmp_path / f"{name}.json"),
                str(ids_file),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
    try:
        deadline = time.monotonic() + 30
        while not all((tmp_path / f"{n}.ready").exists() for n in names):
            assert time.monotonic() < deadline, "workers did not start"
            assert all(p.poll() is None for p in procs.values()), "a worker died while starting"
            time.sleep(0.01)
        go.touch()  # both have the store open: release them at once
        outputs = {name: p.communicate(timeout=WORKER_TIMEOUT + 15)[0] for name, p in procs.items()}
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()
    for name, p in procs.items():
        assert p.returncode == 0, f"{name} exited {p.returncode}:\n{outputs[name]}"

    results = {n: json.loads((tmp_path / f"{n}.json").read_text()) for n in names}
    problems = {name: r["errors"] for name, r in results.items() if r["errors"]}
    assert not problems, problems
    for name, result in results.items():
        assert result["claims"], f"{name} claimed nothing: the other drained the pool alone"

    claims = [tuple(c) for r in results.values() for c in r["claims"]]
    finishes = [tuple(f) for r in results.values() for f in r["finishes"]]
    # No Action was handed out twice under one lease epoch, and no Run twice.
    assert not [k for k, n in Counter((a, e) for a, _, e, _ in claims).items() if n > 1]
    assert not [k for k, n in Counter(r for _, r, _, _ in claims).items() if n > 1]
    # Every claim was finished exactly once, by the worker that held it.
    assert len(finishes) == len(claims)
    for name, result in results.items():
        held = sorted(c[1] for c in result["claims"])
        assert sorted(f[0] for f in result["finishes"]) == held, name
    retried = [f for f in finishes if f[1] == "retryable"]
    assert retried, "no retryable outcome was exercised"
    assert all(f[2] == "ready" for f in retried)
    assert len(claims) == len(action_ids) + len(retried)

    # The ledger agrees: every Action completed, nothing running, every Run accounted for.
    with WorkCenter.open(db, boot_id="auditor") as wc:
        claimed_runs = {UUID(c[1]): c for c in claims}
        stored_runs = set()
        for action_id in action_ids:
            action = wc.action(action_id)
            assert action.status == "completed", (action_id, action.status)
            assert action.current_run_id is None
            assert all(r.status != "running" for r in action.runs)
            assert [r.lease_epoch for r in action.runs] == list(range(1, len(action.runs) + 1))
            assert action.result_run_id == action.runs[-1].id
            for run in action.runs:
                stored_runs.add(run.id)
                claimed = claimed_runs[run.id]
                assert UUID(claimed[0]) == action_id and claimed[2] == run.lease_epoch
        assert stored_runs == set(claimed_runs)
        assert sum(1 for r in results.values() for _ in r["claims"]) == len(stored_runs)
        wc.projections.catch_up()
        assert wc.work_queue.live_runs() == []
        assert wc.work_queue.ready_actions(100) == []
        for row in wc.list_work_items():
            item = wc.work_item(row["id"])
            assert {e.status for e in item.plan} == {"completed"}
            assert (item.status, item.current_action_id) == ("running", None)


if __name__ == "__main__":
    worker_main(*sys.argv[1:7])
