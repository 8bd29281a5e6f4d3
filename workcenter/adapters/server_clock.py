"""The PostgreSQL server's clock, as every process of a store tells the time by default
(ADR-0136).

A Run's lease ends at ``claimed at + lease`` by the clock of the process that claimed
or renewed it, and another process ends it once its own clock has passed that time. On
several machines those clocks disagree: a machine a few minutes ahead ended Runs whose
leases were live by their workers' clocks, and one behind took leases already over by
everyone else's, so an Action was run twice (found by acceptance testing). Every
process of a PostgreSQL store shares one clock, its server's: this host's clock plus
its offset to the server's, measured when the store opens and again every minute, in a
thread of its own so that no command waits for it. A command therefore costs no read of
the time; the offset is as good as half a round trip to the server, plus the drift of
this host's clock in a minute.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from workcenter.adapters.postgres_connection import connect_apart

RESYNC_SECONDS: Final = 60.0  # between two measures of the offset
RETRY_SECONDS: Final = 5.0  # after a measure that failed (the server away)
CONNECT_TIMEOUT: Final = 5


Local = Callable[[], datetime]


class ServerClock:
    """This host's clock (``local``) plus its offset to the server's, which
    ``measure(local)`` answers."""

    def __init__(
        self,
        measure: Callable[[Local], timedelta],
        *,
        local: Local = lambda: datetime.now(UTC),
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._measure, self._local, self._monotonic = measure, local, monotonic
        self._offset = timedelta(0)
        self.measured_at: float | None = None  # the last measure's, by ``monotonic``
        self._due = monotonic()
        self._measuring = threading.Lock()
        with self._measuring:  # at open, so that the first command is on the server's time
            self._resync()

    @property
    def offset(self) -> timedelta:
        """How far the server's clock is ahead of this host's (behind: negative)."""
        return self._offset

    def now(self) -> datetime:
        if self._monotonic() >= self._due and self._measuring.acquire(blocking=False):
            threading.Thread(
                target=self._resync_apart, name="workcenter-clock", daemon=True
            ).start()
        return self._local() + self._offset

    def _resync_apart(self) -> None:
        try:
            self._resync()
        finally:
            self._measuring.release()

    def _resync(self) -> None:
        try:
            self._offset = self._measure(self._local)
            self.measured_at = self._monotonic()
            self._due = self.measured_at + RESYNC_SECONDS
        except Exception:  # the server away: the last offset stands until it is back
            self._due = self._monotonic() + RETRY_SECONDS


def offset_to(pool: Any, local: Local) -> timedelta:
    """The server's clock minus ``local``, around one reading of the server's, on a
    connection of its own (made with the pool's arguments, so never waiting for one of
    the pool's: a resync from inside a command would otherwise be one more connection
    that command holds)."""
    with connect_apart(pool, connect_timeout=CONNECT_TIMEOUT, autocommit=True) as conn:
        before = local()
        row = conn.execute("SELECT clock_timestamp()").fetchone()
        after = local()
    assert row is not None
    server: datetime = row[0]
    return server - (before + (after - before) / 2)
