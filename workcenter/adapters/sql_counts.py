"""What a command costs the database, counted rather than timed: SQL statements,
transactions and commits, seen through sqlite3's trace callback on the store's
connections. The counts do not depend on the machine, so a benchmark can print
them beside its timings and a test can assert them (one commit per command).

``python -m workcenter.adapters.sql_counts`` prints the counts per create (a
WorkItem with its first Action claimable) and per run cycle (claim, renew,
finish completed, the item done).
"""

from __future__ import annotations

import json
import sqlite3
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eventsourcing.sqlite import SQLiteConnection, SQLiteDatastore

from workcenter.application import Claim, WorkCenter

CONTROL = ("BEGIN", "COMMIT", "ROLLBACK")


@dataclass
class SqlCounts:
    """Every statement the traced connections ran, in order."""

    statements: list[str] = field(default_factory=list)

    def see(self, sql: str) -> None:
        self.statements.append(sql)

    def _starting(self, word: str) -> int:
        return sum(1 for s in self.statements if s.lstrip().upper().startswith(word))

    @property
    def begins(self) -> int:
        return self._starting("BEGIN")

    @property
    def commits(self) -> int:
        return self._starting("COMMIT")

    @property
    def rollbacks(self) -> int:
        """Read transactions end in a rollback (the library's ``commit=False``)."""
        return self._starting("ROLLBACK")

    @property
    def queries(self) -> int:
        """Statements other than BEGIN, COMMIT and ROLLBACK."""
        return len(self.statements) - self.begins - self.commits - self.rollbacks

    def json(self) -> dict[str, int]:
        return {
            "statements": len(self.statements),
            "queries": self.queries,
            "begins": self.begins,
            "commits": self.commits,
            "rollbacks": self.rollbacks,
        }


@contextmanager
def traced(datastore: SQLiteDatastore) -> Iterator[SqlCounts]:
    """Count the statements of every connection the datastore hands out meanwhile."""
    counts = SqlCounts()
    pool = datastore.pool
    handed_out = pool.get_connection
    seen: list[sqlite3.Connection] = []

    def get_connection(*args: Any, **kwargs: Any) -> SQLiteConnection:
        conn = handed_out(*args, **kwargs)
        raw = conn._sqlite_conn
        if raw not in seen:
            raw.set_trace_callback(counts.see)
            seen.append(raw)
        return conn

    pool.get_connection = get_connection  # type: ignore[method-assign]
    try:
        yield counts
    finally:
        del pool.get_connection
        for raw in seen:
            raw.set_trace_callback(None)


# --- the benchmark's units of work ------------------------------------------------

CRITERIA = ("The answer names the root cause", "The answer proposes a fix")
REPORT: dict[str, Any] = {
    "outcome": "completed",
    "summary": "Root cause found and a fix proposed.",
    "evidence": ["ran pytest -q tests/test_cache.py: 1 failed, 41 passed"],
    "acceptanceChecks": [
        {"criterion": c, "status": "passed", "evidence": "see the summary"} for c in CRITERIA
    ],
}


def create(wc: WorkCenter, n: int = 0) -> None:
    """A WorkItem with its first Action claimable: a started one-stage linear item."""
    wc.create_work_item(
        title=f"Investigate flaky test #{n}",
        goal="Find why the cache test fails one run in ten and say how to fix it.",
        acceptance_criteria=CRITERIA,
        delivery_target="response",
        mode="linear",
        stages=("investigate",),
        start=True,
    )


def run_cycle(wc: WorkCenter) -> None:
    """Claim, renew, finish completed: the one-stage item is then done."""
    claim = wc.claim_next("counting-worker")
    if not isinstance(claim, Claim):
        raise RuntimeError("nothing was claimable")
    wc.renew_lease(claim)
    wc.finish_run(claim, REPORT)


def per_unit(wc: WorkCenter, work: Callable[[], object], n: int) -> dict[str, float]:
    """The counts of ``work`` run ``n`` times, divided by ``n``."""
    with traced(wc.store.factory.datastore) as counts:  # type: ignore[attr-defined]
        for _ in range(n):
            work()
    return {key: value / n for key, value in counts.json().items()}


def sql_counts(n: int = 50, db: str | None = None) -> dict[str, dict[str, float]]:
    """Statements, transactions and commits per create and per run cycle, averaged over
    ``n`` of each after a short warm-up, on a fresh store (a temporary file unless ``db``)."""
    with tempfile.TemporaryDirectory(prefix="workcenter-sql-counts-") as directory:
        wc = WorkCenter.open(db or Path(directory) / "workcenter.db")
        try:
            for i in range(5):
                create(wc, -i)
                run_cycle(wc)
            serial = iter(range(n))
            creates = per_unit(wc, lambda: create(wc, next(serial)), n)
            cycles = per_unit(wc, lambda: run_cycle(wc), n)
        finally:
            wc.close()
    return {"create": creates, "run_cycle": cycles}


if __name__ == "__main__":  # pragma: no cover
    print(json.dumps(sql_counts(), indent=2))
