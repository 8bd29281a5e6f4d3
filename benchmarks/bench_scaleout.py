"""Run cycles per second with 1, 4 and 16 worker processes, on PostgreSQL and on SQLite,
each Action's executor waiting W ms, and the reference store's single process, in one
invocation (issues 10 and 18).

Run from the repository root (the reference kit set up once, see bench_peer.py)::

    .venv/bin/python benchmarks/bench_scaleout.py                    # about 10 minutes
    .venv/bin/python benchmarks/bench_scaleout.py --n 100 --n-wait 32 --reps 2 --wait-ms 0,100
    .venv/bin/python benchmarks/bench_scaleout.py --json out.json
    .venv/bin/python benchmarks/bench_scaleout.py --claims           # ADR-0054's comparison

The work is bench_peer's B: N WorkItems, each a linear item with one stage and its
Action claimable; then K worker processes (``--workers 1,4,16``) run cycles
(``claim_next``, ``renew_lease``, the executor's wait of W ms, a stand-in for model
and tool latency, then ``finish_run`` completed, which makes the item done) until
none is left. Each process opens the store and runs one warm-up cycle on an item seeded
for it (the first command of a process pays for its imports, its connections and
their prepared statements: about 0.1 s of CPU, which on 2 cores made 16 starting
workers look slower than one), then waits at a barrier; the clock runs from the
barrier to the end of the last process's last cycle, so start-up and warm-up are not
counted. Nor are the processes' exits (closing their pools and interpreters: about
1.5 s of CPU for 16 workers): a worker that finds the queue empty waits at a second
barrier until every worker has, because an exit inside the window took the two cores
from the others' last cycles (16 workers at W = 100 ran 1.2x faster with the barrier,
two alternated runs each).
Cycles/s is N over that time. N is ``--n`` at W = 0 and, when W > 0, ``--n-wait`` or
10 cycles per worker if that is more (a waiting cycle is long: one worker at W = 500
runs two a second). With fewer, the start and the end weigh on the figure: 16 workers
starting at once claim together, then run in lockstep waves of W, and one worker
taking a fourth item of 48 adds a whole wave (ADR-0077). PostgreSQL is
``--postgres URL`` (default the local test server, a fresh schema per repetition,
dropped after). Writers keep the read models inline, as the reference store keeps
its rows (the default deployment). Each worker process keeps a pool of two
connections (``POSTGRES_POOL_SIZE=2``): sixteen workers of the library's default
five would hold 80 of the server's 100.
PostgreSQL also runs at W = 0 with ``WORKCENTER_POSTGRES_SYNCHRONOUS_COMMIT`` set to
``early-release`` (``-early-release``: the lock released before the flush, the command
still durable at its return, ADR-0088) and to ``off`` (``-commit-off``, ADR-0053), and as
the scale-out deployment of docs/deployment.md (``-scale-out``: the workers with inline
projections off, so their saves write the work queue and the mailbox but not the detail
view, and one projection runner process beside them keeping it, ADR-0116; the row also
shows when the runner had every view current after the workers' last cycle, the rate
counting that time, and the runner's CPU per cycle) beside
the default (``--modes`` chooses which, ``--modes-wait-ms`` at which W; ``no-wire``,
not run unless asked, sends the hot path through psycopg's cursors, ADR-0104); each PostgreSQL
row shows the table lock's hold per write (median and p95 over every write of the run,
from the lock's grant to the commit's end, on the server's clock) and the ceiling it
implies, 1 / median (ADR-0052).

Every figure carries the candidates a claim tried (``Claim.candidates_tried``,
counted, not timed): 1.0 means no claim lost a race to another worker. Each row
also shows the whole machine's CPU per cycle over the measured window (workers,
database server and kernel, from ``/proc/stat``: when it grows with the workers,
contention is wasting work), the workers' own part of it (``time.process_time``)
and, on PostgreSQL, the one-exchange writes the
server sent back to the two-exchange way per cycle (ADR-0070), when there were any.

``--runs-at-once T`` runs each worker process's cycles in T threads at once, as
``workcenter worker --runs-at-once T`` runs its Runs (ADR-0097); N at W > 0 is then at
least 10 cycles per thread.

``--claims`` compares, on PostgreSQL with ``--workers`` processes (default 16) and the
views kept asynchronously (the scale-out mode), three claims: ``held`` (today: each
candidate held by a transaction-scoped advisory lock, others' passed over,
ADR-0054), ``unheld`` (the claim before it: every worker starts at the oldest
ready Action, a lost race is a version conflict and the next candidate is tried)
and ``skip_locked`` (each candidate's work-queue row taken by
``SELECT ... FOR UPDATE SKIP LOCKED`` and held while claiming, ADR-0034).
"""

