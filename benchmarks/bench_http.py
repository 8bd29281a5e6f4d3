"""A bounded load test of the HTTP API on 127.0.0.1 (issue 11).

Run from the repository root::

    .venv/bin/python benchmarks/bench_http.py              # 20 clients, 200 Actions, 2 workers
    .venv/bin/python benchmarks/bench_http.py --quick      # 5 clients, 40 Actions
    .venv/bin/python benchmarks/bench_http.py --json       # JSON on stdout

What it does (docs/performance.md, "The HTTP API under load", gives the results):

1. plans the Actions on a fresh store: ``items`` dynamic WorkItems with
   ``actions / items`` Actions each;
2. starts ``workcenter serve`` (a separate process, uvicorn, the default settings)
   and ``clients`` client threads, each holding a change stream open
   (``/api/stream``) and reading detail DTOs (``GET /api/work-items/{id}``, an item
   picked at random) back to back;
3. starts two ``workcenter worker`` processes (the echo executor) that drain the
   Actions, and stops the clients once both have exited and every stream has
   reached the head of the event sequence.

It reports every error (a status other than 200, a broken connection, a stream that
skipped or repeated a position), the latency of the detail reads (p50, p95, p99,
max) and their rate while the workers drain and, for comparison, during three
seconds before they start, how long the workers took, and the changes each stream
received. The clients run in this process (threads), so its own load is in the
latencies too.
It is a plain script, not a test: the figures depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from workcenter.application import WorkCenter

CLI = "from workcenter.adapters.cli import main; main()"
STREAM_TIMEOUT = httpx.Timeout(60.0)
PLAN_AT_ONCE = 8  # the most Actions one plan may add
IDLE_SECONDS = 3.0


@dataclass
class ClientLog:
    latencies: list[tuple[float, float]] = field(default_factory=list)  # (began, seconds)
    errors: list[str] = field(default_factory=list)
    positions: list[int] = field(default_factory=list)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def plan(db: Path, items: int, actions: int) -> list[str]:
    ids = []
    per_item = actions // items
    with WorkCenter.open(db) as wc:
        for n in range(items):
            item = wc.create_work_item(
                title=f"load item {n}",
                goal="Drain the Actions",
                acceptance_criteria=["Every Action ran"],
                delivery_target="response",
                start=True,
            )
            for first in range(0, per_item, PLAN_AT_ONCE):
                planned = [
                    {
                        "type": "implement",
                        "objective": f"Step {k} of item {n}",
                        "approach": "Echo",
                        "expectedOutcome": "Done",
                        "workspaceMode": "read",
                    }
                    for k in range(first, min(per_item, first + PLAN_AT_ONCE))
                ]
                item = wc.plan_actions(item.id, expected_version=item.version, actions=planned)
            ids.append(str(item.id))
    return ids


def cli(db: Path, *args: str) -> list[str]:
    return [sys.executable, "-c", CLI, *args, "--db", str(db)]


def wait_until_up(base: str, server: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError("workcenter serve exited")
        try:
            if httpx.get(base + "/api/work-items", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.1)
    raise RuntimeError("workcenter serve did not start")


def stream(base: str, start: int, log: ClientLog, stop: threading.Event) -> None:
    """One client's change stream, from ``start``, checked for gaps and repeats."""
    expected = start + 1
    try:
        with (
            httpx.Client(base_url=base, timeout=STREAM_TIMEOUT) as http,
            http.stream("GET", "/api/stream", params={"after": start}) as response,
        ):
            if response.status_code != 200:
                log.errors.append(f"stream: status {response.status_code}")
                return
            for line in response.iter_lines():
                if not line.startswith("id: "):
                    continue
                position = int(line[4:])
                if position != expected:
                    log.errors.append(f"stream: position {position}, expected {expected}")
                expected = position + 1
                log.positions.append(position)
                if stop.is_set():
                    return
    except httpx.HTTPError as error:
        if not stop.is_set():
            log.errors.append(f"stream: {type(error).__name__}: {error}")


