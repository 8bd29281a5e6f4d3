"""The detail read model: per WorkItem, its detail DTO (read-models.md 2.4) as orjson bytes.

It is an inline view: the DTO of an item is stored when a command on the item
or its Actions is saved, so a read right after such a write is one query; the
ledger's own writes and lease renewals are folded by the next save or read
(ADR-0019, ADR-0037).

Whenever events of an item arrive the view rebuilds that item's DTO from the
states after them (``dv_details``): it folds the batch's events onto the states
before them, and takes every other state of the item (its Actions, its ledger)
from the event store, which snapshots and caches them; the view keeps no copy of
any state (ADR-0020). A command's save hands over the states it computed after
its own events, and the view takes those instead of folding (ADR-0043). The DTO's ``now``
is the timestamp of the item's latest event, never the clock, so live and
rebuilt views are byte-for-byte equal: an item's DTO depends only on its events.
Within one batch an item's DTO is built once, after its last event there, which
gives the same bytes however the log is paged.

A WorkItem whose events since the last build all happened at its creation time
(its create's, in practice) is stored as a marker, not a DTO: its first DTO is
built when it is read, or stored by the next command that changes it (ADR-0073).
So is one whose last event is a Run's start, a heartbeat or a ledger event
(ADR-0076, ADR-0086): the DTOs of a running item are built when read, and a Run's
end stores its item's. The rules depend on the events alone, so live and rebuilt
views store the same rows.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar
from uuid import UUID

import orjson
from eventsourcing.dispatch import singledispatchmethod
from eventsourcing.persistence import Tracking
from eventsourcing.projection import Projection

from workcenter.domain import action as act
from workcenter.domain import conversation as conv
from workcenter.domain import resource_ledger as rl
from workcenter.domain import work_item as wi
from workcenter.domain.model import AggregateState, DomainEvent
from workcenter.projections import sql
from workcenter.projections.detail_states import (
    EVENT_CLASS,
    EVOLVE,
    STATE_CLASS,
    Ahead,
    Kind,
    StateSource,
    kind_of,
    stamps_by_item,
)
from workcenter.projections.dto import detail_json
from workcenter.projections.tracked import Batch, TrackedView

CACHE_LIMIT = 20_000
# What a row holds for an item whose DTO is built when read (a stored DTO is never
# empty: it is deflated, sealed or JSON).
DEFERRED = b""


def defers_detail(event: DomainEvent) -> bool:
    """Whether an item's DTO is left to be built when read after a save whose last event
    of the item is ``event``: a lease renewal (a heartbeat, many per Run), a ledger
    event (an LLM request reserved or settled, many per Run) or a Run's start (the
    claim's ``RunClaimed`` and the item's ``ActionStatusRecorded`` of it: only a claim
    makes an Action ``running``; an item's own ``StatusChanged`` to ``running`` also
    follows a dynamic item's finished Run, and stores the DTO). The save stores a marker
    at that event's position, as a create does (ADR-0073), instead of building the DTO
    once per heartbeat (ADR-0076); a claim's DTO would be replaced by the Run's first
    heartbeat, so it served only the reads of the lease's first third (ADR-0086). The
    Run's end, like any other save, stores the DTO. Decided by the event alone, so a
    rebuild's batches store the same rows as the saves did."""
    if isinstance(event, (act.LeaseRenewed, act.RunClaimed, rl.LedgerEvent)):
        return True
    return isinstance(event, wi.ActionStatusRecorded) and event.status == "running"


def build_detail(
    item: wi.WorkItemState,
    actions: dict[UUID, act.ActionState],
    ledger: rl.LedgerState | None,
    at: datetime,
    conversation: conv.ConversationState | None = None,
) -> bytes:
    """The serialised detail DTO of folded states, as of the item's event at ``at``."""
    return detail_json(item, actions, ledger, now=at, conversation=conversation)


Wanted = dict[UUID, tuple[Kind, AggregateState | None]]
"""Streams to read ahead: their kind and the state the view holds of each, if any."""

PrebuiltRow = tuple[str, UUID, int, bytes]
"""A DTO row built before the lock: the item's id (hex), the stream and version of the
event whose notification id is its position, the stored DTO (ADR-0070)."""


@dataclass(frozen=True)
class Blobs:
    """How the stored DTOs are packed (the store's compression, given by the composition
    root so that read models import no adapter)."""

    deflate: Callable[[bytes], bytes]
    inflate: Callable[[bytes], bytes]