from __future__ import annotations

import argparse
import bisect
import dataclasses
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from bench_peer import PeerKitMissing, create, find_kit, peer_rep, report

from workcenter.application import WorkCenter
from workcenter.projections import work_queue
from workcenter.projections.runner import ProjectionRunner
from workcenter.service_layer.handlers import claim as claiming

DEFAULT_POSTGRES = "postgresql://postgres@127.0.0.1:5432/test"
LEASE = 30.0
SCALE_OUT = "scale-out"
# The modes other than the default, each run beside it (at W = 0 unless
# ``--modes-wait-ms`` says more): the row's suffix, the workers' mode and environment
# (ADR-0053, ADR-0088).
MODES = {
    "early-release": ("inline", {"WORKCENTER_POSTGRES_SYNCHRONOUS_COMMIT": "early-release"}),
    "commit-off": ("inline", {"WORKCENTER_POSTGRES_SYNCHRONOUS_COMMIT": "off"}),
    # The deployment docs/deployment.md describes: writers with inline projections off,
    # one projection runner process beside them keeping the views (ADR-0116).
    "scale-out": (SCALE_OUT, {}),
    # Not a commit mode: the hot path through psycopg's cursors, not the wire (ADR-0104),
    # for comparing the two in one invocation (``--modes no-wire``).
    "no-wire": ("inline", {"BENCH_NO_WIRE": "1"}),
}
WORKER_ENV = {"POSTGRES_POOL_SIZE": "2", "POSTGRES_MAX_OVERFLOW": "2"}
# (label, workers, W ms, the worker count it is compared with, at least this ratio)
GOALS = [
    ("PostgreSQL, 4 workers >= 1.3x 1 worker at W = 0", 4, 0, 1, 1.3),
    ("PostgreSQL, 16 workers >= 8x 1 worker at W = 100", 16, 100, 1, 8.0),
    ("PostgreSQL, 16 workers >= 12x 1 worker at W = 500", 16, 500, 1, 12.0),
]
CYCLES_PER_WORKER = 10  # at least, when W > 0 (ADR-0077), per Run at once
RUNS_AT_ONCE_ENV = "BENCH_RUNS_AT_ONCE"
TRIED_GOAL = 1.5  # candidates tried per claim with 16 workers, at most


# --- one worker process ------------------------------------------------------------


