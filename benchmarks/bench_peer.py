"""Workcenter side by side with the reference store it replaces, in one invocation.

Run from the repository root (after the reference kit's ``setup.sh``, once)::

    .venv/bin/python benchmarks/bench_peer.py                      # N = 500, 3 repetitions
    .venv/bin/python benchmarks/bench_peer.py --sizes 500,2000     # also N = 2,000
    .venv/bin/python benchmarks/bench_peer.py --json out.json      # figures for the docs
    .venv/bin/python benchmarks/bench_peer.py --synchronous FULL   # Workcenter with FULL

The reference store is the original JavaScript Work Center store, run by the
kit's ``run.sh`` (``--peer-kit DIR`` or ``$WORKCENTER_PEER_KIT``; default
``../shared/peer-bench`` next to the repository). Repetitions alternate:
reference, Workcenter, reference, Workcenter, ... each on a fresh database
file, so both see the same machine load. The same work on both sides:

A. create N WorkItems, each with its first Action claimable (a linear item with
   one stage, started: item, ledger and ready Action in one command);
B. N run cycles: ``claim_next``, ``renew_lease``, ``finish_run`` completed with one
   evidence string (and one passed check per criterion), which makes the item done;
C. the browser detail read of each item (``wc.detail``), right after those writes;
D. bytes on disk after close, WAL checkpointed.

With ``--floor``, each Workcenter repetition also times A's floor: the event
rows a create writes (four since ADR-0046), already encoded (taken from a real
create), inserted through the library's own recorder with Workcenter's SQLite
settings, one transaction per create, and nothing else: no deciding, validating, encoding,
hash chain or read model. No create can be faster than that, so
``1 / reference rate - 1 / floor rate`` is the time a create may spend on all
of its own work and still match the reference store.

Each figure is the median of the repetitions; the ratio is Workcenter over the
reference and the spread is the min..max of the per-repetition ratios. Then,
counted rather than timed: SQL statements and commits per create and per run
cycle (SQLite's trace callback on the library's connections).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

from bench_core import file_bytes, fresh_db, log, machine
from eventsourcing.persistence import StoredEvent

from workcenter.adapters.sql_counts import per_unit
from workcenter.application import WorkCenter
from workcenter.service_layer.history import hash_chain

REPO = Path(__file__).resolve().parent.parent
KIT_ENV = "WORKCENTER_PEER_KIT"
DEFAULT_KIT = REPO.parent / "shared" / "peer-bench"
CRITERIA = ("Completed work is completed", "Waiting work is waiting")
WORKER = "bench-worker"
COUNTED = 50  # creates and cycles traced for the statement counts

# (key, label, goal, higher is better)
GOALS: list[tuple[str, str, float, bool]] = [
    ("creates_per_s", "A create an item with its first Action, claimable (/s)", 1.0, True),
    ("cycles_per_s", "B run cycle: claim, renew, finish completed, item done (/s)", 2.0, True),
    ("reads_per_s", "C detail read, right after those writes (/s)", 2.0, True),
    ("size_bytes", "D bytes on disk after close (WAL checkpointed)", 3.0, False),
]
GOAL_N = 500  # the size the goals are set at, but for the run cycles' at LARGE_N
LARGE_N = 2_000
LARGE_CYCLES_GOAL = 4.0
FLOOR_CREATES = 5_000  # the floor's run is short: at least this many, for a steadier rate

Figures = dict[str, float]
VERDICT = {True: "MET", False: "NOT MET", None: ""}


# --- the reference store -------------------------------------------------------------


class PeerKitMissing(Exception):
    pass


def find_kit(option: str | None) -> Path:
    kit = Path(option or os.environ.get(KIT_ENV) or DEFAULT_KIT)
    if not (kit / "run.sh").is_file():
        raise PeerKitMissing(
            f"the reference store's kit is not at {kit}: give --peer-kit DIR or ${KIT_ENV}"
            " (the directory with run.sh and setup.sh)"
        )
    peer_dir = Path(os.environ.get("PEER_DIR", "/tmp/workcenter-peer"))
    if not (peer_dir / "node_modules" / "better-sqlite3").is_dir():
        raise PeerKitMissing(
            f"the reference store is not set up in {peer_dir}: run {kit / 'setup.sh'} once"
            " (about 2 minutes, needs node and npm), then run this again"
        )
    return kit


def peer_rep(kit: Path, n: int) -> Figures:
    """One repetition of the reference store (its kit adds an untimed warm-up run)."""
    with tempfile.TemporaryDirectory(prefix="wc-peer-") as directory:
        out = Path(directory) / "peer.json"
        command = [str(kit / "run.sh"), "--n", str(n), "--reps", "1", "--target", "file"]
        subprocess.run(
            [*command, "--json", str(out)],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        rep = json.loads(out.read_text())["results"]["file"]["reps"][0]
    return {
        "creates_per_s": rep["createPerSec"],
        "cycles_per_s": rep["cyclesPerSec"],
        "reads_per_s": rep["readsPerSec"],
        "size_bytes": rep["sizeBytes"],
    }


# --- Workcenter ----------------------------------------------------------------------


def create(wc: WorkCenter, i: int, *, start: bool = True) -> UUID:
    item = wc.create_work_item(
        title=f"Benchmark item {i}",
        goal=f"Complete benchmark work item number {i}",
        acceptance_criteria=CRITERIA,
        mode="linear",
        stages=("implement",),
        start=start,
    )
    return item.id


def report(action_id: UUID) -> dict[str, Any]:
    return {
        "outcome": "completed",
        "summary": f"Completed {action_id}",
        "evidence": [f"{action_id}-evidence"],
        "acceptanceChecks": [
            {"criterion": c, "status": "passed", "evidence": "see the summary"} for c in CRITERIA
        ],
    }


def run_cycle(wc: WorkCenter) -> None:
    claim = wc.claim_next(WORKER)
    if claim is None:
        raise RuntimeError("claim_next found nothing ready")
    if not wc.renew_lease(claim):
        raise RuntimeError("renewal refused")
    action = wc.finish_run(claim, report(claim.action_id))
    if action.status != "completed":
        raise RuntimeError(f"the run did not complete: {action.status}")


def timed(work: Callable[[], None]) -> float:
    gc.collect()
    start = time.perf_counter()
    work()
    return time.perf_counter() - start


def open_store(path: str, synchronous: str | None) -> WorkCenter:
    return WorkCenter.open(path, sqlite_synchronous=synchronous, boot_id="bench-boot")


def wc_rep(n: int, synchronous: str | None) -> Figures:
    with fresh_db("peer") as path:
        wc = open_store(path, synchronous)
        ids: list[UUID] = []
        seconds_a = timed(lambda: ids.extend(create(wc, i) for i in range(n)))
        seconds_b = timed(lambda: [run_cycle(wc) for _ in range(n)] and None)
        if wc.claim_next(WORKER) is not None:
            raise RuntimeError("work left after the run cycles")
        done = [0]

        def read_all() -> None:
            for item_id in ids:
                done[0] += wc.detail(item_id)["status"] == "done"

        seconds_c = timed(read_all)
        if done[0] != n:
            raise RuntimeError(f"{done[0]}/{n} items read back as done")
        wc.close()
        con = sqlite3.connect(path)
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        con.close()
        main, wal = file_bytes(path)
    return {
        "creates_per_s": n / seconds_a,
        "cycles_per_s": n / seconds_b,
        "reads_per_s": n / seconds_c,
        "size_bytes": main + wal,
    }


def create_rows(synchronous: str | None) -> list[StoredEvent]:
    """The event rows of one real create, as the store wrote them."""
    with fresh_db("rows") as path:
        wc = open_store(path, synchronous)
        create(wc, 0)
        rows = wc.store.recorder.select_notifications(start=0, limit=100)
        wc.close()
    return [StoredEvent(r.originator_id, r.originator_version, r.topic, r.state) for r in rows]


def floor_rate(n: int, rows: Sequence[StoredEvent], synchronous: str | None) -> float:
    """Creates per second when a create only inserts its event rows (see the docstring)."""
    previous = os.environ.get(hash_chain.HASH_CHAIN_ENV)
    os.environ[hash_chain.HASH_CHAIN_ENV] = "off"
    try:
        with fresh_db("floor") as path:
            wc = WorkCenter.open(path, sqlite_synchronous=synchronous, inline_projections=False)
            recorder = wc.store.recorder
            batches = []
            for _ in range(n):  # fresh stream ids for each create, the same streams' shape
                ids = {r.originator_id: uuid4() for r in rows}
                batches.append(
                    [
                        StoredEvent(ids[r.originator_id], r.originator_version, r.topic, r.state)
                        for r in rows
                    ]
                )

            def insert_all() -> None:
                for batch in batches:
                    recorder.insert_events(batch)

            seconds = timed(insert_all)
            wc.close()
    finally:
        if previous is None:
            os.environ.pop(hash_chain.HASH_CHAIN_ENV, None)
        else:
            os.environ[hash_chain.HASH_CHAIN_ENV] = previous
    return n / seconds


def counts(synchronous: str | None) -> dict[str, Any]:
    """SQL statements and commits per create, per run cycle (three commands) and per
    detail read right after a create, counted on the store's own connections."""
    with fresh_db("count") as path:
        wc = open_store(path, synchronous)
        for i in range(5):  # warm: tables created, views caught up
            create(wc, -i)
        for _ in range(5):
            run_cycle(wc)
        serial = iter(range(COUNTED * 2))
        per_create = per_unit(wc, lambda: create(wc, next(serial)), COUNTED)
        per_cycle = per_unit(wc, lambda: run_cycle(wc), COUNTED)
        per_read = per_unit(wc, lambda: wc.detail(create(wc, next(serial))), COUNTED)
        wc.close()
    per_read = {k: per_read[k] - per_create[k] for k in per_read}  # the create's share out
    return {
        "create": per_create,
        "run_cycle": per_cycle,
        "commits_per_command": round((per_create["commits"] + per_cycle["commits"]) / 4, 2),
        "detail_read_after_a_create": per_read,
    }


