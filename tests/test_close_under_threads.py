"""A WorkCenter closed while other threads of the process still use it (a service
shutting down with requests in flight): they are told StoreClosed, and the process
lives on. On SQLite a connection closed under a thread reading on it crashed the
interpreter (a segmentation fault, 4 runs in 6; found by acceptance testing, ADR-0136)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

SCRIPT = textwrap.dedent(
    """
    import sys, threading, time
    from workcenter import WorkCenter, WorkcenterError
    wc = WorkCenter.open(sys.argv[1])
    ids = [wc.create_work_item(title=f"t{i}", goal="g", start=True).id for i in range(20)]
    raw = []
    def reader(k):
        while True:
            try:
                wc.detail(ids[k % 20])
                wc.list_work_items()
                if k % 3 == 0:
                    wc.create_work_item(title="w", goal="g")
            except WorkcenterError:
                return  # StoreClosed, once closed
            except BaseException as error:
                raw.append(repr(error))
                return
    threads = [threading.Thread(target=reader, args=(k,), daemon=True) for k in range(6)]
    for t in threads:
        t.start()
    time.sleep(0.5)
    wc.close()
    for t in threads:
        t.join(10)
    print("raw:", raw)
    sys.exit(1 if raw or any(t.is_alive() for t in threads) else 0)
    """
)


def test_closing_under_running_threads_tells_them_store_closed(tmp_path: Path) -> None:
    for run in range(3):
        done = subprocess.run(
            [sys.executable, "-c", SCRIPT, str(tmp_path / f"store{run}.db")],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, (run, done.returncode, done.stdout, done.stderr[-2000:])
