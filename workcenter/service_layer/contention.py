"""A command tried again, in rounds, while other writers keep winning its saves.

Each command already decides again after a lost save, with a growing backoff, up to
``repository.SAVE_ATTEMPTS`` times, then gives up with ``WriteContention``. Where giving
up would cost more than waiting (a reservation before an LLM request, ADR-0049; a Run's
outcome in hand, which sibling Runs of one item finishing at once kept from the item's
stream, ADR-0131), the caller tries the command again, in rounds whose pauses continue
that backoff.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, TypeVar

from workcenter.service_layer import backoff
from workcenter.service_layer.repository import SAVE_ATTEMPTS, WriteContention

ROUNDS: Final = 6
T = TypeVar("T")


def through_contention(command: Callable[[], T], *, rounds: int = ROUNDS) -> T:
    """``command``, tried again after a jittered pause while it loses every save to other
    writers (``WriteContention``), up to ``rounds`` times; the last round's
    ``WriteContention`` is raised."""
    for round_ in range(rounds - 1):
        try:
            return command()
        except WriteContention:
            backoff.pause(SAVE_ATTEMPTS - 1 + round_)
    return command()
