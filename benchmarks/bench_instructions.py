"""Instructions per create, per run cycle and per detail read, counted by callgrind.

Run from the repository root (needs ``valgrind``)::

    .venv/bin/python benchmarks/bench_instructions.py             # 100 of each
    .venv/bin/python benchmarks/bench_instructions.py --n 200 --json out.json

Timings on a shared two-core machine move by a factor of two between runs;
the instructions a process executes do not depend on the load. So each lever
on the write path is judged by this count, and the rates by ``bench_peer.py``'s
side-by-side runs. The work is ``bench_peer.py``'s: a create is a linear item
with one stage, started; a run cycle is ``claim_next``, ``renew_lease`` and
``finish_run`` completed; a detail read is ``wc.detail`` of a finished item.

Two bounds on a create, counted only with ``--only``: ``draft``, the same create
left unstarted (its item's and ledger's first events, no Action), and ``floor``,
``bench_peer.py``'s floor (the create's event rows, already encoded, inserted
through the library's recorder with nothing else).

Each figure runs the process twice under callgrind, once with no measured
operation and once with N, after the same warm-up; the difference over N is
the count per operation, so imports and start-up are out of it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
WARM = 20
BACKLOG = 200  # items created, untimed, before the measured run cycles
FINISHED = 100  # finished items, untimed, whose details the measured reads read
OPERATIONS = ("create", "cycle", "read")
# Counted only when asked for (--only): what bounds a create from below.
BOUNDS = ("draft", "floor")


def work(operation: str, n: int) -> None:
    """The process callgrind counts: a warm store, then ``n`` of ``operation``."""
    sys.path.insert(0, str(HERE))
    import bench_peer as peer

    if operation == "floor":
        # bench_peer's floor: a create's event rows alone through the library's recorder.
        # One store opened in both runs, so the difference is the n inserts.
        peer.floor_rate(WARM + n, peer.create_rows(None), None)
        return
    with tempfile.TemporaryDirectory() as directory:
        wc = peer.open_store(os.path.join(directory, "count.db"), None)
        for i in range(WARM):
            peer.create(wc, -i - 1)
            peer.run_cycle(wc)
        if operation == "create":
            for i in range(n):
                peer.create(wc, i)
        elif operation == "draft":  # a create left unstarted: its first two events only
            for i in range(n):
                peer.create(wc, i, start=False)
        elif operation == "cycle":
            for i in range(BACKLOG):
                peer.create(wc, i)
            for _ in range(n):
                peer.run_cycle(wc)
        else:
            finished = [peer.create(wc, i) for i in range(FINISHED)]
            for _ in finished:
                peer.run_cycle(wc)
            for i in range(n):
                wc.detail(finished[i % FINISHED])
        wc.close()


def callgrind_total(argv: list[str], env: dict[str, str]) -> int:
    """The instructions callgrind counts for the process ``argv`` (a Python script's
    arguments after the interpreter), run with ``env``."""
    with tempfile.TemporaryDirectory() as directory:
        out = Path(directory) / "callgrind.out"
        subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable, *argv],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        found = re.search(r"^(?:summary|totals): (\d+)", out.read_text(), re.MULTILINE)
        if found is None:
            raise RuntimeError("callgrind wrote no instruction total")
        return int(found.group(1))


def instructions(operation: str, n: int) -> int:
    return callgrind_total(
        [__file__, "--work", operation, str(n)], {**os.environ, "PYTHONHASHSEED": "0"}
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100, help="operations counted (default 100)")
    parser.add_argument(
        "--only",
        choices=OPERATIONS + BOUNDS,
        help="count one operation only; draft (a create not started) and floor (bench_peer's"
        " floor: the create's rows alone) only this way",
    )
    parser.add_argument("--json", metavar="FILE", help="also write the counts as JSON")
    parser.add_argument("--work", nargs=2, metavar=("OPERATION", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.work:
        work(args.work[0], int(args.work[1]))
        return
    if shutil.which("valgrind") is None:
        print(
            "bench_instructions: valgrind is not installed (apt install valgrind)", file=sys.stderr
        )
        sys.exit(2)
    counts = {}
    for operation in [args.only] if args.only else OPERATIONS:
        print(f"counting {operation} ...", file=sys.stderr, flush=True)
        base = instructions(operation, 0)
        counts[operation] = (instructions(operation, args.n) - base) / args.n
        print(f"{operation}: {counts[operation] / 1e6:.2f} M instructions each", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"n": args.n, "instructions": counts}, indent=2))


if __name__ == "__main__":
    main()
