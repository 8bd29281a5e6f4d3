"""The library's reads of the event and snapshot tables, with their columns named.

The library reads a stream (``select_events``) and a page of the log
(``select_notifications``) with ``SELECT *``, prepared on each connection. PostgreSQL
refuses to run a prepared ``SELECT *`` once its table has gained or lost a column ("cached
plan must not change result type", ``FeatureNotSupported``), on every connection that
prepared it, for the connection's life: an operator's ``ALTER TABLE ... ADD COLUMN`` on
the event table while workers run stopped every worker and the projection runner at their
next claim or page (ADR-0107). A statement that names its columns keeps its result type
whatever columns the table gains or loses, and PostgreSQL plans it again by itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from eventsourcing.persistence import InterfaceError, Notification, OperationalError
from eventsourcing.utils import retry
from psycopg.sql import SQL, Composed, Identifier

# What a read of a stream takes, in the library's order.
STREAM_COLUMNS = "originator_id, originator_version, topic, state"


def name_stream_columns(recorder: Any) -> None:
    """Make ``recorder``'s (the library's aggregate recorder: events or snapshots)
    ``select_events`` name the columns it reads; the library appends its conditions."""
    recorder.select_events_statement = SQL(
        "SELECT " + STREAM_COLUMNS + " FROM {schema}.{table} WHERE originator_id = %s"
    ).format(
        schema=Identifier(recorder.datastore.schema),
        table=Identifier(recorder.events_table_name),
    )


class NamedColumnsNotifications:
    """``select_notifications`` as the library's (the same arguments, statement and
    answer), naming its columns. A mixin for the application recorder."""

    datastore: Any
    events_table_name: str

    @retry((InterfaceError, OperationalError), max_attempts=10, wait=0.2)
    def select_notifications(
        self,
        start: int | None,
        limit: int,
        stop: int | None = None,
        topics: Sequence[str] = (),
        *,
        inclusive_of_start: bool = True,
    ) -> Sequence[Notification]:
        statement: Composed = SQL(
            "SELECT notification_id, " + STREAM_COLUMNS + " FROM {schema}.{table}"
        ).format(
            schema=Identifier(self.datastore.schema),
            table=Identifier(self.events_table_name),
        )
        conditions: list[SQL] = []
        params: list[Any] = []
        if start is not None:
            after = "notification_id>=%s" if inclusive_of_start else "notification_id>%s"
            conditions.append(SQL(after))
            params.append(start)
        if stop is not None:
            conditions.append(SQL("notification_id <= %s"))
            params.append(stop)
        if topics:
            conditions.append(SQL("topic = ANY(%s)"))
            params.append(list(topics))
        if conditions:
            statement += SQL(" WHERE ") + SQL(" AND ").join(conditions)
        statement += SQL(" ORDER BY notification_id LIMIT %s")
        params.append(limit)
        with self.datastore.get_connection() as conn, conn.cursor() as curs:
            curs.execute(statement, params, prepare=True)
            return notifications(curs.fetchall())


def notifications(rows: Sequence[Any]) -> list[Notification]:
    """Rows of the event table read with their notification ids, by column name."""
    return [
        Notification(
            id=row["notification_id"],
            originator_id=row["originator_id"],
            originator_version=row["originator_version"],
            topic=row["topic"],
            state=bytes(row["state"]),
        )
        for row in rows
    ]
