"""The change feed: the event sequence as a browser follows it, one change per event.

A change names what happened (the event's type, its stream, version and position,
the WorkItem it belongs to, the Action and Run it concerns, the kind of actor) and
never what it carried: payloads stay in the store, and a client that wants the new
state reads the item's DTOs again (read-models.md 2.6: broadcasts are lossy, clients
fetch again). The position is the event's notification id, so a client that resumes
after the last position it saw misses nothing and sees nothing twice.

Every stream open on a server asks for the same pages of the sequence as the others:
the pages read last are kept (a page of the sequence never changes once read, since
SQLite writes one transaction at a time and numbers its events in commit order), so
the events of a page are read and decoded once however many clients follow them.

Action, ledger and Conversation events do not all name their WorkItem; the feed
learns each stream's owner from the events that do (``WorkItemCreated``,
``ActionAdded``, ``ActionPlanned``, ``LedgerOpened``, ``ConversationOpened``) and asks
the repository for a stream first met further on (a client resuming late).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from workcenter.domain import action as act
from workcenter.domain import conversation as conv
from workcenter.domain import inputs
from workcenter.domain import resource_ledger as rl
from workcenter.domain import work_item as wi
from workcenter.domain.errors import InvalidInput
from workcenter.domain.model import DomainEvent
from workcenter.projections.detail_states import Kind
from workcenter.service_layer.ports import NotificationReader
from workcenter.service_layer.repository import Repository

MAX_BATCH = 1000
# What a position past the head means, and what to do (found by acceptance testing,
# ADR-0145: "read again" told a restored store's clients nothing).
PAST_THE_HEAD = (
    "the position is past the head of the event sequence ({head}): this store never"
    " wrote it (it was replaced, or restored from an older backup); read everything"
    " again from the start, or follow from the head"
)
PAGES_KEPT = 64
# Owners are cheap to learn again; the map is dropped whole rather than grown forever.
OWNER_CACHE_LIMIT = 200_000


@dataclass(frozen=True)
class Change:
    position: int
    work_item_id: UUID
    aggregate: str
    aggregate_id: UUID
    version: int
    type: str
    at: datetime
    action_id: UUID | None
    run_id: UUID | None
    actor: str

    def json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "position": self.position,
            "workItemId": str(self.work_item_id),
            "aggregate": self.aggregate,
            "aggregateId": str(self.aggregate_id),
            "version": self.version,
            "type": self.type,
            "at": self.at.isoformat(),
            "actor": self.actor,
        }
        if self.action_id is not None:
            data["actionId"] = str(self.action_id)
        if self.run_id is not None:
            data["runId"] = str(self.run_id)
        return data


@dataclass(frozen=True)
class ChangePage:
    """The changes found, and the position read up to: a filtered read may find none
    in a page and still move on."""

    changes: list[Change]
    position: int


@dataclass(frozen=True)
class EventPage:
    """Events of the sequence, each with its position and its change (None for an event
    the feed cannot place), and the position read up to."""

    events: list[tuple[int, Change | None, DomainEvent]]
    position: int


class ChangeFeed:
    def __init__(self, repository: Repository, read_events_after: NotificationReader) -> None:
        self.repo = repository
        self.read_events_after = read_events_after
        self._owners: dict[UUID, UUID] = {}
        self._pages: OrderedDict[tuple[int, int], list[tuple[int, Change | None]]] = OrderedDict()
        self._lock = threading.Lock()

    def head(self) -> int:
        return self.repo.event_count()

    def after(
        self, position: int, *, limit: int = MAX_BATCH, work_item_id: UUID | None = None
    ) -> ChangePage:
        """The changes after ``position`` (of one WorkItem, if given) within the next
        ``limit`` events of the sequence. A position past the head is ``InvalidInput``:
        no store sent it (another store's, or one restored from an older backup)."""
        position, limit = _position(position), _limit(limit)
        if work_item_id is not None:
            work_item_id = self.repo.work_item(
                inputs.aggregate_id(work_item_id, "WorkItem")
            ).id  # NotFound if there is no such item
        page = self._page(position, limit)
        if not page and position > (head := self.head()):
            # Handed back as where to go on, it would skip every event up to it (the HTTP
            # stream refused it; found by acceptance testing, ADR-0145).
            raise InvalidInput(PAST_THE_HEAD.format(head=head))
        changes = [
            change
            for _, change in page
            if change is not None and work_item_id in (None, change.work_item_id)
        ]
        return ChangePage(changes, page[-1][0] if page else position)

    def events_after(self, position: int, *, limit: int = MAX_BATCH) -> EventPage:
        """The next ``limit`` events of the whole sequence after ``position``, decoded,
        for an export that resumes from the position it read up to (ADR-0145). Not
        kept: each is read once."""
        position, limit = _position(position), _limit(limit)
        read = self.read_events_after(position, limit)
        if not read and position > (head := self.head()):
            raise InvalidInput(PAST_THE_HEAD.format(head=head))
        events = [(at, self._change(at, event), event) for at, event in read]
        return EventPage(events, read[-1][0] if read else position)

    def _page(self, position: int, limit: int) -> list[tuple[int, Change | None]]:
        key = (position, limit)
        with self._lock:
            kept = self._pages.get(key)
        if kept is not None:
            return kept
        page = [(at, self._change(at, event)) for at, event in self.read_events_after(*key)]
        if page:  # an empty page is only empty until the next write
            with self._lock:
                self._pages[key] = page
                while len(self._pages) > PAGES_KEPT:
                    self._pages.popitem(last=False)
        return page

    def _owner(self, event: DomainEvent) -> UUID | None:
        stream = event.originator_id
        if isinstance(event, wi.WorkItemEvent):
            if isinstance(event, wi.WorkItemCreated):
                self._learn(rl.ledger_id_for(stream), stream)
            elif isinstance(event, wi.ActionAdded):
                self._learn(event.action_id, stream)
            return stream
        if isinstance(event, act.ActionPlanned | rl.LedgerOpened | conv.ConversationOpened):
            self._learn(stream, event.work_item_id)
        owner = self._owners.get(stream)
        if owner is None:
            owner = self._look_up(event)
            if owner is not None:
                self._learn(stream, owner)
        return owner

    def _look_up(self, event: DomainEvent) -> UUID | None:
        if isinstance(event, conv.ConversationEvent):
            return self.repo.conversation_owner(event.originator_id)
        kind: Kind = "action" if isinstance(event, act.ActionEvent) else "ledger"
        state = self.repo.state_at(kind, event.originator_id, event.originator_version)
        owner = getattr(state, "work_item_id", None)
        return owner if isinstance(owner, UUID) else None

    def _learn(self, stream: UUID, owner: UUID) -> None:
        if len(self._owners) >= OWNER_CACHE_LIMIT:
            self._owners.clear()
        self._owners[stream] = owner

    def _change(self, position: int, event: DomainEvent) -> Change | None:
        if isinstance(event, wi.WorkItemEvent):
            aggregate = "work_item"
            action_id = getattr(event, "action_id", None)
        elif isinstance(event, act.ActionEvent):
            aggregate, action_id = "action", event.originator_id
        elif isinstance(event, rl.LedgerEvent):
            aggregate, action_id = "ledger", None
        elif isinstance(event, conv.ConversationEvent):
            aggregate, action_id = "conversation", None
        else:
            return None
        owner = self._owner(event)
        if owner is None:
            return None
        run_id = getattr(event, "run_id", None) or getattr(event, "ended_run_id", None)
        return Change(
            position=position,
            work_item_id=owner,
            aggregate=aggregate,
            aggregate_id=event.originator_id,
            version=event.originator_version,
            type=type(event).__name__,
            at=event.timestamp,
            action_id=action_id if isinstance(action_id, UUID) else None,
            run_id=run_id if isinstance(run_id, UUID) else None,
            actor=event.actor.kind,
        )


def _limit(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_BATCH:
        raise InvalidInput(f"limit must be an integer from 1 to {MAX_BATCH}")
    return value


def _position(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidInput(f"a position is an integer of at least 0, not {value!r}")
    return value
