"""WAL frames a command appends and pages a checkpoint copies, per checkpoint interval.

Run from the repository root::

    .venv/bin/python benchmarks/bench_checkpoint.py                  # N = 500
    .venv/bin/python benchmarks/bench_checkpoint.py --n 2000 --intervals 1000,4000

Counted, not timed (ADR-0042): ``bench_peer.py``'s N creates then N run cycles on a
fresh store whose own automatic checkpoint is off; after each unit of work that leaves
the WAL at K frames or more, the WAL's frames and distinct pages are read from its
frame headers and a ``PASSIVE`` checkpoint copies them, which is what SQLite's
automatic checkpoint at ``wal_autocheckpoint = K`` does after that commit. Interval 0
is no checkpoint until close. The checkpoints' wall time is printed too; it follows the
disk's flush latency, so read it as direction only.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import struct
import time
from collections.abc import Callable
from typing import Any

import bench_peer as peer
from bench_core import fresh_db

from workcenter.adapters import sqlite_settings
from workcenter.adapters.sqlite_settings import ConfiguredConnectionPool

FRAME_HEADER = 24


def wal_frames(path: str) -> tuple[int, int]:
    """(frames, distinct pages) of the WAL's current generation (frames with its salts)."""
    try:
        with open(f"{path}-wal", "rb") as wal:
            data = wal.read()
    except FileNotFoundError:
        return 0, 0
    if len(data) < 32:
        return 0, 0
    page_size = struct.unpack(">I", data[8:12])[0]
    salts = data[16:24]
    frames, pages, at = 0, set(), 32
    while at + FRAME_HEADER + page_size <= len(data) and data[at + 8 : at + 16] == salts:
        pages.add(struct.unpack(">I", data[at : at + 4])[0])
        frames += 1
        at += FRAME_HEADER + page_size
    return frames, len(pages)


class NoAutoCheckpointPool(ConfiguredConnectionPool):
    def _create_connection(self) -> Any:
        connection = super()._create_connection()
        connection._sqlite_conn.execute("PRAGMA wal_autocheckpoint=0")
        return connection


def run(n: int, interval: int) -> dict[str, Any]:
    totals = {"appended": 0, "copied": 0, "checkpoints": 0, "ms": 0.0}
    with fresh_db("checkpoint") as path:
        wc = peer.open_store(path, None)
        checkpointer = sqlite3.connect(path)
        checkpointer.execute("PRAGMA synchronous=NORMAL")

        def checkpoint() -> None:
            frames, pages = wal_frames(path)
            started = time.perf_counter()
            busy, log, done = checkpointer.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            totals["ms"] += (time.perf_counter() - started) * 1e3
            if busy or log != frames or done != frames:
                raise RuntimeError(f"checkpoint incomplete: {busy, log, done} of {frames}")
            totals["appended"] += frames
            totals["copied"] += pages
            totals["checkpoints"] += 1

        checkpoint()  # opening the store (its tables) is out of the counts
        totals.update(appended=0, copied=0, checkpoints=0, ms=0.0)
        phases: dict[str, Any] = {}
        work: dict[str, Callable[[int], object]] = {
            "create": lambda i: peer.create(wc, i),
            "run_cycle": lambda i: peer.run_cycle(wc),
        }
        for name, unit in work.items():
            before, left = dict(totals), wal_frames(path)[0]
            for i in range(n):
                unit(i)
                if interval and wal_frames(path)[0] >= interval:
                    checkpoint()
            appended = totals["appended"] - before["appended"] + wal_frames(path)[0] - left
            phases[name] = {
                "frames_appended_each": round(appended / n, 2),
                "pages_copied_each": round((totals["copied"] - before["copied"]) / n, 2),
                "checkpoints": totals["checkpoints"] - before["checkpoints"],
                "checkpoint_ms": round(totals["ms"] - before["ms"], 1),
            }
        wal_bytes = os.path.getsize(f"{path}-wal")
        frames, pages = wal_frames(path)
        checkpointer.close()
        wc.close()
    phases["close"] = {"wal_frames": frames, "pages_copied": pages, "wal_file_bytes": wal_bytes}
    phases["pages_copied_in_all"] = totals["copied"] + pages
    return {"n": n, "interval": interval, **phases}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=500)
    parser.add_argument("--intervals", default="1000,4000,10000,0")
    args = parser.parse_args()
    sqlite_settings.ConfiguredConnectionPool = NoAutoCheckpointPool  # type: ignore[misc]
    for interval in (int(v) for v in args.intervals.split(",")):
        print(json.dumps(run(args.n, interval)), flush=True)


if __name__ == "__main__":
    main()
