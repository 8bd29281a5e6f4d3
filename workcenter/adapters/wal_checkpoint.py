"""SQLite's WAL checkpoints, taken off the writers' path (ADR-0084).

A checkpoint copies the pages the WAL holds into the database file and syncs both
files. SQLite's automatic checkpoint runs it in the commit that made the WAL long
enough, so that one command waits for it: 35 to 65 ms on this machine at the
4,000-page interval (ADR-0042), where a create's median is under 1 ms. Here a thread
of the process runs it instead, every ``PERIOD_SECONDS``, PASSIVE: writers go on
appending while it copies, and a WAL with nothing new is left alone (no copy, no
sync).

The thread does not look at the WAL's length: that is in the WAL-index (the ``-shm``
file), and a process that opens and closes a file descriptor of it drops every POSIX
lock SQLite holds on it, so another process could reset the file under this one's
mapping (SIGBUS). Time is a fair measure instead: a period's WAL is what the writers
of that period wrote, about 5,500 pages at the busiest this machine manages.

A WAL starts again from its beginning only at a write that finds every frame copied;
writers that never pause would keep the thread one step behind, and the WAL would
grow without end. So the commits keep SQLite's own automatic checkpoint, at the
configured interval times ``BACKSTOP``: it then copies what the thread has not (a
period's pages at most) and lets the next write start the WAL again. Closing the
store stops the thread first; the last connection's close still checkpoints it all.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from pathlib import Path
from typing import Final

log = logging.getLogger(__name__)

# The commits' own checkpoint, in intervals: a WAL this long means writers left the
# thread no pause to finish in.
BACKSTOP: Final = 4
# A quarter of a second: a tenth made creates 12 % slower than this (the thread's
# syncs and the writers' shared locks contend more often), and a longer one lets the
# WAL, and what a crash of the machine can lose under synchronous=NORMAL, grow.
PERIOD_SECONDS: Final = 0.25


class WalCheckpointer:
    """A daemon thread that checkpoints the WAL of the SQLite file ``path`` every
    ``period`` seconds."""

    def __init__(self, path: str, period: float = PERIOD_SECONDS) -> None:
        self.path = path
        self.period = period
        self.checkpoints = 0  # checkpoints the thread ran, for tests
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"workcenter-wal-checkpoint:{path}", daemon=True
        )

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()

    def _run(self) -> None:
        connection: sqlite3.Connection | None = None
        failed = False
        try:
            while not self._stop.wait(self.period):
                try:
                    if connection is None:
                        # mode=rw: a store deleted under the process is not made again.
                        uri = f"{Path(self.path).resolve().as_uri()}?mode=rw"
                        connection = sqlite3.connect(uri, uri=True, isolation_level=None)
                    busy, _, _ = connection.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                    self.checkpoints += not busy
                except sqlite3.Error as error:
                    # Refused (the disk, a damaged file): the next period tries again,
                    # and the commits' own checkpoint bounds the WAL meanwhile.
                    if not failed:
                        log.warning("WAL checkpoint of %s deferred: %s", self.path, error)
                    failed = True
        finally:
            if connection is not None:
                connection.close()