def reader(base: str, ids: list[str], log: ClientLog, stop: threading.Event, seed: int) -> None:
    pick = random.Random(seed)
    with httpx.Client(base_url=base, timeout=30) as http:
        while not stop.is_set():
            item_id = pick.choice(ids)
            began = time.perf_counter()
            try:
                response = http.get(f"/api/work-items/{item_id}")
            except httpx.HTTPError as error:
                log.errors.append(f"detail: {type(error).__name__}: {error}")
                continue
            log.latencies.append((began, time.perf_counter() - began))
            if response.status_code != 200 or "ETag" not in response.headers:
                log.errors.append(f"detail: status {response.status_code}")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def summary(latencies: list[float], seconds: float) -> dict[str, float]:
    """Detail reads per second and their latency in milliseconds."""
    if not latencies:
        return {"reads": 0}
    return {
        "reads": len(latencies),
        "per_second": round(len(latencies) / seconds, 1),
        "p50_ms": round(1000 * statistics.median(latencies), 1),
        "p95_ms": round(1000 * percentile(latencies, 0.95), 1),
        "p99_ms": round(1000 * percentile(latencies, 0.99), 1),
        "max_ms": round(1000 * max(latencies), 1),
    }


def run(clients: int, actions: int, items: int, workers: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-http-") as directory:
        db = Path(directory) / "workcenter.db"
        ids = plan(db, items, actions)
        with WorkCenter.open(db) as wc:
            start_position = wc.event_count()
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        env = os.environ | {"PYTHONUNBUFFERED": "1"}
        server = subprocess.Popen(
            cli(db, "serve", "--port", str(port), "--log-level", "warning"), env=env
        )
        try:
            wait_until_up(base, server)
            stop = threading.Event()
            logs = [ClientLog() for _ in range(clients)]
            threads = [
                threading.Thread(target=stream, args=(base, start_position, log, stop))
                for log in logs
            ] + [
                threading.Thread(target=reader, args=(base, ids, log, stop, n))
                for n, log in enumerate(logs)
            ]
            for thread in threads:
                thread.start()
            time.sleep(0.5)  # every client connected
            idle_from = time.perf_counter()
            time.sleep(IDLE_SECONDS)  # reads with no writer, for comparison
            began = time.perf_counter()
            drained = [
                subprocess.Popen(
                    cli(
                        db,
                        "worker",
                        "--executor",
                        "workcenter.adapters.executors:echo",
                        "--name",
                        f"w{n}",
                        "--exit-when-idle",
                        "--poll",
                        "0.05",
                        "--json",
                    ),
                    env=env,
                    stdout=subprocess.PIPE,
                )
                for n in range(workers)
            ]
            stats = [json.loads(p.communicate(timeout=600)[0]) for p in drained]
            drained_at = time.perf_counter()
            drain_seconds = drained_at - began
            with WorkCenter.open(db) as wc:
                head = wc.event_count()
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and any(
                (log.positions[-1] if log.positions else start_position) < head for log in logs
            ):
                time.sleep(0.05)
            stop.set()
            # Streams end when the server closes their connections below.
            for thread in threads[clients:]:
                thread.join(30)
        finally:
            server.terminate()
            server.wait(30)
        for thread in threads[:clients]:
            thread.join(30)
    errors = [e for log in logs for e in log.errors]
    streamed = [len(log.positions) for log in logs]
    reads = [entry for log in logs for entry in log.latencies]
    idle = [seconds for at, seconds in reads if idle_from <= at < began]
    busy = [seconds for at, seconds in reads if began <= at < drained_at]
    return {
        "clients": clients,
        "streams": clients,
        "actions": actions,
        "items": items,
        "workers": workers,
        "finished_runs": sum(s["finished"] for s in stats),
        "worker_errors": sum(s["errors"] for s in stats),
        "drain_seconds": round(drain_seconds, 2),
        "events": head - start_position,
        "streamed_per_client": {"min": min(streamed), "max": max(streamed)},
        "detail_reads": len(reads),
        "while_draining": summary(busy, drain_seconds),
        "without_writers": summary(idle, began - idle_from),
        "errors": len(errors),
        "error_samples": errors[:5],
        "load_average": os.getloadavg(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--actions", type=int, default=200)
    parser.add_argument("--items", type=int, default=20)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.clients, args.actions, args.items = 5, 40, 4
    result = run(args.clients, args.actions, args.items, args.workers)
    if args.json:
        print(json.dumps(result))
        return
    for key, value in result.items():
        print(f"{key:>24}: {value}")
    if result["errors"] or result["finished_runs"] != args.actions:
        sys.exit(1)


if __name__ == "__main__":
    main()
