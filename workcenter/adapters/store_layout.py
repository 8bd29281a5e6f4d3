"""The layout of a store: what it holds that a Workcenter must know to read and write it
(its tables and functions, and the events it may hold), one number for both databases
(ADR-0014, ADR-0113, ADR-0137).

A store records the layout of the newest Workcenter that opened it (SQLite in its
header's ``user_version``, PostgreSQL in the ``workcenter_layout`` table); a Workcenter
whose ``LAYOUT`` is older refuses to open it before it writes anything. ``LAYOUT`` goes
up with every change to a store's tables or functions and with every change to an
event class (a new class, a field, a class version): an older reader refuses what it
cannot decode, and as a writer it would put what it knows under newer processes.
``tests/test_store_layout.py`` fails on an event class changed without it,
``tests/test_store_layout_postgres.py`` on PostgreSQL's catalog.
"""

from __future__ import annotations

import logging
from typing import Final

# 1: the first recorded layout (SQLite's header, ADR-0014; PostgreSQL's record, ADR-0113).
# 2: a claim's client claim id, on RunClaimed and in the work queue's wq_claims (ADR-0114;
#    a SQLite store's header kept 1 until ADR-0137, so older processes opened it).
# 3: what the store's opens chained, event_chain_late (ADR-0137).
LAYOUT: Final = 3

log = logging.getLogger("workcenter.store")


def upgraded(where: str, before: int) -> None:
    """Say that the store at ``where`` was raised from layout ``before`` to ``LAYOUT``: an
    operator learns that older Workcenters now refuse it (found by acceptance testing,
    ADR-0137: an upgrade wrote and said nothing)."""
    log.warning(
        f"{where}: store upgraded from layout {before} to {LAYOUT}"
        " (a Workcenter older than this one now refuses it)"
    )
