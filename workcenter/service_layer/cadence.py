"""Work done at most once per interval of the store's clock, whichever thread asks."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta

from workcenter.service_layer.ports import Clock


class Cadence:
    """Says when periodic work is due: at most once per ``every`` of ``clock``'s time,
    to the first of the threads that ask once it is (the others are told it is not)."""

    def __init__(self, clock: Clock, *, not_before: datetime | None = None) -> None:
        self._clock = clock
        self._next = not_before  # None: due at the first asking
        self._lock = threading.Lock()

    def due(self, every: timedelta) -> bool:
        with self._lock:
            now = self._clock.now()
            # Not due before its time, unless the clock was stepped back past the last
            # time it was: then it would wait out the step (found by acceptance testing:
            # an hour back held the server's lease watcher for an hour; ADR-0136).
            if self._next is not None and self._next - every <= now < self._next:
                return False
            self._next = now + every
            return True
