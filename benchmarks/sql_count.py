"""Counting, not timing: the SQL statements and commits a command makes.

``traced()`` patches ``sqlite3.connect`` in this process only (never in the
library) so every connection opened inside it reports each statement it runs
through SQLite's trace callback; ``SqlCounter.measure`` counts between two
points. A commit is a ``COMMIT`` statement; a transaction is a ``BEGIN``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Counts:
    statements: int = 0
    commits: int = 0
    rollbacks: int = 0
    transactions: int = 0

    def per(self, commands: int) -> dict[str, float]:
        return {
            "statements": round(self.statements / commands, 1),
            "commits": round(self.commits / commands, 2),
            "read_transactions": round(self.rollbacks / commands, 1),
            "transactions": round(self.transactions / commands, 1),
        }


@dataclass
class SqlCounter:
    statements: list[str] = field(default_factory=list)

    def record(self, sql: str) -> None:
        self.statements.append(sql)

    def measure(self, work: Callable[[], Any]) -> Counts:
        start = len(self.statements)
        work()
        counts = Counts()
        for sql in self.statements[start:]:
            head = sql.lstrip().split(None, 1)[0].upper() if sql.strip() else ""
            counts.statements += 1
            counts.commits += head == "COMMIT"
            counts.rollbacks += head == "ROLLBACK"
            counts.transactions += head == "BEGIN"
        return counts


@contextmanager
def traced() -> Iterator[SqlCounter]:
    """Connections opened inside the block report their statements to the counter."""
    counter = SqlCounter()
    connect = sqlite3.connect

    def tracing_connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        connection = connect(*args, **kwargs)
        connection.set_trace_callback(counter.record)
        return connection

    sqlite3.connect = tracing_connect  # type: ignore[assignment]
    try:
        yield counter
    finally:
        sqlite3.connect = connect
