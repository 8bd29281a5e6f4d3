"""Core throughput and latency of the embedded Workcenter (SQLite file in a temp dir).

Run from the repository root::

    .venv/bin/python benchmarks/bench_core.py            # full run (a few minutes)
    .venv/bin/python benchmarks/bench_core.py --quick    # smaller sizes, for a smoke check
    .venv/bin/python benchmarks/bench_core.py --json     # table on stderr, JSON on stdout
    .venv/bin/python benchmarks/bench_core.py --repeat 3 # median of 3 runs (shared machines)

Rates are also given by this process's CPU time ("/CPU-s"), which other load on
a shared machine disturbs less than wall time. ``--synchronous`` and
``--statement-cache`` are what-if experiments (see ``what_if``).

What it measures (docs/performance.md explains method and results):

1. creates/s: ``create_work_item`` (dynamic, started, 3 criteria, target "response");
2. run cycles/s (``claim_next`` + ``renew_lease`` + ``finish_run`` completed with valid
   evidence and checks) with 500 and with 2,000 Actions ready in the queue, plus the
   latency of ``claim_next`` alone (median, p95) for each backlog;
3. detail reads/s on finished items (``work_item`` + ``actions`` + ``goal_progress``),
   on a fresh WorkCenter (cold cache) and again on the same one (warm cache);
4. database bytes per finished item, after a WAL checkpoint;
5. the load time of one Action with 10, 1,000 and 10,000 events, on a fresh WorkCenter,
   with the store's snapshots and with snapshotting off.

It is a plain script, not a test. Each section uses its own fresh database file.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from importlib.metadata import version
from typing import Any
from uuid import UUID

from workcenter.adapters.persistence import sqlite_env
from workcenter.application import SNAPSHOT_INTERVAL, Claim, Clock, EventStore, WorkCenter

CRITERIA = (
    "The answer names the root cause",
    "The answer cites the failing test",
    "The answer proposes a fix",
)
ACTIONS_PER_FINISHED_ITEM = 3
PLAN_CHUNK = 8  # planning.MAX_NEW_ACTIONS
ITEM_CAPACITY = 64  # planning.MAX_ACTIONS_PER_ITEM
REFILL_EVERY = 16  # cycles between (untimed) top-ups of the backlog

# The row-updating SQLite store this replaces, on the same machine size.
BAR = {
    "creates_per_s": 1_900,
    "cycles_per_s_500": 116,
    "cycles_per_s_2000": 44,
    "detail_reads_per_s": 3_200,
}

REPORT: dict[str, Any] = {
    "outcome": "completed",
    "summary": "Root cause found and a fix proposed.",
    "response": "The flaky test races the cache; pin the clock in the fixture.",
    "evidence": ["ran pytest -q tests/test_cache.py: 1 failed, 41 passed"],
    "acceptanceChecks": [
        {"criterion": c, "status": "passed", "evidence": "see the summary"} for c in CRITERIA
    ],
}


class FakeClock:
    """Advances 1 ms per reading, so a 60 s lease outlives tens of thousands of events."""

    def __init__(self) -> None:
        self._now = datetime(2026, 1, 1, tzinfo=UTC)

    def now(self) -> datetime:
        self._now += timedelta(milliseconds=1)
        return self._now


class NoSnapshotStore(EventStore):
    """The same store with snapshotting off: loads replay every event (benchmark hook)."""

    name = "WorkCenter"  # keep the application name (and so its env prefix) unchanged
    is_snapshotting_enabled = False


# --- helpers -------------------------------------------------------------------


def what_if(synchronous: str | None, statement_cache: int | None) -> None:
    """Experiments only: patch ``sqlite3.connect`` in this process (never the library).

    ``synchronous``: run ``PRAGMA synchronous=...`` on each new connection, over the
    store's own setting (NORMAL by default, ADR-0018).
    ``statement_cache``: the prepared-statement cache size (the library passes
    ``cached_statements=True``, which sqlite3 takes as a size of 1).
    """
    if not synchronous and not statement_cache:
        return
    connect = sqlite3.connect

    def patched(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        if statement_cache:
            kwargs["cached_statements"] = statement_cache
        con = connect(*args, **kwargs)
        if synchronous:
            con.execute(f"PRAGMA synchronous={synchronous}")
        return con

    sqlite3.connect = patched  # type: ignore[assignment]


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@contextmanager
def fresh_db(label: str) -> Iterator[str]:
    with tempfile.TemporaryDirectory(prefix=f"wc-bench-{label}-") as directory:
        yield os.path.join(directory, "workcenter.db")


def open_wc(path: str, clock: Clock | None = None, *, snapshots: bool = True) -> WorkCenter:
    store_class = EventStore if snapshots else NoSnapshotStore
    return WorkCenter(store_class(env=sqlite_env(path)), clock=clock)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))
    return ordered[index]


def ms(seconds: float) -> float:
    return round(seconds * 1000, 3)


def create_item(wc: WorkCenter, n: int) -> Any:
    return wc.create_work_item(
        title=f"Investigate flaky test #{n}",
        goal="Find why tests/test_cache.py fails one run in ten and say how to fix it.",
        acceptance_criteria=CRITERIA,
        delivery_target="response",
        mode="dynamic",
        start=True,
    )


def action_spec(n: int) -> dict[str, str]:
    return {
        "type": "research",
        "objective": f"Reproduce and explain failure mode {n}",
        "approach": "Run the test in a loop with tracing on; read the cache code.",
        "expectedOutcome": "A short report with the failing trace and the cause.",
        "workspaceMode": "read",
    }


def plan(wc: WorkCenter, item: Any, count: int) -> Any:
    """Plan ``count`` more Actions on ``item``, at most 8 per call."""
    done = len(item.plan)
    while count > 0:
        chunk = min(PLAN_CHUNK, count)
        specs = [action_spec(done + i) for i in range(chunk)]
        item = wc.plan_actions(item.id, expected_version=item.version, actions=specs)
        done += chunk
        count -= chunk
    return item


def add_backlog(wc: WorkCenter, count: int, serial: list[int]) -> None:
    """Add ``count`` ready Actions on new WorkItems of up to 64 Actions each."""
    while count > 0:
        chunk = min(ITEM_CAPACITY, count)
        serial[0] += 1
        plan(wc, create_item(wc, serial[0]), chunk)
        count -= chunk


def ready_count(wc: WorkCenter) -> int:
    rows = wc.work_queue._rows("SELECT count(*) FROM wq_actions WHERE status = 'ready'")
    return int(rows[0][0])


def cycle(wc: WorkCenter) -> tuple[float, float, float, Claim]:
    """One run cycle; returns (claim latency, cycle latency, cycle CPU time, claim)."""
    c0 = time.process_time()
    t0 = time.perf_counter()
    claim = wc.claim_next("bench-worker")
    t1 = time.perf_counter()
    if claim is None:
        raise RuntimeError("the queue ran dry")
    if not wc.renew_lease(claim):
        raise RuntimeError("renewal refused")
    action = wc.finish_run(claim, REPORT)
    t2 = time.perf_counter()
    cpu = time.process_time() - c0
    if action.status != "completed":
        raise RuntimeError(f"run did not complete: {action.status}")
    return t1 - t0, t2 - t0, cpu, claim


def file_bytes(path: str) -> tuple[int, int]:
    main = os.path.getsize(path)
    wal = os.path.getsize(path + "-wal") if os.path.exists(path + "-wal") else 0
    return main, wal


def table_bytes(path: str) -> dict[str, int] | None:
    """Bytes per table and index, if this SQLite has the dbstat table."""
    con = sqlite3.connect(path)
    try:
        rows = con.execute("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name").fetchall()
    except sqlite3.OperationalError:
        return None
    finally:
        con.close()
    return {name: int(size) for name, size in sorted(rows, key=lambda r: -r[1])}


# --- 1. creates ------------------------------------------------------------------


def bench_creates(n: int) -> dict[str, Any]:
    with fresh_db("creates") as path:
        wc = open_wc(path)
        for i in range(20):
            create_item(wc, -i)  # warm-up: imports, statement cache, pages
        latencies = []
        cpu0 = time.process_time()
        start = time.perf_counter()
        for i in range(n):
            t0 = time.perf_counter()
            create_item(wc, i)
            latencies.append(time.perf_counter() - t0)
        elapsed = time.perf_counter() - start
        cpu = time.process_time() - cpu0
        wc.close()
    return {
        "creates": n,
        "seconds": round(elapsed, 3),
        "per_s": round(n / elapsed, 1),
        "per_cpu_s": round(n / cpu, 1),
        "median_ms": ms(statistics.median(latencies)),
        "p95_ms": ms(percentile(latencies, 0.95)),
    }


# --- 2. run cycles ---------------------------------------------------------------


def bench_cycles(backlog: int, window: int, warmup: int = 32) -> dict[str, Any]:
    serial = [0]
    with fresh_db(f"cycles{backlog}") as path:
        wc = open_wc(path)
        t0 = time.perf_counter()
        add_backlog(wc, backlog, serial)
        seed_s = time.perf_counter() - t0
        assert ready_count(wc) == backlog
        for _ in range(warmup):
            cycle(wc)
        add_backlog(wc, backlog - ready_count(wc), serial)

        claims: list[float] = []
        cycles: list[float] = []
        cpu = 0.0
        sizes: list[int] = []
        done = 0
        while done < window:
            sizes.append(ready_count(wc))
            for _ in range(min(REFILL_EVERY, window - done)):
                claim_s, cycle_s, cycle_cpu, _claim = cycle(wc)
                claims.append(claim_s)
                cycles.append(cycle_s)
                cpu += cycle_cpu
                done += 1
            sizes.append(ready_count(wc))
            add_backlog(wc, backlog - ready_count(wc), serial)  # untimed top-up
        events = wc.event_count()
        wc.close()
    return {
        "backlog": backlog,
        "seed_seconds": round(seed_s, 2),
        "cycles": window,
        "per_s": round(window / sum(cycles), 1),
        "per_cpu_s": round(window / cpu, 1),
        "cycle_median_ms": ms(statistics.median(cycles)),
        "cycle_p95_ms": ms(percentile(cycles, 0.95)),
        "claim_median_ms": ms(statistics.median(claims)),
        "claim_p95_ms": ms(percentile(claims, 0.95)),
        "backlog_min": min(sizes),
        "backlog_max": max(sizes),
        "events_in_store": events,
    }


# --- 3 and 4. finished items: detail reads and bytes ------------------------------


def finish_item(wc: WorkCenter, n: int) -> UUID:
    item = plan(wc, create_item(wc, n), ACTIONS_PER_FINISHED_ITEM)
    run_ids = []
    for _ in range(ACTIONS_PER_FINISHED_ITEM):
        _, _, _, claim = cycle(wc)
        assert claim.work_item_id == item.id
        run_ids.append(str(claim.run_id))
    item = wc.work_item(item.id)
    item = wc.complete(
        item.id,
        expected_version=item.version,
        completion={
            "summary": "Cause found (cache race) and a fix proposed.",
            "acceptanceResults": [
                {"criterion": c, "status": "passed", "evidenceRunIds": run_ids[:1]}
                for c in CRITERIA
            ],
            "evidenceRunIds": run_ids,
        },
    )
    assert item.status == "done", item.status
    return item.id


def detail(wc: WorkCenter, item_id: UUID) -> None:
    item = wc.work_item(item_id)
    actions = wc.actions(item)
    progress = wc.goal_progress(item_id)
    assert len(actions) == ACTIONS_PER_FINISHED_ITEM and not progress.remaining_criteria


def timed_pass(wc: WorkCenter, ids: list[UUID]) -> dict[str, Any]:
    latencies = []
    cpu0 = time.process_time()
    start = time.perf_counter()
    for item_id in ids:
        t0 = time.perf_counter()
        detail(wc, item_id)
        latencies.append(time.perf_counter() - t0)
    elapsed = time.perf_counter() - start
    cpu = time.process_time() - cpu0
    return {
        "per_s": round(len(ids) / elapsed, 1),
        "per_cpu_s": round(len(ids) / cpu, 1),
        "median_ms": ms(statistics.median(latencies)),
        "p95_ms": ms(percentile(latencies, 0.95)),
    }


def bench_finished(n: int) -> dict[str, Any]:
    with fresh_db("finished") as path:
        wc = open_wc(path)
        t0 = time.perf_counter()
        ids = [finish_item(wc, i) for i in range(n)]
        build_s = time.perf_counter() - t0
        events = wc.event_count()
        wc.close()

        con = sqlite3.connect(path)
        snapshots = con.execute("SELECT count(*) FROM stored_snapshots").fetchone()[0]
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        con.close()
        main, wal = file_bytes(path)
        tables = table_bytes(path)

        wc = open_wc(path)
        cold = timed_pass(wc, ids)  # fresh WorkCenter: every aggregate rebuilt from the store
        warm = timed_pass(wc, ids)  # same WorkCenter: cached states, fast-forward query each
        wc.close()
    return {
        "finished_items": n,
        "actions_per_item": ACTIONS_PER_FINISHED_ITEM,
        "build_seconds": round(build_s, 2),
        "events": events,
        "events_per_item": round(events / n, 1),
        "snapshots": snapshots,
        "db_bytes": main,
        "wal_bytes": wal,
        "bytes_per_item": round((main + wal) / n),
        "bytes_per_event": round((main + wal) / events),
        "table_bytes": tables,
        "detail_cold": cold,
        "detail_warm": warm,
    }


# --- 5. loading a long Action ------------------------------------------------------


def build_long_action(wc: WorkCenter, events: int) -> tuple[UUID, float]:
    """One Action with ``events`` events: planned, claimed, then renewed and renewed."""
    item = plan(wc, create_item(wc, 0), 1)
    claim = wc.claim_next("bench-worker")
    assert claim is not None
    renewals = events - 2
    t0 = time.perf_counter()
    for _ in range(renewals):
        if not wc.renew_lease(claim):
            raise RuntimeError("renewal refused")
    renew_s = time.perf_counter() - t0
    assert wc.action(claim.action_id).version == events
    del item
    return claim.action_id, renew_s


def time_load(
    path: str, action_id: UUID, events: int, *, snapshots: bool, reps: int
) -> tuple[float, Any]:
    samples = []
    action = None
    for _ in range(reps):
        wc = open_wc(path, FakeClock(), snapshots=snapshots)  # empty aggregate cache
        gc.collect()
        t0 = time.perf_counter()
        action = wc.action(action_id)
        samples.append(time.perf_counter() - t0)
        wc.close()
        assert action.version == events
    return statistics.median(samples), action


def bench_long_action(events: int, reps: int) -> dict[str, Any]:
    with fresh_db(f"action{events}") as path:
        wc = open_wc(path, FakeClock())
        action_id, renew_s = build_long_action(wc, events)
        wc.close()
        con = sqlite3.connect(path)
        count, newest = con.execute(
            "SELECT count(*), max(originator_version) FROM stored_snapshots"
            " WHERE originator_id = ?",
            (action_id.hex,),
        ).fetchone()
        con.close()
        with_snap, from_snapshot = time_load(path, action_id, events, snapshots=True, reps=reps)
        without, replayed = time_load(path, action_id, events, snapshots=False, reps=reps)
        assert from_snapshot == replayed, "a snapshot load differs from a full replay"
    renewals = events - 2
    return {
        "events": events,
        "snapshots_of_action": count,
        "newest_snapshot_version": newest,
        "load_ms_with_snapshots": ms(with_snap),
        "load_ms_without_snapshots": ms(without),
        "renewals_per_s": round(renewals / renew_s, 1) if renewals else None,
    }


# --- report ------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    cpu = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(
                (line.split(":", 1)[1].strip() for line in f if line.startswith("model name")),
                cpu,
            )
    except OSError:
        pass
    return {
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "loadavg_at_start": os.getloadavg(),
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "eventsourcing": version("eventsourcing"),
        "pydantic": version("pydantic"),
        "orjson": version("orjson"),
        "snapshot_interval": SNAPSHOT_INTERVAL,
    }


Run = dict[str, Any]


def median_run(runs: list[Run], key: Callable[[Run], float]) -> Run:
    """The run whose key figure is the median (the lower middle for an even count)."""
    ordered = sorted(runs, key=key)
    chosen = dict(ordered[(len(ordered) - 1) // 2])
    if len(runs) > 1:
        chosen["all_runs"] = [key(r) for r in runs]
    return chosen


def ratio(value: float, bar: float) -> str:
    return f"{value / bar:.1f}x"


def cpu_rate(run: Run) -> str:
    """The rate by this process's CPU time: less disturbed by other load than wall time."""
    return f"{run['per_cpu_s']:,.0f}/CPU-s"


