"""The states the detail view builds its DTOs from: the kinds of stream it reads (an
item, its Actions, its ledger, its conversation), how each folds, and the event store
as the view reads it (the newest versions of streams, a stream's state at a version).

The view keeps no copy of any state: a command's save hands over the states it
computed, and the rest come from the event store, which snapshots and caches them
(ADR-0020, ADR-0043).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, Protocol
from uuid import UUID

from eventsourcing.persistence import StoredEvent

from workcenter.domain import action as act
from workcenter.domain import conversation as conv
from workcenter.domain import resource_ledger as rl
from workcenter.domain import work_item as wi
from workcenter.domain.errors import UndecodableEvent, snapshot_ignored
from workcenter.domain.model import AggregateState, DomainEvent, snapshot_state
from workcenter.projections import sql
from workcenter.projections.tracked import Batch

log = logging.getLogger("workcenter.store")
Kind = Literal["item", "action", "ledger", "conversation"]
EVOLVE: dict[Kind, Callable[[Any, Any], AggregateState]] = {
    "item": wi.evolve,
    "action": act.evolve,
    "ledger": rl.evolve,
    "conversation": conv.evolve,
}
STATE_CLASS: dict[Kind, type[AggregateState]] = {
    "item": wi.WorkItemState,
    "action": act.ActionState,
    "ledger": rl.LedgerState,
    "conversation": conv.ConversationState,
}
EVENT_CLASS: dict[Kind, type[DomainEvent]] = {
    "item": wi.WorkItemEvent,
    "action": act.ActionEvent,
    "ledger": rl.LedgerEvent,
    "conversation": conv.ConversationEvent,
}
# The conversation events that change what the detail shows of it: its messages and
# the coordinator revision, and whether a Coordinator request is in flight (its provider
# turn dispatching, resource-ledger.md 2; ADR-0136). Mailbox claims and leases and a
# provider turn's preparation change none of it, so the view passes over them
# (read-models.md 2.4, ADR-0045).
MESSAGE_EVENTS: tuple[type[conv.ConversationEvent], ...] = (
    conv.CoordinatorTurnBegun,
    conv.CoordinatorSpeakerAssigned,
    conv.CoordinatorTurnDecided,
    conv.CoordinatorTurnFailed,
    conv.CoordinatorTurnInterrupted,
    conv.CoordinatorTurnRetired,
    conv.ProviderTurnDispatched,
    conv.ProviderTurnResponded,
    conv.ProviderTurnRejected,
    conv.ProviderTurnUnknown,
)


def stream_kind(event: DomainEvent) -> Kind | None:
    """The kind of the stream an event belongs to."""
    if isinstance(event, conv.ConversationEvent):
        return "conversation"
    return kind_of(event)


def kind_of(event: DomainEvent) -> Kind | None:
    """The kind of state an event changes for the view; None for events it passes over."""
    if isinstance(event, wi.WorkItemEvent):
        return "item"
    if isinstance(event, act.ActionEvent):
        return "action"
    if isinstance(event, rl.LedgerEvent):
        return "ledger"
    if isinstance(event, MESSAGE_EVENTS):
        return "conversation"
    return None


def stamps_by_item(
    batch: Batch, states: Mapping[UUID, AggregateState]
) -> dict[UUID, set[datetime]]:
    """Per WorkItem, the times of the events of ``batch`` that the view applies to it."""
    stamps: dict[UUID, set[datetime]] = {}
    for _, event in batch:
        state = states.get(event.originator_id)
        if kind_of(event) is None or state is None:
            continue
        item_id = state.id if isinstance(state, wi.WorkItemState) else state.work_item_id  # type: ignore[attr-defined]
        stamps.setdefault(item_id, set()).add(event.timestamp)
    return stamps


@dataclass(frozen=True)
class Ahead:
    """What a write read ahead for the view: the streams asked for, and the newest state
    of each that exists (one missing from ``states`` has no event yet)."""

    asked: frozenset[UUID]
    states: dict[UUID, AggregateState]
    # Whether the read found anything newer than the states held (or could not use it).
    changed: bool = True


class StateSource(Protocol):
    """The event store, as the view reads it: the newest version of streams, and a
    stream's state at a version (snapshots and the fold are the store's)."""

    def versions(
        self, aggregate_ids: Sequence[UUID], c: Any | None = None, upto: int | None = None
    ) -> dict[UUID, int]:
        """The newest versions (of events at positions up to ``upto``, if given), read
        with ``c`` if given (a cursor on the event store's own database), else in a read
        transaction of the store's."""
        ...

    def holds_events_of(self, datastore: Any) -> bool: ...

    def state(
        self, kind: Kind, aggregate_id: UUID, version: int, c: Any | None = None
    ) -> AggregateState | None:
        """The state at ``version``, read with ``c`` if given, else through the store."""
        ...

    def states(
        self, wanted: Mapping[UUID, tuple[Kind, int]], c: Any | None = None
    ) -> dict[UUID, AggregateState]:
        """``state`` of each of ``wanted`` (its kind and version) that exists."""
        ...


class EventStoreStates:
    """The ``StateSource`` of a store: its recorder's newest versions, and its loader.

    Inside a write transaction (``c`` given) a state is folded from the stream's rows
    read with that same cursor: asking the store's pool for a reader there would wait
    for any writer queued behind this one, which waits for us (a deadlock)."""

    def __init__(
        self,
        recorder: Any,
        load: Callable[[Kind, UUID, int], AggregateState | None],
        *,
        mapper: Any,
        snapshots_table: str | None,
    ) -> None:
        self.recorder = recorder
        self.load = load
        self.mapper = mapper
        self.snapshots_table = snapshots_table

    def versions(
        self, aggregate_ids: Sequence[UUID], c: Any | None = None, upto: int | None = None
    ) -> dict[UUID, int]:
        if c is not None:
            return self._versions(c, aggregate_ids, upto)
        with sql.transaction(self.recorder.datastore, commit=False) as read:
            return self._versions(read, aggregate_ids, upto)

    def _versions(self, c: Any, aggregate_ids: Sequence[UUID], upto: int | None) -> dict[UUID, int]:
        marks = ",".join("?" * len(aggregate_ids))
        bound = "" if upto is None else f" AND {sql.position_column(self.recorder)} <= ?"
        c.execute(
            "SELECT originator_id, MAX(originator_version)"
            f" FROM {self.recorder.events_table_name}"
            f" WHERE originator_id IN ({marks}){bound} GROUP BY originator_id",
            [*(i.hex for i in aggregate_ids), *(() if upto is None else (upto,))],
        )
        return {UUID(row[0]): int(row[1]) for row in c.fetchall()}

    def holds_events_of(self, datastore: Any) -> bool:
        return datastore is self.recorder.datastore

    def state(
        self, kind: Kind, aggregate_id: UUID, version: int, c: Any | None = None
    ) -> AggregateState | None:
        if c is None:
            return self.load(kind, aggregate_id, version)
        return self.states({aggregate_id: (kind, version)}, c).get(aggregate_id)

    def states(
        self, wanted: Mapping[UUID, tuple[Kind, int]], c: Any | None = None
    ) -> dict[UUID, AggregateState]:
        """With ``c``, every stream's newest snapshot at or below its version in one
        statement and the events after it in another, whatever their number: the
        runner's pages read the states of every item they touch (ADR-0116)."""
        if c is None:
            found = {i: self.load(kind, i, v) for i, (kind, v) in wanted.items()}
            return {i: state for i, state in found.items() if state is not None}
        if not wanted:
            return {}
        folded: dict[UUID, Any] = {}
        if self.snapshots_table is not None:
            bounds = " OR ".join(["(originator_id = ? AND originator_version <= ?)"] * len(wanted))
            c.execute(
                "SELECT s.originator_id, s.originator_version, s.topic, s.state"
                f" FROM {self.snapshots_table} s JOIN (SELECT originator_id,"
                f" MAX(originator_version) AS newest FROM {self.snapshots_table}"
                f" WHERE {bounds} GROUP BY originator_id) m"
                " ON s.originator_id = m.originator_id AND s.originator_version = m.newest",
                [value for i, (_, v) in wanted.items() for value in (i.hex, v)],
            )
            for row in c.fetchall():
                aggregate_id = UUID(str(row[0]))
                try:
                    decoded = self._decode(aggregate_id, row[1:])
                    folded[aggregate_id] = snapshot_state(decoded, aggregate_id, row[1])
                except UndecodableEvent as damaged:
                    # A cache of the fold below: replayed from the first event instead.
                    log.warning(snapshot_ignored(damaged))
        after = " OR ".join(
            ["(originator_id = ? AND originator_version > ? AND originator_version <= ?)"]
            * len(wanted)
        )
        c.execute(
            "SELECT originator_id, originator_version, topic, state"
            f" FROM {self.recorder.events_table_name} WHERE {after}"
            " ORDER BY originator_id, originator_version",
            [
                value
                for i, (_, v) in wanted.items()
                for value in (i.hex, folded[i].version if i in folded else 0, v)
            ],
        )
        foreign: set[UUID] = set()
        for row in c.fetchall():
            aggregate_id = UUID(str(row[0]))
            event = self._decode(aggregate_id, row[1:])
            kind = wanted[aggregate_id][0]
            if stream_kind(event) != kind:
                foreign.add(aggregate_id)  # a stream of another aggregate type
                continue
            folded[aggregate_id] = EVOLVE[kind](folded.get(aggregate_id), event)
        return {
            i: state
            for i, state in folded.items()
            if i not in foreign and state is not None and state.version == wanted[i][1]
        }

    def _decode(self, aggregate_id: UUID, row: Any) -> Any:
        return self.mapper.to_domain_event(
            StoredEvent(
                originator_id=aggregate_id,
                originator_version=row[0],
                topic=row[1],
                state=bytes(row[2]),
            )
        )
