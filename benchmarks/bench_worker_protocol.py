"""Remote workers over HTTP beside in-process workers, in one invocation (issue 19).

Run from the repository root::

    .venv/bin/python benchmarks/bench_worker_protocol.py                 # 1, 8, 32 workers
    .venv/bin/python benchmarks/bench_worker_protocol.py --quick         # fewer Actions
    .venv/bin/python benchmarks/bench_worker_protocol.py --json out.json
    .venv/bin/python benchmarks/bench_worker_protocol.py --backends sqlite,postgres

For each backend, worker count and repetition, on a fresh store each time (a
SQLite file, or a PostgreSQL schema of ``--postgres``, dropped afterwards):

- **in-process**: ``N`` threads of this process share one ``WorkCenter`` and run
  cycles of ``claim_next``, ``renew_lease`` and ``finish_run`` (the echo report);
- **http**: ``workcenter serve`` runs in its own process on 127.0.0.1 and ``N``
  threads of this process run the same cycle through the worker protocol
  (``/api/worker/claim`` without waiting, ``renew``, ``finish``), each with its
  own keep-alive connection.

Both drain the same plan (``--actions`` Actions, eight per dynamic WorkItem, all
claimable at once). It reports run cycles/s (Actions finished over the drain's
wall time), the ratio http / in-process with its spread over the repetitions, and
the latency of each verb (p50, p95) as the worker sees it. Loopback only; the
clients' own load (threads in this process) is in the figures. A plain script,
not a test: the figures depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from workcenter.application import WorkCenter

CLI = "from workcenter.adapters.cli import main; main()"
PER_ITEM = 8
VERBS = ("claim", "renew", "finish")
MAX_FAILURES = 20  # per worker thread; a failed cycle's Run stays claimed until its lease lapses


def plan(db: str, actions: int) -> None:
    with WorkCenter.open(db) as wc:
        for n in range(max(1, actions // PER_ITEM)):
            item = wc.create_work_item(
                title=f"bench item {n}",
                goal="Drain the Actions",
                acceptance_criteria=["Every Action ran"],
                delivery_target="response",
                start=True,
            )
            steps = [
                {
                    "type": "implement",
                    "objective": f"Step {k} of item {n}",
                    "approach": "Echo",
                    "expectedOutcome": "Done",
                    "workspaceMode": "read",
                }
                for k in range(PER_ITEM)
            ]
            wc.plan_actions(item.id, expected_version=item.version, actions=steps)


def report(criteria: list[str] | tuple[str, ...]) -> dict[str, Any]:
    return {
        "outcome": "completed",
        "summary": "echo",
        "evidence": ["bench"],
        "acceptanceChecks": [{"criterion": c, "status": "passed"} for c in criteria],
    }


class Drain:
    """``workers`` threads running ``cycle`` until it returns False, timed."""

    def __init__(self) -> None:
        self.latencies: dict[str, list[float]] = {verb: [] for verb in VERBS}
        self.lock = threading.Lock()
        self.finished = 0
        self.errors: list[str] = []

    def timed(self, verb: str, call: Callable[[], Any]) -> Any:
        began = time.perf_counter()
        result = call()
        with self.lock:
            self.latencies[verb].append(time.perf_counter() - began)
        return result

    def run(self, workers: int, cycle: Callable[[], bool]) -> float:
        def loop() -> None:
            failures = 0
            while failures < MAX_FAILURES:
                try:
                    if not cycle():
                        return
                except Exception as error:  # a benchmark reports and goes on
                    failures += 1
                    with self.lock:
                        self.errors.append(f"{type(error).__name__}: {error}")
                    continue
                with self.lock:
                    self.finished += 1

        threads = [threading.Thread(target=loop) for _ in range(workers)]
        began = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return time.perf_counter() - began


def in_process(db: str, workers: int) -> tuple[Drain, float]:
    drain = Drain()
    with WorkCenter.open(db) as wc:
        names = iter(range(10_000))
        local = threading.local()

        def cycle() -> bool:
            if not hasattr(local, "name"):
                local.name = f"w{next(names)}"
            claim = drain.timed("claim", lambda: wc.claim_next(local.name))
            if claim is None:
                return False
            drain.timed("renew", lambda: wc.renew_lease(claim))
            drain.timed("finish", lambda: wc.finish_run(claim, report(claim.acceptance_criteria)))
            return True

        seconds = drain.run(workers, cycle)
    return drain, seconds


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def over_http(db: str, workers: int) -> tuple[Drain, float]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.endswith("_TOKEN")}
    env.pop("WORKCENTER_TOKEN_FILE", None)
    command = [sys.executable, "-c", CLI, "--db", db, "serve", "--port", str(port)]
    server = subprocess.Popen(
        [*command, "--log-level", "warning"], env=env, stdout=subprocess.DEVNULL
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(base + "/api/work-items", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("workcenter serve did not start")
            time.sleep(0.1)
        drain = Drain()
        names = iter(range(10_000))
        local = threading.local()

        def cycle() -> bool:
            if not hasattr(local, "http"):
                local.http = httpx.Client(base_url=base, timeout=60)
                local.name = f"h{next(names)}"
            http: httpx.Client = local.http
            answer = drain.timed(
                "claim",
                lambda: http.post("/api/worker/claim", json={"worker": local.name}),
            )
            if answer.status_code == 204:
                return False
            answer.raise_for_status()
            claimed = answer.json()
            fence = claimed["fence"]
            renewed = drain.timed(
                "renew", lambda: http.post("/api/worker/renew", json={"fence": fence})
            )
            renewed.raise_for_status()
            body = {"fence": fence, "report": report(claimed["acceptanceCriteria"])}
            done = drain.timed("finish", lambda: http.post("/api/worker/finish", json=body))
            done.raise_for_status()
            return True

        seconds = drain.run(workers, cycle)
        return drain, seconds
    finally:
        server.send_signal(signal.SIGINT)
        try:
            server.wait(20)
        except subprocess.TimeoutExpired:
            server.kill()


def quantile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def fresh_store(backend: str, postgres: str) -> tuple[str, Callable[[], None]]:
    if backend == "sqlite":
        directory = tempfile.mkdtemp(prefix="wc-remote-bench-")
        return str(Path(directory) / "bench.db"), lambda: shutil.rmtree(directory, True)
    schema = f"bench_{uuid.uuid4().hex[:10]}"

    def drop() -> None:
        import psycopg

        with psycopg.connect(postgres, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')

    return f"{postgres}?schema={schema}", drop


def measure(kind: str, workers: int, actions: int, backend: str, postgres: str) -> dict[str, Any]:
    db, cleanup = fresh_store(backend, postgres)
    try:
        plan(db, actions)
        drain, seconds = (in_process if kind == "in-process" else over_http)(db, workers)
    finally:
        cleanup()
    return {
        "backend": backend,
        "kind": kind,
        "workers": workers,
        "finished": drain.finished,
        "seconds": seconds,
        "cycles_per_second": drain.finished / seconds,
        "error_count": len(drain.errors),
        "errors": drain.errors[:5],
        "latency_ms": {
            verb: {
                "p50": 1000 * quantile(values, 0.50),
                "p95": 1000 * quantile(values, 0.95),
            }
            for verb, values in drain.latencies.items()
        },
    }


def line(result: dict[str, Any]) -> str:
    return (
        f"{result['backend']:>8} {result['kind']:>10} {result['workers']:>2} workers: "
        f"{result['cycles_per_second']:7.1f} cycles/s "
        f"({result['finished']} in {result['seconds']:.2f} s) "
        + " ".join(
            f"{verb} p50 {lat['p50']:.1f} p95 {lat['p95']:.1f} ms"
            for verb, lat in result["latency_ms"].items()
        )
        + (f" errors {result['error_count']}: {result['errors'][:2]}" if result["errors"] else "")
    )


def summary(runs: list[dict[str, Any]], backend: str, workers: int) -> str:
    rates = {
        kind: [
            r["cycles_per_second"] for r in runs if r["workers"] == workers and r["kind"] == kind
        ]
        for kind in ("in-process", "http")
    }
    ratios = [h / i for h, i in zip(rates["http"], rates["in-process"], strict=True)]
    return (
        f"{backend:>8} {workers:>2} workers: http / in-process = "
        f"{statistics.median(ratios):.2f}x (min {min(ratios):.2f}, max {max(ratios):.2f}; "
        f"in-process median {statistics.median(rates['in-process']):.1f}, "
        f"http median {statistics.median(rates['http']):.1f} cycles/s)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", default="1,8,32")
    parser.add_argument("--actions", type=int, default=160)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="48 Actions, 1 repetition")
    parser.add_argument("--json", default=None, help="write the figures to this file")
    parser.add_argument("--backends", default="sqlite", help="sqlite, postgres or both")
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/test")
    args = parser.parse_args()
    actions, reps = (48, 1) if args.quick else (args.actions, args.reps)
    runs: list[dict[str, Any]] = []
    backends = args.backends.split(",")
    for backend in backends:
        for workers in (int(n) for n in args.workers.split(",")):
            for rep in range(reps):
                # Alternate the order, so neither kind always runs on a warmer machine.
                kinds = ("in-process", "http") if rep % 2 == 0 else ("http", "in-process")
                for kind in kinds:
                    result = measure(kind, workers, actions, backend, args.postgres)
                    runs.append(result)
                    print(line(result), flush=True)
    print()
    for backend in backends:
        for workers in sorted({r["workers"] for r in runs}):
            print(summary([r for r in runs if r["backend"] == backend], backend, workers))
    if args.json:
        Path(args.json).write_text(json.dumps(runs, indent=2))


if __name__ == "__main__":
    main()
