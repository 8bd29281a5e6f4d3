"""Read-model lifecycles: rebuild rate against reading the log, and the detail DTO's cost.

Run from the repository root::

    .venv/bin/python benchmarks/bench_projections.py            # full run (about a minute)
    .venv/bin/python benchmarks/bench_projections.py --quick    # smaller sizes
    .venv/bin/python benchmarks/bench_projections.py --json     # JSON on stdout

What it measures (docs/performance.md, "Projection lifecycles", explains the method):

1. **read+decode**: paging the whole notification log with ``select_notifications``
   (500 a page) and decoding each event with the store's mapper: the floor any
   projection pays;
2. **rebuild** of each registered read model (``rebuild_projection``: replay into a
   shadow file and atomic swap), events/s, and its ratio to read+decode;
3. **detail DTO of a large item** (200 Actions, 1,000 Runs, built with the domain's
   own deciders): the pure ``detail_dto`` + orjson time, the DTO size, the time to
   fold all its events into a fresh detail view, and the inline cost of one more
   event on that item (re-fold one state, rebuild and store the DTO).

It is a plain script, not a test. Each section uses its own fresh database file.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

from eventsourcing.sqlite import SQLiteDatastore

from workcenter.application import WorkCenter
from workcenter.domain import action as act
from workcenter.domain import lifecycle
from workcenter.domain import resource_ledger as rl
from workcenter.domain import work_item as wi
from workcenter.domain.actor import USER, worker
from workcenter.domain.outcome import normalise
from workcenter.projections.detail import DetailView, build_detail
from workcenter.projections.detail_states import EVOLVE, Kind

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
CRITERIA = ("The answer names the root cause", "The answer cites the failing test")


class Clock:
    def __init__(self) -> None:
        self.at = T0

    def now(self) -> datetime:
        self.at += timedelta(milliseconds=10)
        return self.at


def _report(outcome: str, n: int) -> dict[str, Any]:
    return {
        "outcome": outcome,
        "summary": f"{outcome} summary {n} " + "detail " * 40,
        "evidence": [f"ran pytest: {n} passed", {"kind": "file", "label": "log", "ref": "a.txt"}],
        "acceptanceChecks": [
            {"criterion": c, "status": "passed", "evidence": f"proof {n}"} for c in CRITERIA
        ],
        **({"error": "tool crashed " * 20} if outcome == "retryable" else {}),
    }


# --- 1 + 2: read+decode vs rebuild -------------------------------------------------


def workload(wc: WorkCenter, items: int) -> None:
    """Per item: create, plan 3 Actions, then claim, renew and finish each (one retry)."""
    for i in range(items):
        item = wc.create_work_item(
            title=f"item {i}", goal="g", acceptance_criteria=list(CRITERIA), start=True
        )
        wc.plan_actions(
            item.id,
            expected_version=item.version,
            actions=[
                {
                    "type": "research",
                    "objective": f"step {j}",
                    "approach": "Read the code and run the tests",
                    "expectedOutcome": "A verified answer",
                    "workspaceMode": "read",
                }
                for j in range(3)
            ],
        )
        for n in range(4):
            claim = wc.claim_next("w1")
            if claim is None:
                break
            wc.renew_lease(claim)
            wc.finish_run(claim, _report("retryable" if n == 1 else "completed", n))


def read_decode(wc: WorkCenter) -> tuple[int, float]:
    recorder, mapper = wc.store.recorder, wc.store.mapper
    started = time.perf_counter()
    position = count = 0
    while page := recorder.select_notifications(
        start=position, limit=500, inclusive_of_start=False
    ):
        for n in page:
            mapper.to_domain_event(n)
        count += len(page)
        position = page[-1].id
    return count, time.perf_counter() - started


def best(repeat: int, run: Callable[[], tuple[int, float]]) -> tuple[int, float]:
    results = [run() for _ in range(repeat)]
    return min(results, key=lambda r: r[1])


def bench_rebuild(directory: Path, items: int, repeat: int) -> dict[str, Any]:
    with WorkCenter.open(directory / "rebuild.db", clock=Clock()) as wc:
        started = time.perf_counter()
        workload(wc, items)
        write_seconds = time.perf_counter() - started
        events, read_seconds = best(repeat, lambda: read_decode(wc))
        read_rate = events / read_seconds
        views: dict[str, Any] = {}
        for name in wc.projections.views:
            reports = [wc.maintenance.rebuild_projection(name)[0] for _ in range(repeat)]
            fastest = min(reports, key=lambda r: r.seconds)
            views[name] = {
                "events": fastest.events,
                "seconds": round(fastest.seconds, 3),
                "events_per_s": round(fastest.events_per_second),
                "ratio_to_read_decode": round(fastest.events_per_second / read_rate, 3),
            }
        return {
            "items": items,
            "events": events,
            "write_seconds_with_inline_views": round(write_seconds, 2),
            "read_decode_events_per_s": round(read_rate),
            "rebuild": views,
        }


# --- 3: the detail DTO of a 200-action, 1,000-run item -----------------------------


WORKER = worker("w1", "b")


def big_item(actions: int, runs_per_action: int) -> tuple[list[Any], Any]:
    """The events of one item with ``actions`` Actions of ``runs_per_action`` Runs each,
    made by the domain's deciders (a Unit lifts the 64-Action planning cap)."""
    at = T0
    unit = lifecycle.create(
        work_item_id=uuid4(),
        mode="dynamic",
        contract=wi.validate_contract(
            title="A large item",
            goal="Exercise the detail DTO",
            acceptance_criteria=list(CRITERIA),
            delivery_target="response",
        ),
        stages=None,
        start=True,
        at=at,
        by=USER,
        limits=rl.Limits(max_action_attempts=runs_per_action + 1),
    )
    for s in range(actions):
        unit.plan_action(
            type="research",
            brief=act.Brief(objective=f"objective {s} " * 10, approach="read " * 30),
            max_attempts=runs_per_action + 1,
        )
    for action_id in list(unit.actions):
        for n in range(runs_per_action):
            at += timedelta(seconds=1)
            unit.at = at
            unit.apply_action(
                act.claim(
                    unit.action(action_id),
                    worker="w1",
                    boot_id="b",
                    lease=timedelta(seconds=60),
                    at=at,
                    by=WORKER,
                )
            )
            action = unit.action(action_id)
            assert action.current_run is not None
            outcome = "completed" if n == runs_per_action - 1 else "retryable"
            result = normalise(_report(outcome, n), item=unit.item, action=action).result
            unit.apply_action(
                act.finish(
                    action, action.current_run, outcome=outcome, result=result, at=at, by=WORKER
                )
            )
            unit.derive_status()
    return unit.events, unit


