"""How fast one PostgreSQL worker could run with parts of its work taken out, beside
the reference store in the same invocation (issue 18, ADR-0085).

Run from the repository root (the reference kit set up once, see bench_peer.py)::

    .venv/bin/python benchmarks/bench_postgres_floor.py
    .venv/bin/python benchmarks/bench_postgres_floor.py --reps 3 --variants as-is,bound

Each repetition runs the reference store's N run cycles, then each variant in a
process of its own, in the order given (so a phase of this shared machine's load falls
on all of them): a fresh schema seeded with N + 20 of bench_peer's items, 20 warm-up
cycles, N measured ones (``claim_next``, ``renew_lease``, ``finish_run``, as
``bench_scaleout.py``'s one worker). The variants:

- ``as-is``: the store as it ships;
- ``chain-off``: the hash chain off (``WORKCENTER_HASH_CHAIN=off``);
- ``no-dtos``: every save of an item stores the detail view's marker (``DEFERRED``),
  so no write builds a DTO (the reads would build them all);
- ``chain-off-no-dtos``: both;
- ``one-statement``: the one-exchange write sent as one statement, with no pipeline
  and no ``BEGIN`` or ``COMMIT``: ``wc_write_events`` and the views' rows as
  data-modifying ``WITH`` parts. A bound, not a write to ship: its parts share the
  statement's snapshot, taken before the table lock, and two updates of one row in
  one statement keep only one of them;
- ``bound``: ``chain-off-no-dtos`` and ``one-statement`` together.

Only ``as-is`` is a store a user can run; the others say what each part costs and
what is left when every part that could go is gone.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench_peer import find_kit, peer_rep

DEFAULT_POSTGRES = "postgresql://postgres@127.0.0.1:5432/test"
VARIANTS = ("as-is", "chain-off", "no-dtos", "chain-off-no-dtos", "one-statement", "bound")


def one_statement_write() -> None:
    """Replace the recorder's one-exchange write by the ``one-statement`` bound."""
    from workcenter.adapters import postgres_recorder, postgres_write
    from workcenter.adapters.recorders import SNAPSHOTS

    pipelined = postgres_recorder.OneCommitPostgresRecorder._write_once

    class Collected:
        """A cursor that keeps the views' statements instead of sending them."""

        def __init__(self) -> None:
            self.statements: list[tuple[str, list[Any]]] = []

        def execute(self, query: str, params: Any = None, **_: Any) -> Collected:
            self.statements.append((query.replace("?", "%s"), list(params or ())))
            return self

    def write(self: Any, conn: Any, stored: Any, once: Any, **kwargs: Any) -> Any:
        if kwargs.get(SNAPSHOTS) is not None:
            return pipelined(self, conn, stored, once, **kwargs)
        rows = Collected()
        once.send_rows(rows)
        params = list(
            postgres_write.call_arguments(stored, self.datastore.lock_timeout, self.chained, once)
        )
        marks = ", ".join(["%s"] * len(params))
        parts = [
            f'w AS MATERIALIZED (SELECT * FROM "{self.datastore.schema}".wc_write_events({marks}))'
        ]
        for k, (query, values) in enumerate(rows.statements):
            parts.append(f"r{k} AS ({query})")
            params += values
        index = {(e.originator_id, e.originator_version): j for j, e in enumerate(stored)}
        for k, (item, originator_id, version, blob) in enumerate(once.detail_rows):
            # The position from the ids the call returns: the parts cannot see its rows.
            parts.append(
                f"d{k} AS (INSERT INTO dv_details SELECT %s,"
                f" w.ids[{index[(originator_id, version)] + 1}], %s FROM w"
                " ON CONFLICT (work_item_id) DO UPDATE"
                " SET position = excluded.position, dto = excluded.dto)"
            )
            params += [item, blob]
        query = "WITH " + ", ".join(parts) + " SELECT ids FROM w"
        return list(conn.execute(query, params, prepare=True).fetchone()["ids"])

    postgres_recorder.OneCommitPostgresRecorder._write_once = write  # type: ignore[method-assign]


def run_variant(variant: str, n: int, url: str) -> dict[str, float]:
    """N run cycles of one worker on a fresh schema, in this process."""
    if "chain-off" in variant or variant == "bound":
        os.environ["WORKCENTER_HASH_CHAIN"] = "off"
    if "no-dtos" in variant or variant == "bound":
        from workcenter.projections import detail

        detail.defers_detail = lambda event: True  # type: ignore[assignment]
    if variant in ("one-statement", "bound"):
        one_statement_write()
    from bench_postgres_cycle import cycle, seeded_schema

    from workcenter.application import WorkCenter

    with (
        seeded_schema(url, n + 20, "bench_floor") as store,
        WorkCenter.open(store, boot_id="worker", create=False) as wc,
    ):
        for _ in range(20):
            cycle(wc)
        wall, cpu = time.perf_counter(), time.process_time()
        for _ in range(n):
            cycle(wc)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return {"cycles_per_s": n / wall, "client_cpu_ms": cpu / n * 1000}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--postgres", default=DEFAULT_POSTGRES)
    parser.add_argument("--peer-kit", default=None)
    parser.add_argument("--json", metavar="FILE", help="also write every repetition as JSON")
    parser.add_argument("--variant", help=argparse.SUPPRESS)  # one variant, in a child
    args = parser.parse_args()
    if args.variant:
        print(json.dumps(run_variant(args.variant, args.n, args.postgres)))
        return
    variants = args.variants.split(",")
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown:
        parser.error(f"unknown variants {unknown}; choose from {', '.join(VARIANTS)}")
    kit = find_kit(args.peer_kit)
    runs: dict[str, list[dict[str, float]]] = {}
    for rep in range(args.reps):
        reference = peer_rep(kit, args.n)["cycles_per_s"]
        runs.setdefault("reference", []).append({"cycles_per_s": reference})
        print(f"rep {rep + 1}: reference {reference:.1f} cycles/s", flush=True)
        for variant in variants:
            child = subprocess.run(
                [
                    sys.executable,
                    str(Path(__file__)),
                    "--variant",
                    variant,
                    "--n",
                    str(args.n),
                    "--postgres",
                    args.postgres,
                ],
                check=True,
                capture_output=True,
                text=True,
            )
            figures = json.loads(child.stdout.strip().splitlines()[-1])
            figures["ratio"] = figures["cycles_per_s"] / reference
            runs.setdefault(variant, []).append(figures)
            print(
                f"rep {rep + 1}: {variant} {figures['cycles_per_s']:.1f} cycles/s"
                f" ({figures['ratio']:.2f}x), client CPU {figures['client_cpu_ms']:.2f} ms a cycle",
                flush=True,
            )
    print(
        f"\n| one worker, N = {args.n} | cycles/s | ratio to the reference | client CPU a cycle |"
    )
    print("| --- | ---: | --- | ---: |")
    reference = statistics.median(r["cycles_per_s"] for r in runs["reference"])
    print(f"| reference store | {reference:.1f} | 1.00x | |")
    for variant in variants:
        reps = runs[variant]
        ratios = [r["ratio"] for r in reps]
        print(
            f"| {variant} | {statistics.median(r['cycles_per_s'] for r in reps):.1f}"
            f" | {statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})"
            f" | {statistics.median(r['client_cpu_ms'] for r in reps):.2f} ms |"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(runs, indent=2))


if __name__ == "__main__":
    main()
