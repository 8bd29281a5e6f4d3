"""The one-commit shape on PostgreSQL (ADR-0016, ADR-0032): ``OneCommitPostgresRecorder``
applies an ``InlineWrite`` inside its own insert transaction, after the ids are fetched.

This shows the view protocol and the lagging-view rule in PostgreSQL's transaction
with a minimal view of its own; the real views run on PostgreSQL in every test of
the ``postgresql`` backend. Server settings and skipping: ``tests/postgres.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import postgres
import pytest
from conftest import action_spec, create_dynamic, plan

from workcenter.adapters.persistence import store_env
from workcenter.adapters.postgres_settings import PostgresTarget
from workcenter.application import WorkCenter
from workcenter.bootstrap import EventStore
from workcenter.projections.inline import InlineWrite

SCHEMA = "workcenter_one_commit"


class EventsPerStream:
    """The smallest PostgreSQL view of the protocol: events counted per stream."""

    def position_within(self, c: Any, application_name: str) -> int:
        c.execute(
            f"SELECT notification_id FROM {SCHEMA}.positions WHERE name = %s", (application_name,)
        )
        row = c.fetchone()
        return int(row["notification_id"]) if row else 0

    def apply_within(self, c: Any, application_name: str, batch: Any, position: int) -> int:
        fresh = [(n, e) for n, e in batch if n > position]
        for _, event in fresh:
            if event == "boom":
                raise RuntimeError("view broke")
            c.execute(
                f"INSERT INTO {SCHEMA}.per_stream VALUES (%s, 1) ON CONFLICT (stream)"
                " DO UPDATE SET events = per_stream.events + 1",
                (str(event.originator_id),),
            )
        if fresh:
            c.execute(
                f"INSERT INTO {SCHEMA}.positions VALUES (%s, %s) ON CONFLICT (name)"
                " DO UPDATE SET notification_id = excluded.notification_id",
                (application_name, fresh[-1][0]),
            )
        return len(fresh)


@pytest.fixture
def pg_store() -> Iterator[EventStore]:
    import psycopg

    postgres.require_server()
    host, port, user, dbname = postgres.SETTINGS
    with psycopg.connect(host=host, port=port, user=user, dbname=dbname, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
        conn.execute(f"CREATE SCHEMA {SCHEMA}")
        conn.execute(f"CREATE TABLE {SCHEMA}.per_stream (stream text PRIMARY KEY, events int)")
        conn.execute(
            f"CREATE TABLE {SCHEMA}.positions (name text PRIMARY KEY, notification_id bigint)"
        )
    env = store_env() | PostgresTarget(postgres.url(SCHEMA)).env()
    store = EventStore(env=env)
    yield store
    store.close()
    postgres.drop_schema(SCHEMA)


def per_stream(store: EventStore) -> dict[str, int]:
    with store.recorder.datastore.transaction(commit=False) as curs:  # type: ignore[attr-defined]
        curs.execute(f"SELECT stream, events FROM {SCHEMA}.per_stream")
        counts = {row["stream"]: row["events"] for row in curs.fetchall()}
        curs.execute(f"SELECT notification_id FROM {SCHEMA}.positions")
        counts["position"] = int(curs.fetchone()["notification_id"])
        return counts


def test_inline_views_commit_with_the_events_on_postgresql(
    pg_store: EventStore, wc: WorkCenter
) -> None:
    item = create_dynamic(wc)
    # Two Actions: five item events (since ADR-0046 one Action's status is carried).
    plan(wc, item.id, action_spec(objective="First"), action_spec(objective="Second"))
    events = wc.history(item.id)
    first, gap, last = events[:2], events[2:4], events[4:]
    assert last
    view = {"per_stream": EventsPerStream()}

    pg_store.save(*first, inline_write=InlineWrite(first, view, pg_store.mapper))
    pg_store.save(*gap)  # a writer without views: the view lags
    pg_store.save(*last, inline_write=InlineWrite(last, view, pg_store.mapper))
    head = pg_store.recorder.max_notification_id()
    assert per_stream(pg_store) == {str(item.id): len(events), "position": head}

    # A failing view rolls the events back with it.
    broken = InlineWrite(["boom"], view, pg_store.mapper)  # type: ignore[list-item]
    more = wc.history(item.id)[:1]
    with pytest.raises(RuntimeError, match="view broke"):
        pg_store.save(
            *[e.model_copy(update={"originator_version": 99}) for e in more], inline_write=broken
        )
    assert pg_store.recorder.max_notification_id() == head