class UnitStates:
    """The detail view's state source for a view with no event store beside it: the
    benchmark's item lives in ``events``, which the view reads as the store's."""

    def __init__(self, events: list[Any]) -> None:
        self.events = events

    def versions(self, aggregate_ids: Sequence[UUID], c: Any = None) -> dict[UUID, int]:
        wanted = set(aggregate_ids)
        return {
            e.originator_id: e.originator_version for e in self.events if e.originator_id in wanted
        }

    def holds_events_of(self, datastore: Any) -> bool:
        return False

    def state(self, kind: Kind, aggregate_id: UUID, version: int, c: Any = None) -> Any:
        state = None
        for event in self.events:
            if event.originator_id == aggregate_id and event.originator_version <= version:
                state = EVOLVE[kind](state, event)
        return state


def bench_detail(
    directory: Path, actions: int, runs_per_action: int, repeat: int
) -> dict[str, Any]:
    events, unit = big_item(actions, runs_per_action)
    runs = sum(len(a.runs) for a in unit.actions.values())
    timings = []
    for _ in range(repeat):
        started = time.perf_counter()
        dto = build_detail(unit.item, unit.actions, unit.ledger, unit.at)
        timings.append(time.perf_counter() - started)
    decoded = json.loads(dto)
    datastore = SQLiteDatastore(str(directory / "detail.db"))
    view = DetailView(datastore, source=UnitStates(unit.events))
    view.create_table()
    batch = list(enumerate(events, start=1))
    started = time.perf_counter()
    for page in range(0, len(batch), 500):
        view.apply("detail", batch[page : page + 500])
    fold_seconds = time.perf_counter() - started
    increments = []
    for n in range(repeat):
        unit.item_event(wi.TitleChanged, title=f"renamed {n}")
        started = time.perf_counter()
        view.apply("detail", [(len(batch) + n + 1, unit.events[-1])])
        increments.append(time.perf_counter() - started)
    datastore.close()
    return {
        "actions": len(unit.actions),
        "runs": runs,
        "events": len(events),
        "dto_bytes": len(dto),
        "truncated": bool(decoded.get("truncated")),
        "dto_build_ms_median": round(statistics.median(timings) * 1000, 1),
        "fold_all_events_seconds": round(fold_seconds, 2),
        "fold_events_per_s": round(len(events) / fold_seconds),
        "one_more_event_ms_median": round(statistics.median(increments) * 1000, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    items, repeat = (40, 1) if args.quick else (300, 3)
    actions, runs_per_action = (40, 5) if args.quick else (200, 5)
    # tmpfs when there is one: the figures are about projection work, not fsync.
    shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    with tempfile.TemporaryDirectory(prefix="bench-projections-", dir=shm) as tmp:
        directory = Path(tmp)
        results = {
            "rebuild": bench_rebuild(directory, items, repeat),
            "detail": bench_detail(directory, actions, runs_per_action, max(repeat, 5)),
        }
    if args.json:
        json.dump(results, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return
    r = results["rebuild"]
    print(
        f"log: {r['events']} events from {r['items']} items "
        f"(written in {r['write_seconds_with_inline_views']} s with the inline views)"
    )
    print(f"read+decode: {r['read_decode_events_per_s']:,} events/s")
    for name, v in r["rebuild"].items():
        print(
            f"rebuild {name:<10} {v['events_per_s']:>8,} events/s  "
            f"ratio {v['ratio_to_read_decode']:.3f}  ({v['seconds']} s)"
        )
    d = results["detail"]
    print(
        f"detail DTO: {d['actions']} actions, {d['runs']} runs, {d['events']} events -> "
        f"{d['dto_bytes']:,} B (truncated: {d['truncated']}), built in "
        f"{d['dto_build_ms_median']} ms; folding all events {d['fold_all_events_seconds']} s "
        f"({d['fold_events_per_s']:,} events/s); one more event {d['one_more_event_ms_median']} ms"
    )


if __name__ == "__main__":
    main()