# --- the comparison ------------------------------------------------------------------


def compare(
    n: int, reps: int, kit: Path, synchronous: str | None, rows: Sequence[StoredEvent] | None
) -> dict[str, Any]:
    peer: list[Figures] = []
    mine: list[Figures] = []
    floors: list[float] = []
    for rep in range(reps):
        log(f"N={n} repetition {rep + 1}/{reps}: reference store ...")
        peer.append(peer_rep(kit, n))
        log(f"N={n} repetition {rep + 1}/{reps}: Workcenter ...")
        mine.append(wc_rep(n, synchronous))
        if rows is not None:
            floors.append(floor_rate(max(n, FLOOR_CREATES), rows, synchronous))
    figures: dict[str, dict[str, Any]] = {}
    for key, _label, goal_at_500, higher in GOALS:
        goal: float | None = goal_at_500
        p = statistics.median(r[key] for r in peer)
        w = statistics.median(r[key] for r in mine)
        ratios = [m[key] / q[key] for m, q in zip(mine, peer, strict=True)]
        if key == "cycles_per_s" and n == LARGE_N:
            goal = LARGE_CYCLES_GOAL
        elif n != GOAL_N:
            goal = None  # no goal at this size
        ratio = w / p
        met = None if goal is None else ratio >= goal if higher else ratio <= goal
        figures[key] = {
            "reference": round(p, 1),
            "workcenter": round(w, 1),
            "ratio": round(ratio, 2),
            "spread": [round(min(ratios), 2), round(max(ratios), 2)],
            "goal": "-" if goal is None else f"{'>=' if higher else '<='} {goal}x",
            "met": met,
            "reference_reps": [round(r[key], 1) for r in peer],
            "workcenter_reps": [round(r[key], 1) for r in mine],
        }
    result: dict[str, Any] = {"n": n, "reps": reps, "figures": figures}
    if floors:
        reference = statistics.median(r["creates_per_s"] for r in peer)
        f = statistics.median(floors)
        w = figures["creates_per_s"]["workcenter"]
        result["floor"] = {
            "creates_per_s": round(f, 1),
            "ratio": round(f / reference, 2),
            "spread": [
                round(min(x / q["creates_per_s"] for x, q in zip(floors, peer, strict=True)), 2),
                round(max(x / q["creates_per_s"] for x, q in zip(floors, peer, strict=True)), 2),
            ],
            "reps": [round(x, 1) for x in floors],
            # What a create may spend beyond its rows and still match the reference store,
            # and what it spends today, in microseconds.
            "budget_us": round((1 / reference - 1 / f) * 1e6, 1),
            "spent_us": round((1 / w - 1 / f) * 1e6, 1),
        }
    return result


