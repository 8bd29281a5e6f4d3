"""Backing off after a lost race on a busy stream (ADR-0049).

A command that loses the optimistic save to another writer reloads and decides
again. Retried at once, the writers that collided collide again: on one busy
WorkItem's ledger, six processes reserving requests lost a fifth of their
reservations after eight back-to-back tries. Each retry waits a random time up
to an exponentially growing cap ("full jitter"), which spreads the retries of
the writers that collided apart.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Final

BASE_SECONDS: Final = 0.01
CAP_SECONDS: Final = 0.5

_random = random.Random()


def delay(attempt: int, *, base: float = BASE_SECONDS, cap: float = CAP_SECONDS) -> float:
    """The wait before retry ``attempt`` (0 for the first retry): uniform in
    ``[0, min(cap, base * 2**attempt)]``."""
    return _random.uniform(0.0, min(cap, base * 2 ** max(0, attempt)))


def pause(attempt: int, sleep: Callable[[float], None] = time.sleep) -> float:
    """Sleep for ``delay(attempt)``; returns the time waited."""
    seconds = delay(attempt)
    sleep(seconds)
    return seconds
