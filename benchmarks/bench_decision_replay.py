"""How fast the replay check of Coordinator decisions runs (issue 20, ADR-0061), beside
the raw rate of reading and decoding the same events.

Run from the repository root::

    .venv/bin/python benchmarks/bench_decision_replay.py                   # 1,000 items
    .venv/bin/python benchmarks/bench_decision_replay.py --items 200 --reps 5
    .venv/bin/python benchmarks/bench_decision_replay.py --store /tmp/replay.db  # kept

The store is made of demo items (``workcenter demo``'s walkthrough, driven by the
scripted Coordinator: six decisions of four kinds and about 137 events each), built
once and reused when ``--store`` names one that holds enough items. Each repetition
times, in one process: reading and decoding every item's events (the read the replay
starts with), then ``replay_decisions()`` over the whole store (the read again, the
fold, and today's parse and apply on every judged reply). Rates by wall time and by
this process's CPU time; median and spread (min-max) over the repetitions. Nothing
of the reference store does this, so there is no side-by-side ratio. A plain
script, not a test.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from workcenter.adapters.demo import run_demo
from workcenter.application import WorkCenter


def log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def build(path: Path, items: int) -> None:
    with WorkCenter.open(path) as wc:
        have = len(wc.list_work_items())
        started = time.perf_counter()
        for n in range(have, items):
            run_demo(wc)
            if (n + 1) % 100 == 0:
                log(f"  built {n + 1} items ({time.perf_counter() - started:.0f} s)")


def timed(action: Any) -> tuple[Any, float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    result = action()
    return result, time.perf_counter() - wall, time.process_time() - cpu


def spread(values: list[float], digits: int = 0) -> str:
    median, low, high = statistics.median(values), min(values), max(values)
    return f"{median:,.{digits}f} ({low:,.{digits}f}-{high:,.{digits}f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=1_000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--store", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None, help="also write the raw figures")
    args = parser.parse_args()
    folder = tempfile.mkdtemp(prefix="bench-replay-")
    path = args.store or Path(folder) / "store.db"
    log(f"store {path}: building up to {args.items} demo items")
    build(path, args.items)
    runs: list[dict[str, float]] = []
    with WorkCenter.open(path, create=False, inline_projections=False) as wc:
        ids = [row["id"] for row in wc.list_work_items()][: args.items]
        audit = wc._maintenance._decisions  # the query the verb runs, without the CLI
        for rep in range(args.reps):
            events, read_wall, read_cpu = timed(lambda: sum(len(audit.events(i)) for i in ids))
            report, wall, cpu = timed(wc.maintenance.replay_decisions)
            assert report.same and report.items == len(ids), report.json()["differs"]
            turns = len(report.results)
            runs.append(
                {
                    "items": len(ids),
                    "events": events,
                    "turns": turns,
                    "read_wall_s": read_wall,
                    "read_cpu_s": read_cpu,
                    "replay_wall_s": wall,
                    "replay_cpu_s": cpu,
                }
            )
            log(
                f"rep {rep + 1}: read+decode {events / read_wall:,.0f} events/s; replay "
                f"{len(ids)} items, {turns} decisions in {wall:.1f} s "
                f"({turns / wall:,.0f} turns/s, {report.events / wall:,.0f} events/s)"
            )
    items, events, turns = runs[0]["items"], runs[0]["events"], runs[0]["turns"]
    print(f"{items} items, {events} events, {turns} judged replies; per repetition:")
    print(f"  replay wall s        {spread([r['replay_wall_s'] for r in runs], 1)}")
    print(f"  replay turns/s wall  {spread([turns / r['replay_wall_s'] for r in runs])}")
    print(f"  replay turns/s cpu   {spread([turns / r['replay_cpu_s'] for r in runs])}")
    print(f"  replay events/s wall {spread([events / r['replay_wall_s'] for r in runs])}")
    print(f"  replay events/s cpu  {spread([events / r['replay_cpu_s'] for r in runs])}")
    print(f"  read+decode events/s wall {spread([events / r['read_wall_s'] for r in runs])}")
    print(f"  read+decode events/s cpu  {spread([events / r['read_cpu_s'] for r in runs])}")
    if args.json:
        args.json.write_text(json.dumps(runs, indent=2))


if __name__ == "__main__":
    main()
