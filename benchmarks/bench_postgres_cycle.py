"""One process's PostgreSQL run cycle, taken apart: wall time, the client's CPU, the
server's CPU and the table lock's hold, per cycle (issue 18, ADR-0069).

Run from the repository root (the local test server by default)::

    .venv/bin/python benchmarks/bench_postgres_cycle.py
    .venv/bin/python benchmarks/bench_postgres_cycle.py --cycles 300 --postgres URL
    .venv/bin/python benchmarks/bench_postgres_cycle.py --per-command   # and on SQLite

A fresh schema (dropped after) is seeded with bench_peer's items by one store; another
store, as a worker process would, runs 20 warm-up cycles, then ``--cycles`` measured
ones (``claim_next``, ``renew_lease``, ``finish_run``), then as many creates. The
server's CPU is read from ``/proc`` of the server's backends and background processes
(so the server must run on this machine), the client's from ``time.process_time``, the
hold from the recorder's ``lock_holds`` (ADR-0052). To compare two versions of the
code, run each from its own checkout and virtual environment, alternating.

``--per-command`` instead times each command of the cycle apart, the client's CPU and
the wall clock, on PostgreSQL and then on a SQLite file with the same work, and on
PostgreSQL the client CPU of a command's parts: its write's exchange (psycopg's
pipeline exit: the sync and the answers; or the wire's, ADR-0104), its statements
(psycopg's ``execute``, parameters dumped; outside a pipeline the round trip's own CPU
too), the detail view's rows built before the write, and the pool (ADR-0087).
``--no-wire`` sends the one-exchange writes and the streams' reads through psycopg's
cursors, as before ADR-0104.
"""

from __future__ import annotations

import argparse
import collections
import statistics
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import psycopg_pool
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


COMMANDS = ("claim", "renew", "finish")
# The client CPU of a command's parts on PostgreSQL, when counted (``counting_parts``).
PARTS: collections.defaultdict[str, float] = collections.defaultdict(float)