STORED_AS_IS = Blobs(deflate=lambda data: data, inflate=lambda data: data)


class DetailView(TrackedView):
    TABLES: ClassVar[tuple[str, ...]] = ("dv_details",)

    def __init__(
        self, *args: Any, source: StateSource, blobs: Blobs = STORED_AS_IS, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.source = source
        self.blobs = blobs
        # aggregate id -> the newest state the view folded or loaded: a state at a version
        # is a pure fold, so an entry is right whenever its version is the one wanted.
        self._cache: dict[UUID, AggregateState] = {}

    def shadow(self, datastore: Any) -> DetailView:
        return type(self)(datastore, source=self.source, blobs=self.blobs)

    def table_statements(self) -> list[str]:
        return [
            # Folded states were kept here before ADR-0020; the event store serves them now.
            "DROP TABLE IF EXISTS dv_states",
            "CREATE TABLE IF NOT EXISTS dv_details ("
            " work_item_id TEXT PRIMARY KEY, position INTEGER NOT NULL, dto BLOB NOT NULL)",
        ]

    # --- writing --------------------------------------------------------------

    def streams_ahead(
        self,
        states: Mapping[UUID, AggregateState],
        written: Collection[UUID],
        known: Callable[[UUID], AggregateState | None] | None = None,
    ) -> Wanted:
        """The streams, other than those ``written``, that the DTOs of the WorkItems among
        a command's ``states`` are built from (their Actions, ledger and conversation),
        each with a state known of it (the view's, or the command's, which it read but did
        not write), if any: a pipelined write reads them with its insert instead of one
        exchange after another under the lock (ADR-0069)."""
        wanted: Wanted = {}
        for state in states.values():
            if not isinstance(state, wi.WorkItemState):
                continue
            others: dict[UUID, Kind] = {e.action_id: "action" for e in state.plan}
            others[rl.ledger_id_for(state.id)] = "ledger"
            others[conv.conversation_id_for(state.id)] = "conversation"
            for aggregate_id, kind in others.items():
                if aggregate_id in written:
                    continue
                # The newest of them: all are committed states (ADR-0043 keeps the
                # view's so; ``known`` is the caller's, as its repository's cache, which
                # holds the ledger a worker's reserve and settle wrote, ADR-0070), and
                # the fewer events the read ahead finds, the likelier the DTO built
                # before the lock stands.
                candidates = (
                    self._cache.get(aggregate_id),
                    states.get(aggregate_id),
                    known(aggregate_id) if known is not None else None,
                )
                found = [s for s in candidates if isinstance(s, STATE_CLASS[kind])]
                held = max(found, key=lambda s: s.version) if found else None
                wanted[aggregate_id] = (kind, held)
        return wanted

    def fold_ahead(self, wanted: Wanted, read: Sequence[tuple[Sequence[Any], int]]) -> Ahead:
        """The newest states of ``wanted`` from what was read ahead: per stream, in order,
        the events after the state held (or from the newest snapshot if none was held)
        and the stream's newest version, which shows a state held that was never
        committed (remembered by a write that then failed): such a stream, or one of
        another aggregate type, is read the usual way."""
        states: dict[UUID, AggregateState] = {}
        unread: set[UUID] = set()
        changed = False
        for (aggregate_id, (kind, held)), (events, newest) in zip(
            wanted.items(), read, strict=True
        ):
            if held is not None and held.version > newest:
                unread.add(aggregate_id)
                continue
            changed = changed or bool(events)
            state: AggregateState | None = held
            for event in events:
                if isinstance(event, EVENT_CLASS[kind]):
                    state = EVOLVE[kind](state, event)
                    continue
                snapshot = getattr(event, "state", None)  # a snapshot leads its stream
                state = snapshot if isinstance(snapshot, STATE_CLASS[kind]) else None
                if state is None:
                    unread.add(aggregate_id)
                    break
            if state is not None and aggregate_id not in unread:
                states[aggregate_id] = state
                self._remember(state)
        return Ahead(frozenset(wanted.keys() - unread), states, changed or bool(unread))

    def prebuild(
        self, events: Sequence[DomainEvent], states: Mapping[UUID, AggregateState], wanted: Wanted
    ) -> dict[UUID, bytes]:
        """The stored DTO of each WorkItem the command's ``events`` touch, built before the
        write takes its lock, from the command's states and the states held of ``wanted``
        (a stream held as none taken as having no event): right if the read ahead under
        the lock finds nothing newer, which the write checks (a lagging gap's events of
        the item's streams are then in those states, ADR-0069). Empty when a state is
        missing."""
        batch = list(enumerate(events))
        given = _after_batch(batch, states)
        touched: dict[UUID, DomainEvent] = {}
        for _, event in batch:
            kind = kind_of(event)
            if kind is None:
                continue
            after = given.get(event.originator_id)
            if not isinstance(after, STATE_CLASS[kind]):
                return {}
            item_id = after.id if kind == "item" else after.work_item_id  # type: ignore[attr-defined]
            touched[item_id] = event
        held = {i: state for i, (_, state) in wanted.items() if state is not None}
        assumed = Ahead(frozenset(wanted), held, changed=False)
        working: dict[UUID, AggregateState] = dict(given)
        built: dict[UUID, bytes] = {}
        stamps = stamps_by_item(batch, given)
        for item_id, last in touched.items():
            if not defers_detail(last) and item_id not in working:
                return {}  # a heartbeat's marker needs no state of the item; a DTO does
            if self._is_marker(item_id, last, stamps, working, None, None):
                built[item_id] = DEFERRED  # a marker, whatever the read ahead finds
                continue
            # Every stream the DTO reads is the command's or in ``wanted``: no read here.
            dto = self._build(item_id, last.timestamp, working, None, assumed)
            if dto is not None:
                built[item_id] = self.blobs.deflate(dto)
        return built

    def prebuilt_rows(
        self,
        events: Sequence[DomainEvent],
        states: Mapping[UUID, AggregateState],
        prebuilt: Mapping[UUID, bytes],
    ) -> tuple[list[PrebuiltRow], set[UUID]] | None:
        """The rows ``prebuild`` built, sent before their positions are known (ADR-0070):
        per WorkItem touched, its id, the (stream, version) of its last event here (the
        server makes that event's id the position) and its DTO; and the streams of those
        items, the only ones whose events the view may have missed. None if one is unbuilt."""
        given = _after_batch(list(enumerate(events)), states)
        last: dict[UUID, tuple[UUID, int]] = {}
        for event in events:
            kind = kind_of(event)
            if kind is None:
                continue
            after = given.get(event.originator_id)
            if not isinstance(after, STATE_CLASS[kind]):
                return None
            item_id = after.id if kind == "item" else after.work_item_id  # type: ignore[attr-defined]
            last[item_id] = (event.originator_id, event.originator_version)
        rows: list[PrebuiltRow] = []
        streams: set[UUID] = set()
        for item_id, (originator_id, version) in last.items():
            blob = prebuilt.get(item_id)
            if blob is None:
                return None
            rows.append((item_id.hex, originator_id, version, blob))
            streams |= {item_id, rl.ledger_id_for(item_id), conv.conversation_id_for(item_id)}
            item = given.get(item_id)
            if isinstance(item, wi.WorkItemState):
                streams |= {e.action_id for e in item.plan}
            elif blob == DEFERRED:
                # A heartbeat's marker, built without the item's state: the streams it
                # may have missed are the batch's own besides the item's three.
                streams |= {e.originator_id for e in events}
            else:
                return None
        return rows, streams

    def assumed(self, prebuilt: Mapping[UUID, bytes], wanted: Wanted) -> list[tuple[UUID, int]]:
        """Each stream of ``wanted`` at the version ``prebuild`` took it at (0: none), for
        the write to check that the DTOs of ``prebuilt`` stand; none when every row is a
        marker, which is built from no stream (ADR-0086)."""
        if all(blob == DEFERRED for blob in prebuilt.values()):
            return []
        return [(i, held.version if held else 0) for i, (_, held) in wanted.items()]

    def remember_written(
        self, events: Sequence[DomainEvent], states: Mapping[UUID, AggregateState]
    ) -> None:
        """After a write of ``prebuilt_rows`` committed: remember as ``_apply_batch`` does."""
        for state in _after_batch(list(enumerate(events)), states).values():
            self._remember(state)

    def rows_with_states(
        self,
        c: Any,
        batch: Batch,
        position: int,
        states: Mapping[UUID, AggregateState],
        ahead: Ahead | None = None,
        prebuilt: Mapping[UUID, bytes] | None = None,
    ) -> Batch:
        """``rows_within`` given the states a command computed after its own events, which
        end ``batch`` (a gap the view missed may come before them): an aggregate whose
        state there is at its last version in the batch is taken as it is, not folded
        (ADR-0043). The command saw every event before its own of the aggregates it
        changed (else its insert would have conflicted), so such a state is the fold's."""
        fresh = [entry for entry in batch if entry[0] > position]
        if fresh:
            self._apply_batch(c, fresh, states, ahead, prebuilt)
        return fresh

    def _apply_batch(
        self,
        c: Any,
        batch: Batch,
        states: Mapping[UUID, AggregateState] | None = None,
        ahead: Ahead | None = None,
        prebuilt: Mapping[UUID, bytes] | None = None,
    ) -> None:
        # The live view shares the event store's database: its states and versions are
        # read in this transaction, which sees the batch's own events too. A rebuild's
        # shadow is another file, so it reads them from the store.
        events_cursor = c if self.source.holds_events_of(self.datastore) else None
        working: dict[UUID, AggregateState] = {}
        touched: dict[UUID, tuple[int, DomainEvent]] = {}
        # The states read ahead are the newest, so the states after a lagging gap's
        # events of streams the command did not write (ADR-0069).
        known = {**ahead.states, **states} if ahead is not None and states else states
        given = _after_batch(batch, known) if known else {}
        # No save handed its states over (a runner's page, a catch-up): the states the page
        # starts from are read together, not one stream after another (ADR-0116).
        together = not states and events_cursor is not None
        if together:
            self._load_before(batch, events_cursor)
        for position, event in batch:
            kind = kind_of(event)
            if kind is None:
                continue
            aggregate_id = event.originator_id
            after = given.get(aggregate_id)
            if after is None or not isinstance(after, STATE_CLASS[kind]):
                before = working.get(aggregate_id)
                if before is not None and before.version != event.originator_version - 1:
                    before = None  # the view passed over events between (MESSAGE_EVENTS)
                if before is None and event.originator_version > 1:
                    before = self._at(
                        kind, aggregate_id, event.originator_version - 1, events_cursor
                    )
                after = EVOLVE[kind](before, event)
            item_id = after.id if kind == "item" else after.work_item_id  # type: ignore[attr-defined]
            working[aggregate_id] = after
            touched[item_id] = (position, event)
        for state in working.values():
            self._remember(state)
        stamps = stamps_by_item(batch, working)
        if together and ahead is None:
            ahead = self._newest_together(touched, working, events_cursor)
        for item_id, (position, last) in touched.items():
            blob = prebuilt.get(item_id) if prebuilt is not None else None
            if self._is_marker(item_id, last, stamps, working, events_cursor, ahead):
                blob = DEFERRED
            elif blob is None:
                dto = self._build(item_id, last.timestamp, working, events_cursor, ahead)
                blob = self.blobs.deflate(dto) if dto is not None else None
            if blob is not None:
                c.execute(
                    "INSERT INTO dv_details VALUES (?, ?, ?) ON CONFLICT (work_item_id)"
                    " DO UPDATE SET position = excluded.position, dto = excluded.dto",
                    (item_id.hex, position, blob),
                )

    def _is_marker(
        self,
        item_id: UUID,
        last: DomainEvent,
        stamps: Mapping[UUID, set[datetime]],
        working: dict[UUID, AggregateState],
        c: Any | None,
        ahead: Ahead | None,
    ) -> bool:
        """Whether the item's row after a batch is a marker, its DTO built when read: its
        last event in the batch is a Run's start, a heartbeat or a ledger event (ADR-0076,
        ADR-0086), or every event of it in the batch happened at its creation (ADR-0073).
        Decided from the batch's events alone, so live saves and a rebuild's batches store
        the same rows."""
        return defers_detail(last) or stamps[item_id] == {
            self._created_at(item_id, working, c, ahead)
        }

    def _created_at(
        self, item_id: UUID, working: dict[UUID, AggregateState], c: Any | None, ahead: Ahead | None
    ) -> datetime | None:
        """The item's creation time: from any state of it at hand (it never changes), else
        from its newest state (a read, only when the view has seen nothing of the item)."""
        for state in (working.get(item_id), self._cache.get(item_id)):
            if isinstance(state, wi.WorkItemState):
                return state.created_at
        item = self._newest({item_id: "item"}, working, c, ahead).get(item_id)
        return item.created_at if isinstance(item, wi.WorkItemState) else None

    def forget(self, aggregate_ids: Iterable[UUID]) -> None:
        """Drop the states remembered of these aggregates: those folded or taken in a
        command's transaction that then rolled back are of versions never committed."""
        for aggregate_id in aggregate_ids:
            self._cache.pop(aggregate_id, None)

    def _remember(self, state: AggregateState) -> None:
        if len(self._cache) >= CACHE_LIMIT:
            self._cache.clear()
        self._cache[state.id] = state

    def _at(
        self, kind: Kind, aggregate_id: UUID, version: int, c: Any | None
    ) -> AggregateState | None:
        cached = self._cache.get(aggregate_id)
        if cached is not None and cached.version == version:
            return cached
        state = self.source.state(kind, aggregate_id, version, c)
        if state is not None:
            self._remember(state)
        return state

    def _states_at(
        self, wanted: dict[UUID, tuple[Kind, int]], c: Any | None
    ) -> dict[UUID, AggregateState]:
        """``_at`` for many streams: the states of ``wanted`` at their versions, of those
        that exist, remembered or read together (one statement for every stream's
        snapshot, one for its events, ADR-0116) and then remembered."""
        found: dict[UUID, AggregateState] = {}
        load: dict[UUID, tuple[Kind, int]] = {}
        for aggregate_id, (kind, version) in wanted.items():
            cached = self._cache.get(aggregate_id)
            if cached is not None and cached.version == version:
                found[aggregate_id] = cached
            else:
                load[aggregate_id] = (kind, version)
        for aggregate_id, state in self.source.states(load, c).items():
            self._remember(state)
            found[aggregate_id] = state
        return found

    def _load_before(self, batch: Batch, c: Any) -> None:
        """Into the cache: each stream's state before its first event in ``batch``."""
        wanted: dict[UUID, tuple[Kind, int]] = {}
        for _, event in batch:
            kind = kind_of(event)
            if kind is not None and event.originator_id not in wanted:
                wanted[event.originator_id] = (kind, event.originator_version - 1)
        self._states_at({i: kv for i, kv in wanted.items() if kv[1] > 0}, c)

    def _newest_together(
        self, item_ids: Collection[UUID], working: dict[UUID, AggregateState], c: Any
    ) -> Ahead:
        """The newest states the DTOs of ``item_ids`` are built from that the batch did
        not fold, as a write's read ahead would give them: the items, then their Actions,
        ledgers and conversations, each kind of read once for them all."""
        wanted: dict[UUID, Kind] = {i: "item" for i in item_ids if i not in working}
        found = self._read_newest(wanted, c)
        others: dict[UUID, Kind] = {}
        for item_id in item_ids:
            item = working.get(item_id) or found.get(item_id)
            if isinstance(item, wi.WorkItemState):
                others |= {e.action_id: "action" for e in item.plan}
                others[rl.ledger_id_for(item_id)] = "ledger"
                others[conv.conversation_id_for(item_id)] = "conversation"
        others = {i: kind for i, kind in others.items() if i not in working}
        found |= self._read_newest(others, c)
        return Ahead(frozenset(wanted) | frozenset(others), found)

    def _read_newest(self, wanted: dict[UUID, Kind], c: Any) -> dict[UUID, AggregateState]:
        versions = self.source.versions(list(wanted), c) if wanted else {}
        return self._states_at({i: (wanted[i], v) for i, v in versions.items()}, c)

    def _newest(
        self,
        wanted: dict[UUID, Kind],
        working: dict[UUID, AggregateState],
        c: Any | None,
        ahead: Ahead | None = None,
        upto: int | None = None,
    ) -> dict[UUID, AggregateState]:
        """The states of ``wanted`` after this batch: folded here, else the store's newest
        (committed before this transaction, which holds the write lock when inline), as
        read ahead with the insert or, if not, read now."""
        found = {i: working[i] for i in wanted if i in working}
        rest = [i for i in wanted if i not in working]
        if ahead is not None:
            found |= {i: ahead.states[i] for i in rest if i in ahead.states}
            rest = [i for i in rest if i not in ahead.asked]
        for aggregate_id, version in (self.source.versions(rest, c, upto) if rest else {}).items():
            state = self._at(wanted[aggregate_id], aggregate_id, version, c)
            if state is not None:
                found[aggregate_id] = state
        return found

    def _build(
        self,
        item_id: UUID,
        at: datetime,
        working: dict[UUID, AggregateState],
        c: Any | None,
        ahead: Ahead | None = None,
        upto: int | None = None,
    ) -> bytes | None:
        item = self._newest({item_id: "item"}, working, c, ahead, upto).get(item_id)
        if not isinstance(item, wi.WorkItemState):
            return None
        wanted: dict[UUID, Kind] = {e.action_id: "action" for e in item.plan}
        wanted[rl.ledger_id_for(item_id)] = "ledger"
        wanted[conv.conversation_id_for(item_id)] = "conversation"
        states = self._newest(wanted, working, c, ahead, upto)
        actions = {k: s for k, s in states.items() if isinstance(s, act.ActionState)}
        ledger = next((s for s in states.values() if isinstance(s, rl.LedgerState)), None)
        talk = next((s for s in states.values() if isinstance(s, conv.ConversationState)), None)
        return build_detail(item, actions, ledger, at, talk)

    def reset(self, application_name: str) -> None:
        self._cache.clear()
        super().reset(application_name)

    # --- reading --------------------------------------------------------------

    def detail(self, work_item_id: UUID) -> dict[str, Any] | None:
        """The item's detail DTO as of its latest event, or None if the view has not seen it."""
        raw = self.detail_bytes(work_item_id)
        return None if raw is None else dict(orjson.loads(raw))

    def current_detail_bytes(
        self, work_item_id: UUID, application_name: str, head: Callable[[Any], int]
    ) -> tuple[bytes | None, bool]:
        """The item's stored DTO and whether the view had every event up to ``head``,
        both read in one transaction: the fast path of a read right after a write."""
        with sql.transaction(self.datastore, commit=False) as c:
            # The position and the DTO in one statement: a read is a handful of these.
            c.execute(
                "SELECT (SELECT MAX(notification_id) FROM tracking WHERE application_name = ?),"
                " (SELECT dto FROM dv_details WHERE work_item_id = ?)",
                (application_name, work_item_id.hex),
            )
            position, dto = c.fetchone()
            current = (position or 0) >= head(c)
            at = None
            if dto is not None and bytes(dto) == DEFERRED:
                c.execute(
                    "SELECT position FROM dv_details WHERE work_item_id = ?", (work_item_id.hex,)
                )
                at = c.fetchone()[0]
        return (None if dto is None else self._unpack(work_item_id, bytes(dto), at)), current

    def detail_bytes(self, work_item_id: UUID) -> bytes | None:
        rows = self._rows(
            "SELECT dto, position FROM dv_details WHERE work_item_id = ?", (work_item_id.hex,)
        )
        return self._unpack(work_item_id, bytes(rows[0][0]), rows[0][1]) if rows else None

    def goals(self, work_item_ids: Sequence[UUID]) -> dict[UUID, str]:
        """The goal each item's stored DTO shows (masked, as a page shows it), of the items
        the view holds a DTO of (not a marker, whose DTO a read builds), in one read: what
        a search of the list reads (ADR-0138)."""
        if not work_item_ids:
            return {}
        rows = self._rows(
            "SELECT work_item_id, dto FROM dv_details WHERE work_item_id IN"
            f" ({', '.join('?' * len(work_item_ids))})",
            [work_item_id.hex for work_item_id in work_item_ids],
        )
        return {
            UUID(key): str(orjson.loads(self.blobs.inflate(bytes(stored))).get("goal") or "")
            for key, stored in rows
            if bytes(stored) != DEFERRED
        }

    def _unpack(self, work_item_id: UUID, stored: bytes, position: int | None) -> bytes | None:
        if stored != DEFERRED:
            return self.blobs.inflate(stored)
        # Built from the states as of the marker's position, as the write that left it
        # would have stored it; its ``now`` is the create's time, which was the time of
        # every event the view applied to the item since its last DTO.
        item = self._newest({work_item_id: "item"}, {}, None, upto=position).get(work_item_id)
        if not isinstance(item, wi.WorkItemState):
            return None
        return self._build(
            work_item_id, item.created_at, {work_item_id: item}, None, None, position
        )


def _after_batch(batch: Batch, states: Mapping[UUID, AggregateState]) -> dict[UUID, AggregateState]:
    """The given states that are of their aggregate's last version in ``batch``: the
    states after the batch, as a fold of it onto the states before it would give."""
    last = {event.originator_id: event.originator_version for _, event in batch}
    return {
        aggregate_id: state
        for aggregate_id, version in last.items()
        if (state := states.get(aggregate_id)) is not None and state.version == version
    }


class Detail(Projection[DetailView]):
    """The same view code serves the inline lifecycle, the runner and rebuilds."""

    name = "detail"

    @singledispatchmethod
    def process_event(self, domain_event: Any, tracking: Tracking) -> None:
        self.view.apply(self.name, [(tracking.notification_id, domain_event)])
