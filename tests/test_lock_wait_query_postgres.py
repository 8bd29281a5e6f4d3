"""The lock-wait query docs/deployment.md gives operators counts the writes waiting on
one store's event table: the one it gave counted every session of the server waiting
on any lock, so another deployment's waits (or an unrelated application's) read as
this store's ceiling (found by acceptance testing)."""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import postgres
from conftest import create_dynamic

from workcenter.application import WorkCenter

DEPLOYMENT = Path(__file__).resolve().parents[1] / "docs" / "deployment.md"
EXAMPLE_SCHEMA = "team_a"  # the schema deployment.md's examples use


def documented_query(schema: str) -> str:
    text = DEPLOYMENT.read_text()
    match = re.search(r"\*\*Lock waits\*\*: `([^`]+)`", text.replace("\n  ", " "))
    assert match is not None, "deployment.md gives no lock-wait query"
    query = match.group(1)
    assert f"'{EXAMPLE_SCHEMA}." in query
    return query.replace(f"'{EXAMPLE_SCHEMA}.", f"'{schema}.")


def count(schema: str) -> int:
    with postgres.connect() as conn:
        return int(conn.execute(documented_query(schema)).fetchone()[0])


def test_the_lock_wait_query_counts_one_stores_waiting_writes() -> None:
    with postgres.fresh_schema() as waiting_url, postgres.fresh_schema() as idle_url:
        waiting, idle = (url.split("schema=")[1] for url in (waiting_url, idle_url))
        with WorkCenter.open(waiting_url) as wc, WorkCenter.open(idle_url):
            table = wc.store.recorder.events_table_name
            with postgres.connect() as holder:
                holder.autocommit = False
                holder.execute(f'LOCK TABLE "{waiting}".{table} IN EXCLUSIVE MODE')
                writer = threading.Thread(target=create_dynamic, args=(wc,), daemon=True)
                writer.start()
                deadline = time.monotonic() + 30
                while count(waiting) == 0 and time.monotonic() < deadline:
                    time.sleep(0.02)
                seen = count(waiting), count(idle)
                holder.commit()
            writer.join(30)
            assert seen == (1, 0)
            assert not writer.is_alive() and count(waiting) == 0
