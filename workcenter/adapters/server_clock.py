"""The PostgreSQL server's clock, as every process of a store tells the time by default
(ADR-0136, ADR-0138).

A Run's lease ends at ``claimed at + lease`` by the clock of the process that claimed
or renewed it, and another process ends it once its own clock has passed that time. On
several machines those clocks disagree: a machine a few minutes ahead ended Runs whose
leases were live by their workers' clocks, and one behind took leases already over by
everyone else's, so an Action was run twice (found by acceptance testing). Every
process of a PostgreSQL store shares one clock, its server's: read when the store opens
and again every minute, in a thread of its own so that no command waits for it, and
carried between two readings by this host's boot-time clock (monotonic, counting the
machine's suspends), which no setting of the wall clock moves. A command therefore costs
no read of the time; the time is as good as half a round trip to the server, plus the
drift of this host's clock in a minute. The wall clock is not read at all: one stepped
by NTP (an hour ahead, say) was added to the offset until the next reading, and a
process ended other machines' live Runs for up to a minute (found by acceptance
testing, ADR-0138).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from workcenter.adapters.postgres_connection import connect_apart

RESYNC_SECONDS: Final = 60.0  # between two readings of the server's clock
RETRY_SECONDS: Final = 5.0  # after a reading that failed (the server away)
CONNECT_TIMEOUT: Final = 5


Monotonic = Callable[[], float]


def _since_boot() -> float:
    """Seconds of the machine's life, suspends counted (Linux's boot-time clock): the
    monotonic clock stops while the machine sleeps, so a process woken from a suspend
    ran behind the server by its length until its next reading, and other machines
    ended its live Runs (found by acceptance testing, ADR-0138). Neither moves when the
    wall clock is set."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)


# The boot-time clock where the system has one, else the monotonic clock.
SINCE_BOOT: Final[Monotonic] = _since_boot if hasattr(time, "CLOCK_BOOTTIME") else time.monotonic
# The server's time and the instant of this host's monotonic clock it was read at.
Reading = tuple[datetime, float]


class ServerClock:
    """The server's time as ``measure(monotonic)`` last read it, carried on by this
    host's ``monotonic`` clock; this host's wall clock (``local``) only until a first
    reading succeeds (the server away at open), and for ``offset``."""

    def __init__(
        self,
        measure: Callable[[Monotonic], Reading],
        *,
        local: Callable[[], datetime] = lambda: datetime.now(UTC),
        monotonic: Monotonic = SINCE_BOOT,
    ) -> None:
        self._measure, self._local, self._monotonic = measure, local, monotonic
        self._reading: Reading = (local(), monotonic())
        self.measured_at: float | None = None  # the last reading's, by ``monotonic``
        self._due = monotonic()
        self._measuring = threading.Lock()
        with self._measuring:  # at open, so that the first command is on the server's time
            self._resync()

    @property
    def offset(self) -> timedelta:
        """How far the server's clock is ahead of this host's wall clock (behind:
        negative)."""
        return self.now() - self._local()

    def now(self) -> datetime:
        ticks = self._monotonic()
        if ticks >= self._due and self._measuring.acquire(blocking=False):
            threading.Thread(
                target=self._resync_apart, name="workcenter-clock", daemon=True
            ).start()
        server, at = self._reading
        return server + timedelta(seconds=ticks - at)

    def _resync_apart(self) -> None:
        try:
            self._resync()
        finally:
            self._measuring.release()

    def _resync(self) -> None:
        try:
            server, at = self._measure(self._monotonic)
            # In UTC: a time in the session's zone (a role's or the server's TimeZone)
            # carried across a change of its offset (DST) by adding seconds came out an
            # hour off (found by acceptance testing, ADR-0138).
            self._reading = (server.astimezone(UTC), at)
            self.measured_at = self._monotonic()
            self._due = self.measured_at + RESYNC_SECONDS
        except Exception:  # the server away: the last reading stands until it is back
            self._due = self._monotonic() + RETRY_SECONDS


def read_on(pool: Any, monotonic: Monotonic) -> Reading:
    """The server's clock and the instant of ``monotonic`` half way through its reading,
    on a connection of its own (made with the pool's arguments, so never waiting for one
    of the pool's: a resync from inside a command would otherwise be one more connection
    that command holds)."""
    with connect_apart(pool, connect_timeout=CONNECT_TIMEOUT, autocommit=True) as conn:
        before = monotonic()
        row = conn.execute("SELECT clock_timestamp()").fetchone()
        after = monotonic()
    assert row is not None
    server: datetime = row[0]
    return server, (before + after) / 2
