"""What the hash chain costs (issue 12, ADR-0028): the write path with the chain on
and off, side by side in one run, and how fast `audit verify` walks a store.

Run from the repository root::

    .venv/bin/python benchmarks/bench_hash_chain.py                 # N=500, 5 repetitions
    .venv/bin/python benchmarks/bench_hash_chain.py --n 2000 --reps 3
    .venv/bin/python benchmarks/bench_hash_chain.py --json out.json  # also the raw figures

Each repetition opens two fresh stores, one with ``WORKCENTER_HASH_CHAIN=off`` and one
with it on (which goes first alternates), and times N creates (a started one-stage
linear item) then N run cycles (claim, renew, finish). Rates are given by wall time
and by this process's CPU time, which other load on a shared machine disturbs less;
the ratio is chain-on over chain-off per repetition, its median and its spread
(min-max). Then, on the last chain-on store: `verify_history` over the whole store
and over one item (events/s), and the migration that chains an unchained store when
it is opened (the chain-off store, reopened with the chain on). Also counted: SQL
statements per create and per run cycle, on and off. A plain script, not a test.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from workcenter.adapters.sql_counts import create, per_unit, run_cycle
from workcenter.application import WorkCenter
from workcenter.service_layer.history.hash_chain import HASH_CHAIN_ENV

COUNTED = 30


def log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@contextmanager
def chain_setting(on: bool) -> Iterator[None]:
    before = os.environ.get(HASH_CHAIN_ENV)
    os.environ[HASH_CHAIN_ENV] = "on" if on else "off"
    try:
        yield
    finally:
        if before is None:
            del os.environ[HASH_CHAIN_ENV]
        else:
            os.environ[HASH_CHAIN_ENV] = before


def timed(work: Callable[[], None]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process) of ``work``."""
    gc.collect()
    wall, cpu = time.perf_counter(), time.process_time()
    work()
    return time.perf_counter() - wall, time.process_time() - cpu


def file_bytes(path: Path) -> int:
    con = sqlite3.connect(path)
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()
    return sum(p.stat().st_size for p in path.parent.iterdir() if p.name.startswith(path.name))


def one_store(path: Path, n: int, on: bool) -> dict[str, float]:
    with chain_setting(on):
        wc = WorkCenter.open(path, boot_id="bench-boot")
        try:
            create_wall, create_cpu = timed(lambda: [create(wc, i) for i in range(n)] and None)
            cycle_wall, cycle_cpu = timed(lambda: [run_cycle(wc) for _ in range(n)] and None)
        finally:
            wc.close()
    return {
        "creates_per_s": n / create_wall,
        "creates_per_cpu_s": n / create_cpu,
        "cycles_per_s": n / cycle_wall,
        "cycles_per_cpu_s": n / cycle_cpu,
        "bytes": file_bytes(path),
    }


def counts(directory: Path, on: bool) -> dict[str, float]:
    with chain_setting(on):
        wc = WorkCenter.open(directory / f"count-{on}.db", boot_id="bench-boot")
        try:
            for i in range(5):
                create(wc, -i)
                run_cycle(wc)
            serial = iter(range(COUNTED))
            per_create = per_unit(wc, lambda: create(wc, next(serial)), COUNTED)
            per_cycle = per_unit(wc, lambda: run_cycle(wc), COUNTED)
        finally:
            wc.close()
    return {"create": per_create["queries"], "run_cycle": per_cycle["queries"]}


def verify_rates(chained: Path, unchained: Path) -> dict[str, float]:
    with WorkCenter.open(chained, boot_id="bench-verify") as wc:
        events = wc.event_count()
        item = wc.list_work_items()[0]["id"]
        store_wall, store_cpu = timed(lambda: _ok(wc.maintenance.verify_history()))
        item_events = [0]

        def one_item() -> None:
            for _ in range(100):
                item_events[0] = _ok(wc.maintenance.verify_history(item))

        item_wall, _ = timed(one_item)
    migrate_wall, _ = timed(lambda: WorkCenter.open(unchained, boot_id="bench-migrate").close())
    with WorkCenter.open(unchained, boot_id="bench-migrate") as wc:
        _ok(wc.maintenance.verify_history())
    return {
        "events": events,
        "verify_events_per_s": events / store_wall,
        "verify_events_per_cpu_s": events / store_cpu,
        "item_events": item_events[0],
        "verify_item_ms": item_wall / 100 * 1000,
        "migrate_events_per_s": events / migrate_wall,
    }


def _ok(verdict: Any) -> int:
    if not verdict.ok:
        raise RuntimeError(f"the benchmark's own store does not verify: {verdict.broken}")
    return int(verdict.events)


KEYS = ("creates_per_s", "creates_per_cpu_s", "cycles_per_s", "cycles_per_cpu_s", "bytes")


def run(n: int, reps: int) -> dict[str, Any]:
    on: list[dict[str, float]] = []
    off: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="workcenter-bench-chain-") as name:
        directory = Path(name)
        for rep in range(reps):
            order = (True, False) if rep % 2 == 0 else (False, True)
            for chained in order:
                log(f"repetition {rep + 1}/{reps}: chain {'on' if chained else 'off'} ...")
                path = directory / f"rep{rep}-{'on' if chained else 'off'}.db"
                (on if chained else off).append(one_store(path, n, chained))
        log("verify and migrate ...")
        verify = verify_rates(
            directory / f"rep{reps - 1}-on.db", directory / f"rep{reps - 1}-off.db"
        )
        statements = {"on": counts(directory, True), "off": counts(directory, False)}
    figures = {}
    for key in KEYS:
        ratios = [a[key] / b[key] for a, b in zip(on, off, strict=True)]
        figures[key] = {
            "on": round(statistics.median(r[key] for r in on), 1),
            "off": round(statistics.median(r[key] for r in off), 1),
            "ratio": round(statistics.median(ratios), 3),
            "spread": [round(min(ratios), 3), round(max(ratios), 3)],
        }
    return {"n": n, "reps": reps, "figures": figures, "verify": verify, "statements": statements}


def render(result: dict[str, Any]) -> None:
    print(f"N = {result['n']}, {result['reps']} alternating repetitions (median; ratio on/off)")
    print(f"{'':22}{'chain on':>12}{'chain off':>12}{'ratio':>8}  spread")
    for key, row in result["figures"].items():
        low, high = row["spread"]
        print(f"{key:22}{row['on']:>12,.1f}{row['off']:>12,.1f}{row['ratio']:>8.3f}  {low}-{high}")
    s = result["statements"]
    print(
        f"statements per create: {s['on']['create']:.1f} on, {s['off']['create']:.1f} off; "
        f"per run cycle: {s['on']['run_cycle']:.1f} on, {s['off']['run_cycle']:.1f} off"
    )
    v = result["verify"]
    print(
        f"verify: {v['events']:,} events at {v['verify_events_per_s']:,.0f} events/s "
        f"({v['verify_events_per_cpu_s']:,.0f}/CPU-s); one item ({v['item_events']} events) "
        f"in {v['verify_item_ms']:.2f} ms; migration on open {v['migrate_events_per_s']:,.0f} "
        "events/s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=500, help="creates and run cycles per store")
    parser.add_argument("--reps", type=int, default=5, help="alternating repetitions")
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    args = parser.parse_args()
    result = run(args.n, args.reps)
    render(result)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
