"""No statement a command sends on PostgreSQL scans a table that grows with the store.

A write's cost must not grow with the history: every statement of a create and of a
run cycle is explained, with its own parameters, on a store of a few thousand events
after ``ANALYZE``, and none may read a large table sequentially. Small tables (the
views' positions, the live Runs) may be scanned: the planner rightly prefers that.

It found the chain's head read planning its tail check as a hashed scan of every
event (about 1 ms a write at 2,000 events, growing with the store).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import postgres
import psycopg
import pytest
from conftest import create_linear, report

from workcenter.application import WorkCenter

ITEMS = 700
LARGE = 2_000  # rows: a table this large is read by index, never sequentially


@pytest.fixture
def backend() -> str:
    postgres.require_server()
    return "postgresql"


@contextmanager
def server(schema: str) -> Iterator[psycopg.Connection[Any]]:
    """A plain connection to the store's schema."""
    with psycopg.connect(
        host=postgres.HOST, port=postgres.PORT, user=postgres.USER, dbname=postgres.DBNAME
    ) as conn:
        conn.execute(f'SET search_path = "{schema}"')
        yield conn


def scanned(plan: dict[str, Any]) -> list[str]:
    found = [plan["Relation Name"]] if plan["Node Type"] == "Seq Scan" else []
    for child in plan.get("Plans", ()):
        found += scanned(child)
    return found


def test_no_command_statement_scans_a_large_table(wc: WorkCenter) -> None:
    for _ in range(ITEMS):
        create_linear(wc)
    schema = wc.store.factory.datastore.schema  # type: ignore[attr-defined]
    with server(schema) as conn:
        conn.execute("ANALYZE")
        conn.commit()
        rows = conn.execute(
            "SELECT relname, reltuples FROM pg_class c JOIN pg_namespace n"
            " ON n.oid = c.relnamespace WHERE n.nspname = current_schema() AND relkind = 'r'"
        ).fetchall()
    large = {name for name, tuples in rows if tuples >= LARGE}
    assert {"workcenter_events", "event_chain"} <= large, rows

    with postgres.statements() as sent:
        create_linear(wc)
        claimed = wc.claim_next("worker-1")
        assert claimed is not None
        wc.renew_lease(claimed)
        wc.finish_run(claimed, report())
    explained = 0
    offenders = []
    with server(schema) as conn:
        for query, params in sent:
            text = query.as_string(conn) if hasattr(query, "as_string") else query
            text = text.decode() if isinstance(text, bytes) else text
            if text.split()[0].upper() not in ("SELECT", "INSERT", "UPDATE", "DELETE"):
                continue
            plan = conn.execute(f"EXPLAIN (FORMAT JSON) {text}", params).fetchone()
            assert plan is not None
            explained += 1
            tables = set(scanned(plan[0][0]["Plan"])) & large
            if tables:
                offenders.append((sorted(tables), " ".join(text.split())[:160]))
        conn.rollback()
    assert explained > 20
    assert not offenders, offenders