def worker(
    store: str, name: str, ready: str, go: str, out: str, leave: str, mode: str, wait: str
) -> None:
    inline = mode == "inline"
    if mode == "skip_locked":
        claiming.claim_next = skip_locked_claim_next  # type: ignore[assignment]
    if mode == "unheld":
        work_queue.WorkQueueView._reserved = unheld  # type: ignore[method-assign]
    seconds = float(wait) / 1000
    with WorkCenter.open(
        store, boot_id=f"{name}-{os.getpid()}", inline_projections=inline, create=False
    ) as wc:
        if os.environ.get("BENCH_NO_WIRE"):
            wc.store.recorder.wire = False  # type: ignore[attr-defined]
        gc.freeze()  # as `workcenter worker` does once its store is open (ADR-0110)
        # A worker's first cycle, on the item seeded for it, outside the clock.
        warm = wc.claim_next(name, lease_seconds=LEASE)
        if warm is not None:
            wc.renew_lease(warm, lease_seconds=LEASE)
            wc.finish_run(warm, report(warm.action_id))
        holds = _collect_lock_holds(wc)
        fallbacks = getattr(wc.store.recorder, "fallbacks", 0)
        Path(ready).touch()
        while not os.path.exists(go):
            time.sleep(0.001)
        cpu = time.process_time()
        counted: list[tuple[int, int]] = []

        def cycles_until_none() -> None:
            cycles = tried = 0
            while (claim := wc.claim_next(name, lease_seconds=LEASE)) is not None:
                tried += claim.candidates_tried
                if not wc.renew_lease(claim, lease_seconds=LEASE):
                    raise RuntimeError("renewal refused")
                if seconds:
                    time.sleep(seconds)
                wc.finish_run(claim, report(claim.action_id))
                cycles += 1
            counted.append((cycles, tried))

        # ``--runs-at-once T``: the cycles run in T threads of this process (ADR-0097).
        slots = [
            threading.Thread(target=cycles_until_none)
            for _ in range(int(os.environ.get(RUNS_AT_ONCE_ENV, "1")))
        ]
        for slot in slots:
            slot.start()
        for slot in slots:
            slot.join()
        if len(counted) != len(slots):
            raise RuntimeError("a thread of the worker failed")
        cycles = sum(c for c, _ in counted)
        tried = sum(t for _, t in counted)
        ended = time.time()  # the clock stops here, not at the process's exit
        cpu = time.process_time() - cpu
        fallbacks = getattr(wc.store.recorder, "fallbacks", 0) - fallbacks
        figures = {
            "cycles": cycles,
            "tried": tried,
            "holds": holds,
            "ended": ended,
            "fallbacks": fallbacks,
            "cpu": cpu,
        }
        Path(f"{out}.part").write_text(json.dumps(figures))
        os.rename(f"{out}.part", out)
        # A worker that found the queue empty stays until every worker has: its exit
        # (closing its pool and interpreter, about 0.1 s of CPU) would otherwise compete
        # with the last cycles of the others, inside the measured window.
        while not os.path.exists(leave):
            time.sleep(0.02)


def runner(store: str, ready: str, stop: str, out: str) -> None:
    """The scale-out mode's projection runner (ADR-0116): follows the log while the
    workers run; once ``stop`` exists (every worker has ended), it writes when every view
    reached the head and its own CPU."""
    with WorkCenter.open(
        store, boot_id=f"runner-{os.getpid()}", inline_projections=False, create=False
    ) as wc:
        gc.freeze()
        with ProjectionRunner(wc) as follower:
            Path(ready).touch()
            cpu = time.process_time()
            while not os.path.exists(stop):
                time.sleep(0.01)
            while any(row.lag for row in follower.status()):
                if follower.error is not None:
                    raise follower.error
                time.sleep(0.001)
            current = time.time()
            cpu = time.process_time() - cpu
        figures = {"current": current, "cpu": cpu, "applied": follower.applied}
        Path(f"{out}.part").write_text(json.dumps(figures))
        os.rename(f"{out}.part", out)


def _collect_lock_holds(wc: WorkCenter) -> list[Any]:
    """The PostgreSQL recorder's per-write lock holds (ADR-0052), collected from here on;
    none on SQLite."""
    recorder = wc.store.recorder
    if not hasattr(recorder, "lock_holds"):
        return []
    recorder.lock_holds = []
    return recorder.lock_holds  # type: ignore[no-any-return]


def unheld(view: Any, c: Any, page: int, catch_up: Any) -> Any:
    """The claim before ADR-0054 on PostgreSQL: the queue's pages, oldest first, unheld
    (the first candidate's reservation, sent with the claim's first read, is not read)."""
    c.execute(work_queue.READY, (page, 0))
    return view._paged([work_queue.Candidate.of(row) for row in c.fetchall()], page)


