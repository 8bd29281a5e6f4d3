"""The one-commit shape on PostgreSQL (ADR-0016): a recorder subclass applies an
``InlineWrite`` inside the library's insert transaction, after the ids are fetched.

Workcenter runs on SQLite today; this only shows that the same view protocol and
lagging-view rule work unchanged in PostgreSQL's transaction, with a minimal view.
The server is ``WORKCENTER_TEST_POSTGRES`` (``host port user dbname``), by default
``127.0.0.1 5432 postgres test``. Without a reachable server the tests skip with that
reason, except in CI (``CI`` set), where they fail: CI starts the server.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from conftest import create_dynamic, plan

from workcenter.adapters.persistence import store_env
from workcenter.adapters.recorders import INLINE_WRITE
from workcenter.application import WorkCenter
from workcenter.bootstrap import EventStore
from workcenter.projections.inline import InlineWrite

SETTINGS = os.environ.get("WORKCENTER_TEST_POSTGRES", "127.0.0.1 5432 postgres test").split()


def _reachable() -> bool:
    try:
        socket.create_connection((SETTINGS[0], int(SETTINGS[1])), timeout=2).close()
    except (OSError, ValueError, IndexError):
        return False
    return True


if not _reachable():
    if os.environ.get("CI"):
        raise RuntimeError(f"CI needs PostgreSQL at {' '.join(SETTINGS)}; .ci/run starts it")
    pytestmark = pytest.mark.skip(reason=f"no PostgreSQL reachable at {' '.join(SETTINGS)}")
SCHEMA = "workcenter_one_commit"

if SETTINGS:
    from eventsourcing.persistence import Notification, StoredEvent
    from eventsourcing.postgres import PostgresApplicationRecorder
    from psycopg import Cursor
    from psycopg.rows import DictRow
    from psycopg.sql import SQL, Identifier

    class OneCommitPostgresRecorder(PostgresApplicationRecorder):
        """The PostgreSQL twin. Its own transaction, not the library's post-insert hook:
        ``insert_events`` runs ``_fetch_ids_after_insert_events`` inside a ``try`` that
        holds an exception until the transaction block has ended, so a view failing
        there would commit the events (a database error would have aborted the
        transaction; a Python one does not)."""

        def insert_events(
            self, stored_events: Sequence[StoredEvent], **kwargs: Any
        ) -> Sequence[int] | None:
            inline: InlineWrite | None = kwargs.get(INLINE_WRITE)
            if inline is None or not stored_events:
                return super().insert_events(stored_events, **kwargs)
            with (
                self.datastore.get_connection() as conn,
                conn.transaction(),
                conn.cursor() as curs,
            ):
                self._insert_stored_events(curs, stored_events, **kwargs)  # lock, insert
                ids = self._fetch_ids_after_insert_events(curs, stored_events, **kwargs)
                assert ids is not None
                inline.apply(curs, ids, self._read_gap)
                return ids

        def _read_gap(
            self, curs: Cursor[DictRow], after: int, before: int, limit: int
        ) -> list[Notification]:
            curs.execute(
                SQL(
                    "SELECT * FROM {0}.{1} WHERE notification_id > %s"
                    " AND notification_id < %s ORDER BY notification_id LIMIT %s"
                ).format(Identifier(self.datastore.schema), Identifier(self.events_table_name)),
                (after, before, limit),
            )
            return [
                Notification(
                    id=row["notification_id"],
                    originator_id=row["originator_id"],
                    originator_version=row["originator_version"],
                    topic=row["topic"],
                    state=bytes(row["state"]),
                )
                for row in curs.fetchall()
            ]


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

    host, port, user, dbname = SETTINGS
    with psycopg.connect(host=host, port=port, user=user, dbname=dbname, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
        conn.execute(f"CREATE SCHEMA {SCHEMA}")
        conn.execute(f"CREATE TABLE {SCHEMA}.per_stream (stream text PRIMARY KEY, events int)")
        conn.execute(
            f"CREATE TABLE {SCHEMA}.positions (name text PRIMARY KEY, notification_id bigint)"
        )
    env = store_env() | {
        "PERSISTENCE_MODULE": "eventsourcing.postgres",
        "POSTGRES_HOST": host,
        "POSTGRES_PORT": port,
        "POSTGRES_USER": user,
        "POSTGRES_PASSWORD": "",
        "POSTGRES_DBNAME": dbname,
        "POSTGRES_SCHEMA": SCHEMA,
        "APPLICATION_RECORDER_TOPIC": f"{__name__}:OneCommitPostgresRecorder",
    }
    store = EventStore(env=env)
    yield store
    store.close()


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
    plan(wc, item.id)
    events = wc.history(item.id)
    first, gap, last = events[:2], events[2:4], events[4:]
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
