"""One process's PostgreSQL run cycle, taken apart: wall time, the client's CPU, the
server's CPU and the table lock's hold, per cycle (issue 18, ADR-0069).

Run from the repository root (the local test server by default)::

    .venv/bin/python benchmarks/bench_postgres_cycle.py
    .venv/bin/python benchmarks/bench_postgres_cycle.py --cycles 300 --postgres URL

A fresh schema (dropped after) is seeded with bench_peer's items by one store; another
store, as a worker process would, runs 20 warm-up cycles, then ``--cycles`` measured
ones (``claim_next``, ``renew_lease``, ``finish_run``), then as many creates. The
server's CPU is read from ``/proc`` of the server's backends and background processes
(so the server must run on this machine), the client's from ``time.process_time``, the
hold from the recorder's ``lock_holds`` (ADR-0052). To compare two versions of the
code, run each from its own checkout and virtual environment, alternating.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
from bench_peer import create, report

from workcenter.application import WorkCenter

DEFAULT_POSTGRES = "postgresql://postgres@127.0.0.1:5432/test"
SERVER_PROCESSES = ("walwriter", "background writer", "checkpointer", "autovacuum")


def server_ticks(url: str) -> int:
    """CPU ticks (user + system) of every client backend but this one, and of the
    server's background writers."""
    with psycopg.connect(url, autocommit=True) as conn:
        pids = [
            row[0]
            for row in conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE pid <> pg_backend_pid()"
                " AND (backend_type = 'client backend' OR backend_type = ANY(%s))",
                (list(SERVER_PROCESSES),),
            ).fetchall()
        ]
    ticks = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue  # ended meanwhile
        ticks += int(fields[11]) + int(fields[12])  # utime, stime
    return ticks


@contextmanager
def seeded_schema(url: str, items: int, prefix: str) -> Iterator[str]:
    """A fresh schema seeded with ``items`` of bench_peer's items by one store, dropped
    after: yields the store's location."""
    schema = f"{prefix}_{uuid.uuid4().hex[:8]}"
    store = f"{url}?schema={schema}"
    try:
        with WorkCenter.open(store, boot_id="seeder") as wc:
            for i in range(items):
                create(wc, i)
        yield store
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def cycle(wc: WorkCenter) -> None:
    """One worker's run cycle: claim, renew, finish completed."""
    claim = wc.claim_next("worker", lease_seconds=30)
    assert claim is not None
    wc.renew_lease(claim, lease_seconds=30)
    wc.finish_run(claim, report(claim.action_id))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=300)
    parser.add_argument("--postgres", default=DEFAULT_POSTGRES)
    parser.add_argument(
        "--two-exchange", action="store_true", help="every write the ADR-0051 way (ADR-0070)"
    )
    args = parser.parse_args()
    n = args.cycles
    with (
        seeded_schema(args.postgres, n + 20, "bench_cycle") as store,
        WorkCenter.open(store, boot_id="worker", create=False) as wc,
    ):
        recorder: Any = wc.store.recorder
        if args.two_exchange:
            recorder.one_exchange = False
        for _ in range(20):
            cycle(wc)
        holds: list[tuple[float, float]] = []
        wc.store.recorder.lock_holds = holds  # type: ignore[attr-defined]
        ticks = server_ticks(args.postgres)
        wall, cpu = time.perf_counter(), time.process_time()
        for _ in range(n):
            cycle(wc)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        server = (server_ticks(args.postgres) - ticks) / 100  # USER_HZ
        wc.store.recorder.lock_holds = None  # type: ignore[attr-defined]
        created = time.perf_counter()
        for i in range(n):
            create(wc, n + 20 + i)
        created = time.perf_counter() - created
    hold = sorted(h[0] for h in holds)
    print(
        f"run cycle: wall {wall / n * 1000:.2f} ms, client CPU {cpu / n * 1000:.2f} ms,"
        f" server CPU {server / n * 1000:.2f} ms;"
        f" lock hold median {statistics.median(hold) * 1000:.2f} ms,"
        f" p95 {hold[int(0.95 * (len(hold) - 1))] * 1000:.2f} ms;"
        f" create: wall {created / n * 1000:.2f} ms;"
        f" writes sent back to two exchanges {getattr(recorder, 'fallbacks', 0)}"
    )


if __name__ == "__main__":
    main()
