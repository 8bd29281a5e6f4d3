"""Issue 24, ADR-0049: six processes reserving on one busy WorkItem's ledger.

Each process (this file run as a script) claims one of the item's six Actions and
sends 20 requests through ``MeteredProvider``, all at once with the others. A
reservation that loses the optimistic save retries after a jittered, growing
pause, so none fails with ``WriteContention``; none costs its Run an attempt
(each Action completes with its one Run); the ledger holds all 120 requests,
settled. Each process counts the pauses it took, which shows the races happened; a
run in which no process lost one (they ran one after another on a busy machine)
tested nothing, and is run again on a fresh store. The backoff's bounds and
the repository's pause between tries are unit-tested.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any
from uuid import UUID

import postgres
import pytest
from conftest import action_spec, create_dynamic, plan
from eventsourcing.persistence import IntegrityError

from workcenter.application import WorkCenter, WriteContention
from workcenter.service_layer import backoff

PROCESSES = 6
REQUESTS = 20
TIMEOUT = 120.0
RUNS = 3  # at most, until one in which a race was lost


def contender(store: str, go: str, out: str) -> None:
    """One process: claim an Action, wait for the start, send REQUESTS metered requests."""
    from workcenter.adapters.metered import MeteredProvider

    pauses: list[float] = []
    real_pause = backoff.pause

    def counted(attempt: int, sleep: Any = time.sleep) -> float:
        pauses.append(real_pause(attempt, sleep))
        return pauses[-1]

    backoff.pause = counted  # type: ignore[assignment]
    result: dict[str, Any] = {"contention": 0, "sent": 0}
    with WorkCenter.open(store, create=False) as wc:
        claim = None
        while claim is None:
            claim = wc.claim_next("contender", lease_seconds=120)
        Path(f"{out}.ready").touch()
        while not Path(go).exists():
            time.sleep(0.01)

        def provider(request: Any) -> dict[str, Any]:
            result["sent"] += 1
            return {"text": "ok", "usage": {"input_tokens": 10, "output_tokens": 5}}

        llm = MeteredProvider.for_claim(wc, claim, provider=provider)
        for _ in range(REQUESTS):
            try:
                llm({"messages": [{"role": "user", "content": "Go"}], "max_tokens": 20})
            except WriteContention:
                result["contention"] += 1
        llm.settle_pending()
        wc.finish_run(
            claim,
            {
                "outcome": "completed",
                "summary": "asked",
                "evidence": ["20 answers"],
                "acceptanceChecks": [
                    {"criterion": c, "status": "passed", "evidence": "ok"}
                    for c in claim.acceptance_criteria
                ],
            },
        )
    result["pauses"] = len(pauses)
    Path(out).write_text(json.dumps(result))


def seed(store: str) -> UUID:
    with WorkCenter.open(store) as wc:
        item = create_dynamic(wc)
        plan(wc, item.id, *[action_spec(objective=f"Ask {n}") for n in range(PROCESSES)])
        return item.id


def contend_until_raced(fresh: Callable[[int], AbstractContextManager[str]], tmp: Path) -> None:
    for run in range(RUNS):
        directory = tmp / f"run{run}"
        directory.mkdir()
        with fresh(run) as store:
            if contend(store, directory):
                return
    pytest.fail(f"no race was lost in {RUNS} runs: nothing was tested")


def contend(store: str, directory: Path) -> int:
    """Runs the six processes, checks what they left, returns the pauses they took."""
    item_id = seed(store)
    go = directory / "go"
    outs = [directory / f"out{n}.json" for n in range(PROCESSES)]
    processes = [
        subprocess.Popen(
            [sys.executable, __file__, store, str(go), str(out)],
            stderr=open(directory / f"err{n}", "wb"),  # noqa: SIM115
        )
        for n, out in enumerate(outs)
    ]
    try:
        # Every process claims its Action first, so that all send at once.
        deadline = time.monotonic() + TIMEOUT
        while not all(Path(f"{out}.ready").exists() for out in outs):
            if any(p.poll() is not None for p in processes) or time.monotonic() > deadline:
                break  # the checks below say which failed
            time.sleep(0.01)
        go.touch()
        for process in processes:
            process.wait(timeout=TIMEOUT)
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    errors = [(directory / f"err{n}").read_text() for n in range(PROCESSES)]
    assert [p.returncode for p in processes] == [0] * PROCESSES, errors
    results = [json.loads(out.read_text()) for out in outs]
    assert [r["contention"] for r in results] == [0] * PROCESSES, results
    assert sum(r["sent"] for r in results) == PROCESSES * REQUESTS
    with WorkCenter.open(store, create=False) as wc:
        ledger = wc.ledger(item_id)
        assert ledger.request_count == PROCESSES * REQUESTS
        assert [r.status for r in ledger.reservations.values()] == ["reported"] * (
            PROCESSES * REQUESTS
        )
        for entry in wc.work_item(item_id).plan:
            action = wc.action(entry.action_id)
            # No attempt spent on contention: one Run each, completed.
            assert (action.status, action.attempt, len(action.runs)) == ("completed", 1, 1)
    return sum(r["pauses"] for r in results)


def test_six_processes_reserve_on_one_ledger_on_postgres(tmp_path: Path) -> None:
    postgres.require_server()
    contend_until_raced(lambda _: postgres.fresh_schema("wcct"), tmp_path)


def test_six_processes_reserve_on_one_ledger_on_sqlite(tmp_path: Path) -> None:
    contend_until_raced(lambda run: nullcontext(str(tmp_path / f"store{run}.db")), tmp_path)


def test_the_delay_is_jittered_under_a_growing_cap() -> None:
    for attempt in range(12):
        cap = min(backoff.CAP_SECONDS, backoff.BASE_SECONDS * 2**attempt)
        delays = [backoff.delay(attempt) for _ in range(200)]
        assert all(0.0 <= d <= cap for d in delays)
        assert len(set(delays)) > 100  # jittered, not one fixed wait
    assert max(backoff.delay(20) for _ in range(200)) > backoff.CAP_SECONDS / 2


def test_a_lost_race_pauses_before_the_next_try(
    wc: WorkCenter, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The repository waits between tries, longer caps each time, and gives up with
    WriteContention after its last try, having written nothing."""
    item = create_dynamic(wc)
    waits: list[int] = []
    monkeypatch.setattr(backoff, "pause", lambda attempt, sleep=None: waits.append(attempt))
    repo = wc._repository

    def lose(unit: Any) -> None:
        raise IntegrityError("another writer won")

    monkeypatch.setattr(repo, "save", lose)
    before = wc.event_count()
    with pytest.raises(WriteContention):
        wc.update_contract(item.id, expected_version=item.version, goal="Another goal")
    assert waits == list(range(7))
    assert wc.event_count() == before


if __name__ == "__main__":
    contender(*sys.argv[1:4])
