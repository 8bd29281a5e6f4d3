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

from typing import Final

# 1: the first recorded layout (SQLite's header, ADR-0014; PostgreSQL's record, ADR-0113).
# 2: a claim's client claim id, on RunClaimed and in the work queue's wq_claims (ADR-0114;
#    a SQLite store's header kept 1 until ADR-0137, so older processes opened it).
LAYOUT: Final = 2