def skip_locked_claim_next(wc: Any, worker: str, lease: Any, by: Any) -> Any:
    """The claim with each candidate row taken by ``FOR UPDATE SKIP LOCKED`` and held
    until the claim is saved (only with the views kept by a runner: an inline view
    would wait for the row its own command holds)."""
    from workcenter.projections.sql import transaction

    queue = wc.work_queue()
    for tried in range(1, claiming.CLAIM_PAGE + 1):
        with transaction(queue.datastore, commit=False) as c:
            c.execute(
                "SELECT action_id, work_item_id FROM wq_actions"
                " WHERE status = 'ready' AND held = 0"
                " ORDER BY ready_since, sequence LIMIT 1 FOR UPDATE SKIP LOCKED"
            )
            row = c.fetchone()
            if row is None:
                return None
            claim = claiming._try_claim(wc, work_queue.Candidate.of(row), worker, lease, by)
            if claim is not None:
                return dataclasses.replace(claim, candidates_tried=tried)
        wc.work_queue()  # the row was stale: catch the view up before the next
    return None


# --- the controller ----------------------------------------------------------------


def seed(store: str, n: int) -> None:
    with WorkCenter.open(store, boot_id="seeder") as wc:
        for i in range(n):
            create(wc, i)


def drain(
    store: str, workers: int, mode: str, wait_ms: int, extra_env: dict[str, str] | None = None
) -> dict[str, Any]:
    """Seconds for ``workers`` processes to run every cycle, and claims tried per cycle."""
    with tempfile.TemporaryDirectory(prefix="wc-scaleout-") as directory:
        d = Path(directory)
        env = os.environ | WORKER_ENV | {"PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
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
                    str(d / "leave"),
                    mode,
                    str(wait_ms),
                ],
                env=env,
            )
            for k in range(workers)
        ]
        ready = [d / f"w{k}.ready" for k in range(workers)]
        if mode == SCALE_OUT:
            # Stopped by ``leave``, once it has caught up with the workers' last events.
            runner_args = ["--runner", store, str(d / "runner.ready"), str(d / "leave")]
            runner_args.append(str(d / "runner.json"))
            procs.append(subprocess.Popen([sys.executable, __file__, *runner_args], env=env))
            ready.append(d / "runner.ready")
        while not all(path.exists() for path in ready):
            if any(p.poll() not in (None, 0) for p in procs):
                raise RuntimeError("a worker or the runner failed to start")
            time.sleep(0.01)
        started = time.time()  # wall clock: the workers' ends are read on the same one
        machine = MachineCPU()
        (d / "go").touch()
        try:
            while not all((d / f"w{k}.json").exists() for k in range(workers)):
                if any(p.poll() not in (None, 0) for p in procs):
                    raise RuntimeError("a worker failed")
                time.sleep(0.01)
            results = [json.loads((d / f"w{k}.json").read_text()) for k in range(workers)]
            seconds = max(r["ended"] for r in results) - started
            busy = machine.busy_seconds(started, started + seconds)
        finally:
            (d / "leave").touch()  # also when one failed: the others must not wait on
        for p in procs:
            if p.wait() != 0:
                raise RuntimeError(f"a worker or the runner exited with {p.returncode}")
        views = json.loads((d / "runner.json").read_text()) if mode == SCALE_OUT else None
    cycles = sum(r["cycles"] for r in results)
    holds = [hold[0] for r in results for hold in r.get("holds", ())]
    return {
        "seconds": seconds,
        "cycles": cycles,
        "tried": sum(r["tried"] for r in results),
        "holds": holds,
        "fallbacks": sum(r.get("fallbacks", 0) for r in results),
        "busy": busy,
        "workers_cpu": sum(r.get("cpu", 0.0) for r in results),
        # When the runner had every view at the head, after the workers' last cycle.
        "views_after": None if views is None else views["current"] - started - seconds,
        "runner_cpu": None if views is None else views["cpu"],
    }


