"""Instructions and bytes per deflate, by deflater, on the states and DTOs a store writes.

Run from the repository root (needs ``valgrind``)::

    .venv/bin/python benchmarks/bench_deflate.py                    # every deflater found
    .venv/bin/python benchmarks/bench_deflate.py --only stdlib-6-m5,zlib-ng-6
    .venv/bin/python benchmarks/bench_deflate.py --vector-memset    # see below

The blobs are those of ``bench_peer.py``'s work, taken from a store after it: the
event states a create and a run cycle deflate (over ``compression.PLAIN_LIMIT``) and
the detail view's DTOs. Each figure runs a process twice under callgrind, once
deflating every blob once (the warm-up) and once more ``--passes`` times; the
difference is the count per blob (ADR-0041).

Deflaters: ``stdlib-6-m5`` (the store's), ``stdlib-L`` (zlib's one-shot compress,
memLevel 8), ``zlib-ng-L`` when the ``zlib-ng`` package is importable, ``isal-L``
when ``isal`` is. callgrind counts each byte a ``rep stosb`` clears as one
instruction, which glibc's ``memset`` uses above 2 KiB: a deflater that clears a
large hash table per stream (zlib-ng clears 192 KiB) is charged far more than the
clearing costs. ``--vector-memset`` runs the counted processes with glibc's
threshold for it raised, so ``memset`` stores 32 bytes an instruction instead.
"""

from __future__ import annotations

import argparse
import os
import pickle
import sqlite3
import sys
import tempfile
import zlib
from collections.abc import Callable
from pathlib import Path

from bench_instructions import callgrind_total

HERE = Path(__file__).resolve().parent
LEVELS = {"stdlib": (1, 6, 9), "zlib-ng": (1, 4, 6, 7), "isal": (1, 2, 3)}
VECTOR_MEMSET = "glibc.cpu.x86_rep_stosb_threshold=100000000"
Deflater = Callable[[bytes], bytes]


def deflater(name: str) -> Deflater:
    library, _, level_text = name.rpartition("-")
    if name == "stdlib-6-m5":
        from workcenter.adapters.compression import deflate

        return deflate
    level = int(level_text)
    if library == "stdlib":
        return lambda data: zlib.compress(data, level)
    if library == "zlib-ng":
        from zlib_ng import zlib_ng

        return lambda data: zlib_ng.compress(data, level)
    if library == "isal":
        from isal import isal_zlib

        return lambda data: isal_zlib.compress(data, level)
    raise ValueError(f"no deflater {name}")


def available() -> list[str]:
    names = ["stdlib-6-m5"] + [f"stdlib-{level}" for level in LEVELS["stdlib"]]
    for library, module in (("zlib-ng", "zlib_ng"), ("isal", "isal")):
        try:
            __import__(module)
        except ImportError:
            continue
        names += [f"{library}-{level}" for level in LEVELS[library]]
    return names


def blobs_of_the_work(path: Path) -> dict[str, list[bytes]]:
    """The plain blobs of five creates, five run cycles and the DTOs, after a warm-up."""
    sys.path.insert(0, str(HERE))
    import bench_peer as peer

    from workcenter.adapters.compression import PLAIN_LIMIT, inflate

    def states(con: sqlite3.Connection, after: int) -> list[bytes]:
        sql = "SELECT state FROM stored_events WHERE rowid > ? ORDER BY rowid"
        rows = con.execute(sql, (after,))
        return [blob for (state,) in rows if len(blob := inflate(bytes(state))) > PLAIN_LIMIT]

    def last(con: sqlite3.Connection) -> int:
        return int(con.execute("SELECT max(rowid) FROM stored_events").fetchone()[0])

    wc = peer.open_store(str(path), None)
    con = sqlite3.connect(path)
    try:
        for i in range(20):
            peer.create(wc, -i - 1)
            peer.run_cycle(wc)
        before_creates = last(con)
        for i in range(5):
            peer.create(wc, i)
        before_cycles = last(con)
        for _ in range(5):
            peer.run_cycle(wc)
        created = states(con, before_creates)
        return {
            "create": created[: len(created) - len(states(con, before_cycles))],
            "cycle": states(con, before_cycles),
            "dto": [inflate(bytes(dto)) for (dto,) in con.execute("SELECT dto FROM dv_details")],
        }
    finally:
        con.close()
        wc.close()


def work(name: str, blobs_file: str, kind: str, passes: int) -> None:
    deflate = deflater(name)
    blobs = pickle.loads(Path(blobs_file).read_bytes())[kind]
    for _ in range(1 + passes):
        for blob in blobs:
            deflate(blob)


def instructions(args: list[str], vector_memset: bool) -> int:
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    if vector_memset:
        env["GLIBC_TUNABLES"] = VECTOR_MEMSET
    return callgrind_total([__file__, "--work", *args], env)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="comma-separated deflaters (default: every one found)")
    parser.add_argument("--passes", type=int, default=20, help="counted passes (default 20)")
    parser.add_argument("--vector-memset", action="store_true", help="see the module doc")
    parser.add_argument("--work", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.work:
        name, blobs_file, kind, passes = args.work
        work(name, blobs_file, kind, int(passes))
        return
    with tempfile.TemporaryDirectory() as directory:
        blobs = blobs_of_the_work(Path(directory) / "blobs.db")
        blobs_file = Path(directory) / "blobs.pickle"
        blobs_file.write_bytes(pickle.dumps(blobs))
        print("deflater      blobs      n  plain B/blob  deflated B/blob  instructions/blob")
        for name in args.only.split(",") if args.only else available():
            deflate = deflater(name)
            for kind, found in blobs.items():
                if deflate(found[0])[:1] != b"\x78":
                    raise RuntimeError(f"{name} writes no zlib stream with a 32 KiB window")
                plain = sum(map(len, found)) / len(found)
                deflated = sum(len(deflate(blob)) for blob in found) / len(found)
                counted = [
                    instructions([name, str(blobs_file), kind, str(passes)], args.vector_memset)
                    for passes in (0, args.passes)
                ]
                each = (counted[1] - counted[0]) / args.passes / len(found)
                print(
                    f"{name:12}  {kind:6} {len(found):4}  {plain:12.1f}  {deflated:15.1f}"
                    f"  {each:17,.0f}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
