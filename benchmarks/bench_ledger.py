"""Reserve + settle pairs per second on the embedded default (a SQLite file).

Run from the repository root::

    .venv/bin/python benchmarks/bench_ledger.py [--pairs N] [--json]

One WorkItem with limits large enough never to stop; each pair is one
``reserve_request`` (an Action request of a Run-sized prompt) and one
``settle_request`` with complete usage. Every pair is two ledger writes; the
ledger is snapshotted every 50 events, so load time stays flat.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from uuid import uuid4

from workcenter.application import WorkCenter

REQUEST = {
    "system": "You are a careful engineer.",
    "messages": [{"role": "user", "content": "Fix the failing import and report evidence."}],
    "max_tokens": 512,
}
USAGE = {"input_tokens": 40, "output_tokens": 200}


def measure(pairs: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as directory:
        wc = WorkCenter.open(os.path.join(directory, "ledger.db"))
        item = wc.create_work_item(
            title="bench",
            goal="bench",
            limits={"max_requests": 10 * pairs + 100, "max_run_requests": 10 * pairs + 100},
        )
        run_id = uuid4()
        for _ in range(20):  # warm-up, untimed
            admission = wc.reserve_request(item.id, request=REQUEST, run_id=run_id)
            wc.settle_request(item.id, admission.request_id, usage=USAGE)
        latencies = []
        start = time.perf_counter()
        for _ in range(pairs):
            t0 = time.perf_counter()
            admission = wc.reserve_request(item.id, request=REQUEST, run_id=run_id)
            assert admission.allowed
            assert wc.settle_request(item.id, admission.request_id, usage=USAGE)
            latencies.append(time.perf_counter() - t0)
        elapsed = time.perf_counter() - start
        wc.close()
    latencies.sort()
    return {
        "pairs": pairs,
        "pairs_per_second": pairs / elapsed,
        "median_ms": statistics.median(latencies) * 1000,
        "p95_ms": latencies[int(0.95 * (len(latencies) - 1))] * 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=1000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = measure(args.pairs)
    if args.json:
        json.dump(result, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(
            f"{result['pairs']} reserve+settle pairs: {result['pairs_per_second']:.0f} pairs/s, "
            f"median {result['median_ms']:.2f} ms, p95 {result['p95_ms']:.2f} ms"
        )


if __name__ == "__main__":
    main()