class MachineCPU:
    """The whole machine's busy CPU time (every process: workers, the database server,
    the kernel), sampled from ``/proc/stat`` every 20 ms by a thread, to read over the
    measured window only (not the workers' start or exit). None off Linux."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, int]] = []
        self.running = Path("/proc/stat").exists()
        if self.running:
            threading.Thread(target=self._sample, daemon=True).start()

    def _sample(self) -> None:
        while self.running:
            fields = [int(v) for v in Path("/proc/stat").read_text().split()[1:9]]
            busy = sum(fields) - fields[3] - fields[4]  # all but idle and iowait
            self.samples.append((time.time(), busy))
            time.sleep(0.02)

    def busy_seconds(self, start: float, end: float) -> float | None:
        self.running = False
        times = [t for t, _ in self.samples]
        if len(times) < 2:
            return None
        first = self.samples[max(bisect.bisect_left(times, start) - 1, 0)]
        last = self.samples[min(bisect.bisect_left(times, end), len(times) - 1)]
        return (last[1] - first[1]) / os.sysconf("SC_CLK_TCK")


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
    wait_ms: int = 0,
    extra_env: dict[str, str] | None = None,
) -> dict[str, float]:
    store, cleanup = stores.fresh(backend)
    try:
        seed(store, n + workers)  # one warm-up item per worker
        result = drain(store, workers, mode, wait_ms, extra_env)
    finally:
        cleanup()
    if result["cycles"] != n:
        raise RuntimeError(f"{result['cycles']} cycles for {n} items")
    measured = {
        "cycles_per_s": n / result["seconds"],
        "tried_per_cycle": result["tried"] / n,
        "fallbacks_per_cycle": result["fallbacks"] / n,
    }
    if result["busy"] is not None:
        # Every process's CPU per cycle: it grows when contention wastes work. The
        # workers' own share of it tells theirs from the database server's.
        measured["machine_cpu_ms"] = result["busy"] / n * 1000
        measured["workers_cpu_ms"] = result["workers_cpu"] / n * 1000
    if result["views_after"] is not None:
        measured["views_after_ms"] = result["views_after"] * 1000
        measured["runner_cpu_ms"] = result["runner_cpu"] / n * 1000
        # The rate with the views' catching up counted in: every view current at the end.
        measured["views_cycles_per_s"] = n / (result["seconds"] + result["views_after"])
    if result["holds"]:
        # The table lock's hold per write, from its grant to the commit's end (server clock).
        holds = sorted(result["holds"])
        measured["hold_median_ms"] = statistics.median(holds) * 1000
        measured["hold_p95_ms"] = holds[int(0.95 * (len(holds) - 1))] * 1000
    return measured


def median(runs: list[dict[str, float]], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def scaleout(args: argparse.Namespace, stores: Stores) -> dict[str, Any]:
    kit = find_kit(args.peer_kit)
    counts = [int(k) for k in args.workers.split(",")]
    waits = [int(w) for w in args.wait_ms.split(",")]
    modes = [m for m in args.modes.split(",") if m]
    unknown = sorted(set(modes) - set(MODES))
    if unknown:
        raise SystemExit(f"--modes: unknown {', '.join(unknown)} (known: {', '.join(MODES)})")
    mode_waits = [int(w) for w in args.modes_wait_ms.split(",")]
    slots = {RUNS_AT_ONCE_ENV: str(args.runs_at_once)}
    t = args.runs_at_once
    runs: dict[str, list[dict[str, float]]] = {}
    for rep in range(args.reps):
        runs.setdefault("reference", []).append(peer_rep(kit, args.n))
        for wait in waits:
            for backend in ("postgresql", "sqlite"):
                for k in counts:
                    n = args.n if wait == 0 else max(args.n_wait, CYCLES_PER_WORKER * k * t)
                    runs.setdefault(key(backend, k, wait), []).append(
                        measure(stores, backend, k, n, "inline", wait, slots)
                    )
        for suffix in modes:
            for wait in mode_waits:
                for k in counts:
                    n = args.n if wait == 0 else max(args.n_wait, CYCLES_PER_WORKER * k * t)
                    mode, env = MODES[suffix]
                    runs.setdefault(f"{key('postgresql', k, wait)}-{suffix}", []).append(
                        measure(stores, "postgresql", k, n, mode, wait, env | slots)
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
    for name, rep_runs in runs.items():
        if name == "reference":
            continue
        value = median(rep_runs, "cycles_per_s")
        per_rep = [
            r["cycles_per_s"] / p["cycles_per_s"]
            for r, p in zip(rep_runs, runs["reference"], strict=True)
        ]
        rows[name] = {
            "cycles_per_s": value,
            "ratio": value / reference,
            "spread": [min(per_rep), max(per_rep)],
            "tried_per_cycle": median(rep_runs, "tried_per_cycle"),
            "reps": [r["cycles_per_s"] for r in rep_runs],
        }
        if "machine_cpu_ms" in rep_runs[0]:
            rows[name]["machine_cpu_ms"] = median(rep_runs, "machine_cpu_ms")
            rows[name]["workers_cpu_ms"] = median(rep_runs, "workers_cpu_ms")
        rows[name]["fallbacks_per_cycle"] = median(rep_runs, "fallbacks_per_cycle")
        if "hold_median_ms" in rep_runs[0]:
            rows[name]["hold_median_ms"] = median(rep_runs, "hold_median_ms")
            rows[name]["hold_p95_ms"] = median(rep_runs, "hold_p95_ms")
        if "views_after_ms" in rep_runs[0]:
            for figure in ("views_after_ms", "runner_cpu_ms", "views_cycles_per_s"):
                rows[name][figure] = median(rep_runs, figure)
            rows[name]["views_ratio"] = rows[name]["views_cycles_per_s"] / reference
    return {
        "n": args.n,
        "n_wait": args.n_wait,
        "runs_at_once": t,
        "reps": args.reps,
        "rows": rows,
        "scaling": scaling(runs, counts, waits),
    }


def key(backend: str, workers: int, wait_ms: int) -> str:
    return f"{backend}-{workers}w-W{wait_ms}"


def scaling(
    runs: dict[str, list[dict[str, float]]], counts: list[int], waits: list[int]
) -> dict[str, Any]:
    """Each worker count over one worker of the same database and W, per repetition
    (the two were measured in the same repetition), and the goals' verdicts."""
    ratios: dict[str, Any] = {}
    for backend in ("postgresql", "sqlite"):
        for wait in waits:
            one = runs.get(key(backend, 1, wait))
            for k in counts:
                many = runs.get(key(backend, k, wait))
                if one is None or many is None or k == 1:
                    continue
                per_rep = [
                    m["cycles_per_s"] / o["cycles_per_s"] for m, o in zip(many, one, strict=True)
                ]
                ratios[key(backend, k, wait)] = {
                    "over_one": statistics.median(per_rep),
                    "spread": [min(per_rep), max(per_rep)],
                }
    goals = []
    for label, k, wait, _, floor in GOALS:
        found = ratios.get(key("postgresql", k, wait))
        if found is not None:
            goals.append(
                {"goal": label, "value": found["over_one"], "met": found["over_one"] >= floor}
            )
    tried = [
        statistics.median(r["tried_per_cycle"] for r in rep_runs)
        for name, rep_runs in runs.items()
        if name.startswith("postgresql-16w")
    ]
    if tried:
        goals.append(
            {
                "goal": f"PostgreSQL, 16 workers: candidates tried per claim <= {TRIED_GOAL}",
                "value": max(tried),
                "met": max(tried) <= TRIED_GOAL,
            }
        )
    return {"ratios": ratios, "goals": goals}


