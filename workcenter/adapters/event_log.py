"""Reading several streams of the event store merged in write order.

An item's audit is its streams (the WorkItem, its Actions, its ledger) in
notification order. The library reads one stream at a time and pages the whole
log; this asks the events table for just those streams, through its primary key
(``originator_id`` leads it), ordered by notification id. The events are
decoded by the store's own mapper, so upcasting applies as on every other read.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, cast
from uuid import UUID

from eventsourcing.application import Application
from eventsourcing.persistence import StoredEvent

from workcenter.domain.errors import UndecodableEvent
from workcenter.domain.model import DomainEvent
from workcenter.projections import sql
from workcenter.service_layer.ports import StoredSnapshot


def streams_in_order(
    store: Application[UUID], stream_ids: Sequence[UUID], *, until: int | None = None
) -> list[tuple[int, DomainEvent]]:
    """(notification id, event) of every event of ``stream_ids``, oldest first, up to
    notification id ``until`` if given."""
    if not stream_ids:
        return []
    recorder: Any = store.recorder
    if not hasattr(recorder, "events_table_name"):  # SQLite's and PostgreSQL's recorders
        raise TypeError(f"no merged stream read for {type(recorder).__name__}")
    # The library's notification id: rowid on SQLite, notification_id on PostgreSQL,
    # where the primary key on (originator_id, originator_version) serves the IN too.
    position = sql.position_column(recorder)
    statement = (
        f"SELECT {position}, originator_id, originator_version, topic, state"
        f" FROM {recorder.events_table_name}"
        f" WHERE originator_id IN ({','.join('?' * len(stream_ids))})"
    )
    params: list[Any] = [s.hex for s in stream_ids]
    if until is not None:
        statement += f" AND {position} <= ?"
        params.append(until)
    statement += f" ORDER BY {position}"
    with sql.transaction(recorder.datastore, commit=False) as c:
        c.execute(statement, params)
        rows = c.fetchall()
    mapper = store.mapper
    return [
        (
            row[0],
            cast(
                DomainEvent,
                mapper.to_domain_event(
                    StoredEvent(
                        originator_id=UUID(row[1]),
                        originator_version=row[2],
                        topic=row[3],
                        state=bytes(row[4]),
                    )
                ),
            ),
        )
        for row in rows
    ]


def events_after(store: Application[UUID], after: int, limit: int) -> list[tuple[int, DomainEvent]]:
    """(notification id, event) of the events after notification id ``after``, oldest
    first, at most ``limit``: the library's notification read, decoded by the mapper."""
    notifications = store.recorder.select_notifications(start=after + 1, limit=limit)
    mapper = store.mapper
    return [(n.id, cast(DomainEvent, mapper.to_domain_event(n))) for n in notifications]


def events_held(store: Application[UUID]) -> int:
    """How many events the store holds: ``event_count`` is the last one's position, and
    a PostgreSQL store's positions have gaps (found by acceptance testing, ADR-0133)."""
    recorder: Any = store.recorder
    with sql.transaction(recorder.datastore, commit=False) as c:
        c.execute(f"SELECT COUNT(*) FROM {recorder.events_table_name}")
        return int(c.fetchone()[0])


def position_of(store: Application[UUID], stream: UUID | str, version: int) -> int | None:
    """The notification id of ``stream``'s event at ``version``, or None: where an event
    that cannot be decoded is, for its error (ADR-0099), read in a transaction of its own."""
    recorder: Any = store.recorder
    with sql.transaction(recorder.datastore, commit=False) as c:
        c.execute(
            f"SELECT {sql.position_column(recorder)} FROM {recorder.events_table_name}"
            " WHERE originator_id = ? AND originator_version = ?",
            (stream.hex if isinstance(stream, UUID) else stream, version),
        )
        row = c.fetchone()
    return None if row is None else int(row[0])


def stored_snapshots(
    store: Application[UUID], streams: Sequence[UUID] | None
) -> tuple[int, Iterator[StoredSnapshot]]:
    """How many streams have snapshots (of ``streams``, or of every one), and the
    snapshots by stream, oldest version first, each decoded as it is reached, or the
    reason it does not decode: loads go past one that does not (ADR-0099), and ``audit
    verify`` reports it and checks every other against its events' fold (ADR-0103). One
    per 50 events of a stream, so this reads a fiftieth of what the walk does."""
    snapshots: Any = store.snapshots
    if snapshots is None:
        return 0, iter(())
    recorder = snapshots.recorder
    statement = (
        f"SELECT originator_id, originator_version, topic, state FROM {recorder.events_table_name}"
    )
    params: list[Any] = []
    if streams is not None:
        statement += f" WHERE originator_id IN ({','.join('?' * len(streams))})"
        params = [s.hex for s in streams]
    with sql.transaction(recorder.datastore, commit=False) as c:
        c.execute(statement + " ORDER BY originator_id, originator_version", params)
        rows = c.fetchall()
    # The count lets `audit verify` say how far its check got (ADR-0106).
    return len({row[0] for row in rows}), _decoded(store, rows)


def _decoded(store: Application[UUID], rows: list[Any]) -> Iterator[StoredSnapshot]:
    for row in rows:
        version = row[1]
        try:
            stream = UUID(str(row[0]))
        except ValueError:
            # SQLite's column takes any text: no stream is named by this one.
            yield StoredSnapshot(str(row[0]), version, None, "its stream id is not a UUID")
            continue
        try:
            decoded = store.mapper.to_domain_event(
                StoredEvent(stream, version, str(row[2] or ""), bytes(row[3] or b""))
            )
        except UndecodableEvent as damaged:
            yield StoredSnapshot(stream, version, None, damaged.reason)
        else:
            # An event of another kind under a snapshot's topic has no state: it equals
            # no fold, and is reported as such.
            yield StoredSnapshot(stream, version, getattr(decoded, "state", None), None)