def spread(run: Run) -> str:
    runs = run.get("all_runs")
    return f", runs {min(runs):,.0f}-{max(runs):,.0f}" if runs else ""


def render(results: dict[str, Any], out: Callable[[str], None]) -> None:
    m = results["machine"]
    out(
        f"machine: {m['nproc']} cpu ({m['cpu']}), Python {m['python']}, SQLite {m['sqlite']},"
        f" eventsourcing {m['eventsourcing']}, load avg at start {m['loadavg_at_start'][0]:.2f}"
    )
    changed = {k: v for k, v in results["what_if"].items() if v}
    if changed:
        out(f"WHAT-IF RUN, not the default configuration: {changed}")
    rows: list[tuple[str, str, str, str]] = []
    c = results["creates"]
    rows.append(
        (
            "creates/s",
            f"{c['per_s']:,.0f}",
            f"{BAR['creates_per_s']:,}",
            f"{ratio(c['per_s'], BAR['creates_per_s'])}  (median {c['median_ms']} ms,"
            f" {cpu_rate(c)}{spread(c)})",
        )
    )
    for cy in results["cycles"]:
        key = f"cycles_per_s_{cy['backlog']}"
        bar = BAR.get(key)
        rows.append(
            (
                f"run cycles/s, {cy['backlog']:,} ready",
                f"{cy['per_s']:,.0f}",
                f"{bar:,}" if bar else "-",
                (ratio(cy["per_s"], bar) if bar else "-")
                + f"  (median {cy['cycle_median_ms']} ms, {cpu_rate(cy)}{spread(cy)})",
            )
        )
        rows.append(
            (
                f"  claim_next alone, {cy['backlog']:,} ready",
                f"{cy['claim_median_ms']} ms",
                "-",
                f"p95 {cy['claim_p95_ms']} ms, backlog {cy['backlog_min']}-{cy['backlog_max']}",
            )
        )
    f = results["finished"]
    for label, key in (("cold cache", "detail_cold"), ("warm cache", "detail_warm")):
        d = f[key]
        rows.append(
            (
                f"detail reads/s, {label}",
                f"{d['per_s']:,.0f}",
                f"{BAR['detail_reads_per_s']:,}",
                f"{ratio(d['per_s'], BAR['detail_reads_per_s'])}  (median {d['median_ms']} ms,"
                f" {cpu_rate(d)}" + (f"{spread(f)})" if key == "detail_warm" else ")"),
            )
        )
    rows.append(
        (
            "bytes per finished item",
            f"{f['bytes_per_item']:,}",
            "-",
            f"{f['events_per_item']} events/item, {f['bytes_per_event']} B/event",
        )
    )
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    out("")
    out(f"{'measure':<{widths[0]}}  {'value':>{widths[1]}}  {'bar':>{widths[2]}}  vs bar")
    for r in rows:
        out(f"{r[0]:<{widths[0]}}  {r[1]:>{widths[1]}}  {r[2]:>{widths[2]}}  {r[3]}")
    out("")
    out("Action load on a fresh WorkCenter (median of runs):")
    out(f"{'events':>7}  {'snapshots':>9}  {'with snapshots':>15}  {'without':>10}  renewals/s")
    for a in results["long_action"]:
        snap = f"{a['snapshots_of_action']} (v{a['newest_snapshot_version']})"
        out(
            f"{a['events']:>7,}  {snap:>9}  {a['load_ms_with_snapshots']:>12} ms"
            f"  {a['load_ms_without_snapshots']:>7} ms  {a['renewals_per_s'] or '-'}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke check")
    parser.add_argument("--json", action="store_true", help="JSON on stdout, table on stderr")
    parser.add_argument(
        "--action-events",
        help="comma-separated Action sizes for the load-time section (default 10,1000,10000)",
    )
    parser.add_argument(
        "--synchronous",
        choices=("FULL", "NORMAL", "OFF"),
        help="what-if: set PRAGMA synchronous on every connection (the store's default: NORMAL)",
    )
    parser.add_argument(
        "--statement-cache",
        type=int,
        help="what-if: sqlite3 statement cache size (the library's setting amounts to 1)",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="run sections 1-3 this many times and report the median run (shared machines)",
    )
    args = parser.parse_args()
    what_if(args.synchronous, args.statement_cache)

    quick = args.quick
    creates = 300 if quick else 2_000
    window = 96 if quick else 320
    finished = 100 if quick else 500
    long_sizes = (10, 1_000) if quick else (10, 1_000, 10_000)
    if args.action_events:
        long_sizes = tuple(int(n) for n in args.action_events.split(","))
    reps = 3 if quick else 5

    results: dict[str, Any] = {
        "machine": machine(),
        "quick": quick,
        "what_if": {"synchronous": args.synchronous, "statement_cache": args.statement_cache},
    }
    log(f"creates ({creates}) ...")
    results["creates"] = median_run(
        [bench_creates(creates) for _ in range(args.repeat)], lambda r: r["per_s"]
    )
    results["cycles"] = []
    for backlog in (500, 2_000):
        log(f"run cycles with {backlog} ready ({window} timed) ...")
        runs = [bench_cycles(backlog, window) for _ in range(args.repeat)]
        results["cycles"].append(median_run(runs, lambda r: r["per_s"]))
    log(f"finished items ({finished} x {ACTIONS_PER_FINISHED_ITEM} Actions) ...")
    results["finished"] = median_run(
        [bench_finished(finished) for _ in range(args.repeat)],
        lambda r: r["detail_warm"]["per_s"],
    )
    results["long_action"] = []
    for size in long_sizes:
        log(f"one Action with {size:,} events ...")
        results["long_action"].append(bench_long_action(size, reps))
    results["loadavg_at_end"] = os.getloadavg()

    render(results, log if args.json else print)
    if args.json:
        print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