@contextmanager
def counting_parts() -> Iterator[None]:
    """Count into ``PARTS`` the client CPU spent in the parts of a PostgreSQL command."""
    from psycopg import _pipeline

    from workcenter.adapters import postgres_wire
    from workcenter.projections import inline

    wrapped = [
        (psycopg.Cursor, "execute", "statements (execute; alone, its exchange too)"),
        (_pipeline.Pipeline, "__exit__", "pipelined exchanges (sync, answers)"),
        (postgres_wire, "send", "exchanges on the wire (writes, streams read; ADR-0104)"),
        (inline.InlineWrite, "streams_ahead", "detail rows built before the write"),
        (inline.InlineWrite, "prebuilt_write", "the write's rows assembled"),
        (psycopg_pool.ConnectionPool, "getconn", "the pool"),
        (psycopg_pool.ConnectionPool, "putconn", "the pool"),
    ]
    originals = [getattr(owner, name) for owner, name, _ in wrapped]

    def counted(function: Any, part: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            cpu = time.process_time()
            try:
                return function(*args, **kwargs)
            finally:
                PARTS[part] += time.process_time() - cpu

        return call

    for (owner, name, part), function in zip(wrapped, originals, strict=True):
        setattr(owner, name, counted(function, part))
    try:
        yield
    finally:
        for (owner, name, _), function in zip(wrapped, originals, strict=True):
            setattr(owner, name, function)


def per_command(
    wc: WorkCenter, n: int, parts: dict[str, dict[str, float]] | None = None
) -> dict[str, tuple[float, float]]:
    """(client CPU, wall) in seconds per command, over ``n`` cycles after 20 warm ones;
    ``parts`` gets each command's ``PARTS``, in seconds per command."""
    for _ in range(20):
        cycle(wc)
    spent = {command: [0.0, 0.0] for command in COMMANDS}
    counted = {command: collections.defaultdict[str, float](float) for command in COMMANDS}

    def timed(command: str, call: Any, *args: Any, **kwargs: Any) -> Any:
        before = PARTS.copy()
        cpu, wall = time.process_time(), time.perf_counter()
        result = call(*args, **kwargs)
        spent[command][0] += time.process_time() - cpu
        spent[command][1] += time.perf_counter() - wall
        for part, cpu_spent in PARTS.items():
            counted[command][part] += cpu_spent - before.get(part, 0.0)
        return result

    for _ in range(n):
        claim = timed("claim", wc.claim_next, "worker", lease_seconds=30)
        assert claim is not None
        timed("renew", wc.renew_lease, claim, lease_seconds=30)
        timed("finish", wc.finish_run, claim, report(claim.action_id))
    if parts is not None:
        for command in COMMANDS:
            parts[command] = {part: cpu / n for part, cpu in counted[command].items() if cpu}
    return {command: (cpu / n, wall / n) for command, (cpu, wall) in spent.items()}


def print_per_command(url: str, n: int) -> None:
    parts: dict[str, dict[str, float]] = {}
    with (
        seeded_schema(url, n + 20, "bench_cycle") as store,
        WorkCenter.open(store, boot_id="worker", create=False) as wc,
        counting_parts(),
    ):
        postgres = per_command(wc, n, parts)
    with (
        tempfile.TemporaryDirectory() as directory,
        WorkCenter.open(Path(directory) / "store.db", boot_id="worker") as wc,
    ):
        for i in range(n + 20):
            create(wc, i)
        sqlite = per_command(wc, n)
    print(f"{n} cycles; client CPU / wall per command, in ms")
    for command in COMMANDS:
        (pc, pw), (sc, sw) = postgres[command], sqlite[command]
        print(
            f"{command:7s} PostgreSQL {pc * 1000:.2f} / {pw * 1000:.2f}"
            f"   SQLite {sc * 1000:.2f} / {sw * 1000:.2f}"
        )
        for part, cpu in sorted(parts[command].items(), key=lambda p: -p[1]):
            print(f"          {cpu * 1000:.3f} ms  {part}")


def alternate_wire(url: str, n: int, blocks: int) -> None:
    """``n`` cycles in ``blocks`` blocks, the wire on in every other one, in one process
    on one schema: the machine's drift between two runs (often more than the difference
    measured) falls on both alike. Prints each side's client CPU and wall per cycle, and
    the ratios of neighbouring blocks (median and range)."""
    size = n // blocks
    with (
        seeded_schema(url, size * blocks + 20, "bench_cycle") as store,
        WorkCenter.open(store, boot_id="worker", create=False) as wc,
    ):
        recorder: Any = wc.store.recorder
        for _ in range(20):
            cycle(wc)
        spent: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
        for block in range(blocks):
            recorder.wire = block % 2 == 0
            wall, cpu = time.perf_counter(), time.process_time()
            for _ in range(size):
                cycle(wc)
            spent[recorder.wire].append(
                ((time.process_time() - cpu) / size, (time.perf_counter() - wall) / size)
            )
    for name, index in (("client CPU", 0), ("wall", 1)):
        on = [b[index] for b in spent[True]]
        off = [b[index] for b in spent[False]]
        ratios = sorted(a / b for a, b in zip(on, off, strict=False))
        print(
            f"{name}: wire {statistics.median(on) * 1000:.2f} ms,"
            f" psycopg {statistics.median(off) * 1000:.2f} ms a cycle;"
            f" wire / psycopg {statistics.median(ratios):.2f}"
            f" ({ratios[0]:.2f}-{ratios[-1]:.2f}, {len(ratios)} pairs of {size} cycles)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=300)
    parser.add_argument("--postgres", default=DEFAULT_POSTGRES)
    parser.add_argument(
        "--two-exchange", action="store_true", help="every write the ADR-0051 way (ADR-0070)"
    )
    parser.add_argument(
        "--no-wire",
        action="store_true",
        help="the one-exchange writes and the streams' reads through psycopg's cursors,"
        " not the wire (ADR-0104)",
    )
    parser.add_argument(
        "--per-command", action="store_true", help="each command timed apart, and on SQLite"
    )
    parser.add_argument(
        "--alternate-wire",
        type=int,
        metavar="BLOCKS",
        default=0,
        help="run the cycles in BLOCKS blocks, the wire on and off in turn in one process,"
        " and compare the two (ADR-0104)",
    )
    args = parser.parse_args()
    n = args.cycles
    if args.per_command:
        print_per_command(args.postgres, n)
        return
    if args.alternate_wire:
        alternate_wire(args.postgres, n, args.alternate_wire)
        return
    with (
        seeded_schema(args.postgres, n + 20, "bench_cycle") as store,
        WorkCenter.open(store, boot_id="worker", create=False) as wc,
    ):
        recorder: Any = wc.store.recorder
        if args.two_exchange:
            recorder.one_exchange = False
        if args.no_wire:
            recorder.wire = False
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
