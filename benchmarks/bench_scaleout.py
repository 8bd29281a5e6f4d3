"""Run cycles per second with 1, 2 and 4 worker processes, on PostgreSQL and on SQLite,
and the reference store's single process, in one invocation (issue 10).

Run from the repository root (the reference kit set up once, see bench_peer.py)::

    .venv/bin/python benchmarks/bench_scaleout.py                 # N = 500, 3 repetitions
    .venv/bin/python benchmarks/bench_scaleout.py --json out.json
    .venv/bin/python benchmarks/bench_scaleout.py --claims        # ADR-0034's comparison

The work is bench_peer's B: N WorkItems, each a linear item with one stage and its
Action claimable; then K worker processes (``--workers 1,2,4``) run cycles
(``claim_next``, ``renew_lease``, ``finish_run`` completed, which makes the item
done) until none is left. The processes open the store and wait at a barrier; the
clock runs from the barrier to the last process's exit, so process start-up is not
counted. Cycles/s is N over that time. PostgreSQL is ``--postgres URL`` (default the
local test server, a fresh schema per repetition, dropped after). Writers keep the
read models inline, as the reference store keeps its rows (the default deployment).
PostgreSQL runs twice per worker count: with the durable default, and with
``WORKCENTER_POSTGRES_SYNCHRONOUS_COMMIT=off`` (``-commit-off``, ADR-0053); each
PostgreSQL row shows the table lock's hold per write (median and p95 over every
write of the run, from the reply that granted the lock to the commit's reply) and
the ceiling it implies, 1 / median (ADR-0052).

``--claims`` compares, on PostgreSQL with 4 workers and the views kept asynchronously
(the scale-out mode), the optimistic claim (read the oldest ready Actions from the
work queue, decide on the aggregates, save; a lost race is a version conflict and
the next candidate is tried) against one that takes each candidate's work-queue row
with ``SELECT ... FOR UPDATE SKIP LOCKED`` and holds it while claiming, so two workers
never try the same Action. It reports cycles/s and the wasted attempts per claim
(candidates tried and not won).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any
from uuid import UUID

from bench_peer import PeerKitMissing, create, find_kit, peer_rep, report

from workcenter.application import WorkCenter
from workcenter.service_layer.handlers import claim as claiming

DEFAULT_POSTGRES = "postgresql://postgres@127.0.0.1:5432/test"
LEASE = 30.0
COMMIT_OFF = {"WORKCENTER_POSTGRES_SYNCHRONOUS_COMMIT": "off"}


# --- one worker process ------------------------------------------------------------


def worker(store: str, name: str, ready: str, go: str, out: str, mode: str) -> None:
    inline = mode == "inline"
    tried = [0]
    try_claim = claiming._try_claim

    def counted(*args: Any) -> Any:
        tried[0] += 1
        return try_claim(*args)

    claiming._try_claim = counted  # type: ignore[assignment]
    if mode == "skip_locked":
        claiming.claim_next = skip_locked_claim_next  # type: ignore[assignment]
    with WorkCenter.open(
        store, boot_id=f"{name}-{os.getpid()}", inline_projections=inline, create=False
    ) as wc:
        holds = _collect_lock_holds(wc)
        Path(ready).touch()
        while not os.path.exists(go):
            time.sleep(0.001)
        cycles = 0
        while (claim := wc.claim_next(name, lease_seconds=LEASE)) is not None:
            if not wc.renew_lease(claim, lease_seconds=LEASE):
                raise RuntimeError("renewal refused")
            wc.finish_run(claim, report(claim.action_id))
            cycles += 1
    Path(out).write_text(json.dumps({"cycles": cycles, "tried": tried[0], "holds": holds}))


def _collect_lock_holds(wc: WorkCenter) -> list[Any]:
    """The PostgreSQL recorder's per-write lock holds (ADR-0052), collected from here on;
    none on SQLite."""
    recorder = wc.store.recorder
    if not hasattr(recorder, "lock_holds"):
        return []
    recorder.lock_holds = []
    return recorder.lock_holds  # type: ignore[no-any-return]


def skip_locked_claim_next(wc: Any, worker: str, lease: Any, by: Any) -> Any:
    """The claim with each candidate row taken by ``FOR UPDATE SKIP LOCKED`` and held
    until the claim is saved (only with the views kept by a runner: an inline view
    would wait for the row its own command holds)."""
    from workcenter.projections.sql import transaction

    work_queue = wc.work_queue()
    for _ in range(claiming.CLAIM_PAGE):
        with transaction(work_queue.datastore, commit=False) as c:
            c.execute(
                "SELECT action_id FROM wq_actions WHERE status = 'ready' AND held = 0"
                " ORDER BY ready_since, sequence LIMIT 1 FOR UPDATE SKIP LOCKED"
            )
            row = c.fetchone()
            if row is None:
                return None
            claim = claiming._try_claim(wc, UUID(row[0]), worker, lease, by)
            if claim is not None:
                return claim
        wc.work_queue()  # the row was stale: catch the view up before the next
    return None


# --- the controller ----------------------------------------------------------------


def seed(store: str, n: int) -> None:
    with WorkCenter.open(store, boot_id="seeder") as wc:
        for i in range(n):
            create(wc, i)


def drain(
    store: str, workers: int, mode: str, extra_env: dict[str, str] | None = None
) -> dict[str, Any]:
    """Seconds for ``workers`` processes to run every cycle, and claims tried per cycle."""
    with tempfile.TemporaryDirectory(prefix="wc-scaleout-") as directory:
        d = Path(directory)
        env = os.environ | {"PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
        env |= extra_env or {}
        procs = [
            subprocess.Popen(
                [
                    sys.executable,
                    __file__,
                    "--worker",
                    store,
                    f"w{k}",
                    str(d / f"w{k}.ready"),
                    str(d / "go"),
                    str(d / f"w{k}.json"),
                    mode,
                ],
                env=env,
            )
            for k in range(workers)
        ]
        while not all((d / f"w{k}.ready").exists() for k in range(workers)):
            if any(p.poll() not in (None, 0) for p in procs):
                raise RuntimeError("a worker failed to start")
            time.sleep(0.01)
        started = time.perf_counter()
        (d / "go").touch()
        for p in procs:
            if p.wait() != 0:
                raise RuntimeError(f"a worker exited with {p.returncode}")
        seconds = time.perf_counter() - started
        results = [json.loads((d / f"w{k}.json").read_text()) for k in range(workers)]
    cycles = sum(r["cycles"] for r in results)
    holds = [hold[0] for r in results for hold in r.get("holds", ())]
    return {
        "seconds": seconds,
        "cycles": cycles,
        "tried": sum(r["tried"] for r in results),
        "holds": holds,
    }


class Stores:
    """A fresh store per repetition: a SQLite file, or a PostgreSQL schema."""

    def __init__(self, postgres: str) -> None:
        self.postgres = postgres

    def fresh(self, backend: str) -> tuple[str, Any]:
        if backend == "sqlite":
            directory = tempfile.mkdtemp(prefix="wc-scaleout-db-", dir=_tmp())
            return str(Path(directory) / "bench.db"), lambda: _rmtree(directory)
        schema = f"bench_{uuid.uuid4().hex[:10]}"
        return f"{self.postgres}?schema={schema}", lambda: _drop(self.postgres, schema)


def _tmp() -> str | None:
    return "/dev/shm" if os.access("/dev/shm", os.W_OK) else None


def _rmtree(directory: str) -> None:
    import shutil

    shutil.rmtree(directory, ignore_errors=True)


def _drop(url: str, schema: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def measure(
    stores: Stores,
    backend: str,
    workers: int,
    n: int,
    mode: str,
    extra_env: dict[str, str] | None = None,
) -> dict[str, float]:
    store, cleanup = stores.fresh(backend)
    try:
        seed(store, n)
        result = drain(store, workers, mode, extra_env)
    finally:
        cleanup()
    if result["cycles"] != n:
        raise RuntimeError(f"{result['cycles']} cycles for {n} items")
    measured = {"cycles_per_s": n / result["seconds"], "tried_per_cycle": result["tried"] / n}
    if result["holds"]:
        # The table lock's hold per write, from the reply that granted it to the commit's.
        holds = sorted(result["holds"])
        measured["hold_median_ms"] = statistics.median(holds) * 1000
        measured["hold_p95_ms"] = holds[int(0.95 * (len(holds) - 1))] * 1000
    return measured


def median(runs: list[dict[str, float]], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def scaleout(args: argparse.Namespace, stores: Stores) -> dict[str, Any]:
    kit = find_kit(args.peer_kit)
    counts = [int(k) for k in args.workers.split(",")]
    runs: dict[str, list[dict[str, float]]] = {}
    for rep in range(args.reps):
        runs.setdefault("reference", []).append(peer_rep(kit, args.n))
        for backend in ("postgresql", "sqlite"):
            for k in counts:
                runs.setdefault(f"{backend}-{k}", []).append(
                    measure(stores, backend, k, args.n, "inline")
                )
        for k in counts:
            # ADR-0053's weaker setting, reported beside the durable default.
            runs.setdefault(f"postgresql-{k}-commit-off", []).append(
                measure(stores, "postgresql", k, args.n, "inline", COMMIT_OFF)
            )
        print(f"repetition {rep + 1}/{args.reps} done", file=sys.stderr)
    reference = median(runs["reference"], "cycles_per_s")
    rows: dict[str, Any] = {
        "reference": {
            "cycles_per_s": reference,
            "ratio": 1.0,
            "reps": [r["cycles_per_s"] for r in runs["reference"]],
        }
    }
    for key, rep_runs in runs.items():
        if key == "reference":
            continue
        value = median(rep_runs, "cycles_per_s")
        per_rep = [
            r["cycles_per_s"] / p["cycles_per_s"]
            for r, p in zip(rep_runs, runs["reference"], strict=True)
        ]
        rows[key] = {
            "cycles_per_s": value,
            "ratio": value / reference,
            "spread": [min(per_rep), max(per_rep)],
            "tried_per_cycle": median(rep_runs, "tried_per_cycle"),
            "reps": [r["cycles_per_s"] for r in rep_runs],
        }
        if "hold_median_ms" in rep_runs[0]:
            rows[key]["hold_median_ms"] = median(rep_runs, "hold_median_ms")
            rows[key]["hold_p95_ms"] = median(rep_runs, "hold_p95_ms")
    return {"n": args.n, "reps": args.reps, "rows": rows}


def claims(args: argparse.Namespace, stores: Stores) -> dict[str, Any]:
    rows: dict[str, Any] = {}
    for mode in ("optimistic", "skip_locked"):
        rep_runs = [measure(stores, "postgresql", 4, args.n, mode) for _ in range(args.reps)]
        rows[mode] = {
            "cycles_per_s": median(rep_runs, "cycles_per_s"),
            "tried_per_cycle": median(rep_runs, "tried_per_cycle"),
            "reps": rep_runs,
        }
    return {"n": args.n, "reps": args.reps, "workers": 4, "rows": rows}


def render(result: dict[str, Any]) -> None:
    print(f"N = {result['n']}, {result['reps']} repetitions (medians)")
    print(f"{'':24} {'cycles/s':>10} {'ratio':>7} {'spread':>13} {'tried/claim':>12}")
    for key, row in result["rows"].items():
        spread = row.get("spread")
        shown = f"{spread[0]:.2f}..{spread[1]:.2f}" if spread else ""
        ratio = f"{row['ratio']:.2f}" if "ratio" in row else ""
        tried = f"{row['tried_per_cycle']:.2f}" if "tried_per_cycle" in row else ""
        hold = ""
        if "hold_median_ms" in row:
            ceiling = 1000 / row["hold_median_ms"]
            hold = (
                f"  lock hold {row['hold_median_ms']:.2f} ms median,"
                f" {row['hold_p95_ms']:.2f} ms p95 (ceiling {ceiling:,.0f} writes/s)"
            )
        print(f"{key:24} {row['cycles_per_s']:>10.1f} {ratio:>7} {shown:>13} {tried:>12}{hold}")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(*sys.argv[2:8])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=500)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--postgres", default=DEFAULT_POSTGRES)
    parser.add_argument("--peer-kit", default=None)
    parser.add_argument("--claims", action="store_true", help="ADR-0034's claim comparison")
    parser.add_argument("--json", default=None, help="write the figures to this file")
    args = parser.parse_args()
    stores = Stores(args.postgres)
    try:
        result = claims(args, stores) if args.claims else scaleout(args, stores)
    except PeerKitMissing as missing:
        raise SystemExit(str(missing)) from None
    render(result)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