def claims(args: argparse.Namespace, stores: Stores) -> dict[str, Any]:
    rows: dict[str, Any] = {}
    workers = int(args.workers) if args.workers.isdigit() else 16
    for mode in ("held", "unheld", "skip_locked"):
        rep_runs = [measure(stores, "postgresql", workers, args.n, mode) for _ in range(args.reps)]
        rows[mode] = {
            "cycles_per_s": median(rep_runs, "cycles_per_s"),
            "tried_per_cycle": median(rep_runs, "tried_per_cycle"),
            "reps": rep_runs,
        }
    return {"n": args.n, "reps": args.reps, "workers": workers, "rows": rows}


def render(result: dict[str, Any]) -> None:
    waits = (
        f", {result['n_wait']} or {CYCLES_PER_WORKER} per worker at W > 0"
        if "n_wait" in result
        else ""
    )
    at_once = result.get("runs_at_once", 1)
    slots = f", {at_once} Runs at once per worker process" if at_once > 1 else ""
    print(f"N = {result['n']} at W = 0{waits}, {result['reps']} repetitions (medians){slots}")
    print(f"{'':24} {'cycles/s':>10} {'ratio':>7} {'spread':>13} {'tried/claim':>12}")
    for name, row in result["rows"].items():
        spread = row.get("spread")
        shown = f"{spread[0]:.2f}..{spread[1]:.2f}" if spread else ""
        ratio = f"{row['ratio']:.2f}" if "ratio" in row else ""
        tried = f"{row['tried_per_cycle']:.2f}" if "tried_per_cycle" in row else ""
        hold = ""
        if "machine_cpu_ms" in row:
            hold += (
                f"  CPU {row['machine_cpu_ms']:.1f} ms/cycle"
                f" ({row['workers_cpu_ms']:.1f} in workers)"
            )
        if row.get("fallbacks_per_cycle"):
            hold += f"  fallbacks {row['fallbacks_per_cycle']:.2f}/cycle"
        if "hold_median_ms" in row:
            ceiling = 1000 / row["hold_median_ms"]
            hold += (
                f"  lock hold {row['hold_median_ms']:.2f} ms median,"
                f" {row['hold_p95_ms']:.2f} ms p95 (ceiling {ceiling:,.0f} writes/s)"
            )
        if "views_after_ms" in row:
            hold += (
                f"  views current {row['views_after_ms']:.0f} ms after the last cycle"
                f" ({row['views_cycles_per_s']:.1f} cycles/s, {row['views_ratio']:.2f}x, counting"
                f" it; runner CPU {row['runner_cpu_ms']:.1f} ms/cycle)"
            )
        print(f"{name:24} {row['cycles_per_s']:>10.1f} {ratio:>7} {shown:>13} {tried:>12}{hold}")
    if "scaling" not in result:
        return
    print(f"\n{'over 1 worker':24} {'median':>10} {'spread':>13}")
    for name, ratio in result["scaling"]["ratios"].items():
        low, high = ratio["spread"]
        print(f"{name:24} {ratio['over_one']:>9.2f}x {low:>6.2f}..{high:.2f}")
    for goal in result["scaling"]["goals"]:
        verdict = "MET" if goal["met"] else "NOT MET"
        print(f"{goal['goal']}: {goal['value']:.2f} {verdict}")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(*sys.argv[2:10])
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--runner":
        runner(*sys.argv[2:6])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=300, help="items at W = 0")
    parser.add_argument("--n-wait", type=int, default=48, help="items when W > 0")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--workers", default="1,4,16")
    parser.add_argument(
        "--runs-at-once",
        type=int,
        default=1,
        help="each worker process runs its cycles in this many threads (ADR-0097)",
    )
    parser.add_argument("--wait-ms", default="0,100,500", help="the executor's wait, W")
    parser.add_argument(
        "--modes",
        default="early-release,commit-off,scale-out",
        help="the modes run beside the default (comma-separated; empty for none):"
        f" {', '.join(MODES)}",
    )
    parser.add_argument(
        "--modes-wait-ms", default="0", help="the values of W at which those modes run"
    )
    parser.add_argument("--postgres", default=DEFAULT_POSTGRES)
    parser.add_argument("--peer-kit", default=None)
    parser.add_argument("--claims", action="store_true", help="ADR-0054's claim comparison")
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