def render(result: dict[str, Any], out: Callable[[str], None]) -> None:
    m = result["machine"]
    sync = result["synchronous"] or "default"
    out(
        f"machine: {m['nproc']} cpu ({m['cpu']}), Python {m['python']}, SQLite {m['sqlite']},"
        f" load avg at start {m['loadavg_at_start'][0]:.2f}, at end"
        f" {result['loadavg_at_end'][0]:.2f}; Workcenter synchronous: {sync}"
    )
    for run in result["runs"]:
        out("")
        out(f"N = {run['n']:,}, {run['reps']} alternating repetitions, medians")
        out("| same work | reference | Workcenter | ratio | spread | goal | |")
        out("| --- | ---: | ---: | ---: | --- | --- | --- |")
        for key, label, _goal, _higher in GOALS:
            row = run["figures"][key]
            fmt = "{:,.0f}" if key != "size_bytes" else "{:,.0f} B"
            out(
                f"| {label} | {fmt.format(row['reference'])} | {fmt.format(row['workcenter'])}"
                f" | {row['ratio']:.2f}x | {row['spread'][0]:.2f}..{row['spread'][1]:.2f}"
                f" | {row['goal']} | {VERDICT[row['met']]} |"
            )
        floor = run.get("floor")
        if floor:
            out(
                f"A's floor (the create's event rows through the library's recorder, nothing"
                f" else): {floor['creates_per_s']:,.0f}/s, {floor['ratio']:.2f}x the reference"
                f" ({floor['spread'][0]:.2f}..{floor['spread'][1]:.2f}); a create may spend"
                f" {floor['budget_us']:.0f} us beyond its rows to match the reference, and"
                f" spends {floor['spent_us']:.0f} us"
            )
    c = result["counts"]
    out("")
    out(f"Counted over {COUNTED} commands each (SQLite trace callback):")
    out(f"  commits per command: {c['commits_per_command']}")
    for label, key in (
        ("per create", "create"),
        ("per run cycle (3 commands)", "run_cycle"),
        ("per detail read after a create", "detail_read_after_a_create"),
    ):
        k = c[key]
        out(
            f"  {label}: {k['statements']:.1f} SQL statements, {k['commits']:.2f} commits,"
            f" {k['rollbacks']:.1f} read transactions"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="500", help="comma-separated N (e.g. 500,2000)")
    parser.add_argument("--reps", type=int, default=3, help="alternating repetitions per N")
    parser.add_argument(
        "--peer-kit", help=f"the reference kit (default ${KIT_ENV} or {DEFAULT_KIT})"
    )
    parser.add_argument(
        "--synchronous",
        choices=("FULL", "NORMAL"),
        help="Workcenter's SQLite synchronous setting (default: the store's default)",
    )
    parser.add_argument(
        "--floor", action="store_true", help="also time A's floor (see the docstring)"
    )
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    args = parser.parse_args()
    try:
        kit = find_kit(args.peer_kit)
    except PeerKitMissing as missing:
        print(f"bench_peer: {missing}", file=sys.stderr)
        sys.exit(2)

    result: dict[str, Any] = {"machine": machine(), "synchronous": args.synchronous}
    log("warm-up ...")
    wc_rep(20, args.synchronous)
    rows = create_rows(args.synchronous) if args.floor else None
    result["runs"] = [
        compare(int(n), args.reps, kit, args.synchronous, rows) for n in args.sizes.split(",")
    ]
    log("counting statements ...")
    result["counts"] = counts(args.synchronous)
    result["loadavg_at_end"] = os.getloadavg()
    render(result, print)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
