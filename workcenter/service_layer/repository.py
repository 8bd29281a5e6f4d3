"""The repository and its unit of work: loading aggregates and saving a command.

Aggregates are loaded through the library's repository (cache and snapshots)
with pure projector functions, and a command's Unit of events is saved in one
transaction together with any snapshot due and the rows of the inline read
models (ADR-0016); a lost race reloads and decides again. What reaches the
database is the recorder's business: this module only hands it the snapshots
and the inline write through the ``TransactionArguments`` port.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import partial
from itertools import chain
from typing import Any, TypeVar, cast
from uuid import UUID

from eventsourcing.application import AggregateNotFoundError, Application
from eventsourcing.persistence import IntegrityError

from workcenter.domain import action as act
from workcenter.domain import conversation as conv
from workcenter.domain import inputs
from workcenter.domain import resource_ledger as rl
from workcenter.domain import work_item as wi
from workcenter.domain.errors import (
    UNKNOWN_VERSION,
    NotFound,
    UndecodableEvent,
    VersionConflict,
    WorkcenterError,
    snapshot_ignored,
)
from workcenter.domain.model import NO_START, AggregateState, DomainEvent, snapshot_state
from workcenter.domain.unit import Unit
from workcenter.projections.detail_states import Kind
from workcenter.projections.inline import InlineWrite
from workcenter.service_layer import backoff
from workcenter.service_layer.ports import StreamsAfter, TransactionArguments
from workcenter.service_layer.read_models import ReadModels

SNAPSHOT_INTERVAL = 50
log = logging.getLogger("workcenter.store")
SAVE_ATTEMPTS = 8
S = TypeVar("S", bound=AggregateState)
SnapshotClasses = Mapping[type[AggregateState], type[DomainEvent]]


class WriteContention(WorkcenterError):
    """Other writers kept moving the same aggregates; the command gave up."""

    code = "write_contention"


Projector = Callable[[Any, Iterable[Any]], Any]


class ForeignStream(Exception):
    """The stream loaded belongs to another aggregate type (an Action's id given as a
    WorkItem's, say): the load answers NotFound, never a fold of foreign events."""


def _projector(
    evolve: Callable[[Any, Any], Any],
    state_class: type[AggregateState],
    event_class: type[DomainEvent],
    snapshot: type[DomainEvent],
) -> Callable[[Any, Iterable[Any]], Any]:
    def project(state: Any, events: Iterable[Any]) -> Any:
        if state is not None and not isinstance(state, state_class):
            raise ForeignStream  # a cached state of another type
        for event in events:
            if isinstance(event, snapshot):
                state = snapshot_state(event, event.originator_id, event.originator_version)
            elif state is None and event.originator_version != 1:
                # What the snapshots table held was no snapshot of this stream (another's,
                # or an event's row): loads replay the events instead (ADR-0103).
                raise UndecodableEvent(
                    event.originator_id, event.originator_version, None, NO_START
                )
            elif isinstance(event, event_class):
                state = evolve(state, event)
            else:
                raise ForeignStream
        return state

    return project


def fold(state: S, events: Iterable[DomainEvent], evolve: Callable[[Any, Any], Any]) -> S:
    """``state`` after ``events`` (a command's own, just decided)."""
    for event in events:
        state = evolve(state, event)
    return state


class Repository:
    """Loads a command's aggregates and saves its events as one unit of work."""

    def __init__(
        self,
        store: Application[UUID],
        read_models: ReadModels,
        transaction: TransactionArguments,
        snapshot_classes: SnapshotClasses,
    ) -> None:
        self.store = store
        self.read_models = read_models
        self.transaction = transaction
        self.snapshot_classes = snapshot_classes
        self.project_action = _projector(
            act.evolve, act.ActionState, act.ActionEvent, snapshot_classes[act.ActionState]
        )
        self.project_work_item = _projector(
            wi.evolve, wi.WorkItemState, wi.WorkItemEvent, snapshot_classes[wi.WorkItemState]
        )
        self.project_ledger = _projector(
            rl.evolve, rl.LedgerState, rl.LedgerEvent, snapshot_classes[rl.LedgerState]
        )
        self.project_conversation = _projector(
            conv.evolve,
            conv.ConversationState,
            conv.ConversationEvent,
            snapshot_classes[conv.ConversationState],
        )
        self.projectors: dict[Kind, Callable[[Any, Iterable[Any]], Any]] = {
            "item": self.project_work_item,
            "action": self.project_action,
            "ledger": self.project_ledger,
            "conversation": self.project_conversation,
        }
        self._projectors_by_event: tuple[tuple[type, Projector], ...] = (
            (wi.WorkItemEvent, self.project_work_item),
            (act.ActionEvent, self.project_action),
            (rl.LedgerEvent, self.project_ledger),
            (conv.ConversationEvent, self.project_conversation),
        )
        recorder = store.recorder
        self.streams_after = recorder if isinstance(recorder, StreamsAfter) else None
        self._ignored_snapshots: set[tuple[UUID | str, int]] = set()

    # --- loading --------------------------------------------------------------

    def _load(self, aggregate_id: UUID, version: int | None, projector: Callable[..., Any]) -> Any:
        repository = self.store.repository
        if version is None and self.streams_after is not None and repository.cache is not None:
            try:
                cached: Any = repository.cache.get(aggregate_id)
            except KeyError:
                pass
            else:
                # The library's fast-forward of a cached state, for less: the events after
                # it, read through the port, folded by the same projector.
                [stored] = self.streams_after.select_streams_after([(aggregate_id, cached.version)])
                if not stored:
                    return projector(cached, ())  # still checks the cached state's type
                state = projector(cached, map(self.store.mapper.to_domain_event, stored))
                repository.cache.put(aggregate_id, state)
                return state
        try:
            state = repository.get(aggregate_id, version=version, projector_func=projector)
        except UndecodableEvent as damaged:
            if self.store.snapshots is None:
                raise
            state = self._replayed(aggregate_id, version, projector, damaged)
        if version is None and repository.cache is not None:
            # The library fast-forwards a cached state but keeps the old (immutable) one
            # in the cache; put the newer state back so the next load replays only the
            # events after it, not every event since the aggregate was first cached.
            repository.cache.put(aggregate_id, state)
        return state

    def _replayed(
        self,
        aggregate_id: UUID,
        version: int | None,
        projector: Callable[..., Any],
        damaged: UndecodableEvent,
    ) -> Any:
        """The state from the stream's events alone, when a load that began at a snapshot
        met bytes it could not decode: a snapshot is a cache of this fold, so one that does
        not decode is not trusted (ADR-0099). Should an event be the damaged one, the
        replay meets it too and its error stands."""
        state = projector(None, self.store.events.get(aggregate_id, lte=version))
        if state is None:
            raise AggregateNotFoundError(aggregate_id)
        if (damaged.stream, damaged.version) not in self._ignored_snapshots:
            # Once per process: the operator needs to hear of it, not at every load.
            self._ignored_snapshots.add((damaged.stream, damaged.version))
            log.warning(snapshot_ignored(damaged))
        return state

    def folds_of_events(self, stream_id: UUID, versions: Sequence[int]) -> dict[int, Any]:
        """The stream's state at each of ``versions``, folded from its events alone, never
        from a snapshot (what a snapshot must equal, ADR-0103), by the projector of the
        aggregate its first event belongs to: one read of the events up to the last
        version. A version the events do not reach is left out."""
        if not versions:
            return {}
        events = iter(self.store.events.get(stream_id, lte=max(versions)))
        first = next(events, None)
        project = next(
            (p for kind, p in self._projectors_by_event if isinstance(first, kind)), None
        )
        if first is None or project is None:
            return {}  # no events, or no aggregate's stream: nothing a snapshot could equal
        folds: dict[int, Any] = {}
        state: Any = None
        wanted = set(versions)
        try:
            for event in chain((first,), events):
                state = project(state, (event,))
                if event.originator_version in wanted:
                    folds[event.originator_version] = state
        except ForeignStream:
            return {}  # an event of another aggregate in the stream: no fold to equal
        return folds

    def work_item(self, work_item_id: UUID, version: int | None = None) -> wi.WorkItemState:
        work_item_id = inputs.aggregate_id(work_item_id, "WorkItem")
        state = self._load_state(work_item_id, version, self.project_work_item, wi.WorkItemState)
        if state is None:
            raise NotFound("WorkItem", work_item_id, version)
        return state

    def action(self, action_id: UUID, version: int | None = None) -> act.ActionState:
        action_id = inputs.aggregate_id(action_id, "Action")
        state = self._load_state(action_id, version, self.project_action, act.ActionState)
        if state is None:
            raise NotFound("Action", action_id, version)
        return state

    def ledger(self, work_item_id: UUID, version: int | None = None) -> rl.LedgerState:
        """The WorkItem's ResourceLedger."""
        work_item_id = inputs.aggregate_id(work_item_id, "WorkItem")
        ledger_id = rl.ledger_id_for(work_item_id)
        state = self._load_state(ledger_id, version, self.project_ledger, rl.LedgerState)
        if state is None:
            raise NotFound("ResourceLedger of WorkItem", work_item_id, version)
        return state

    def conversation(self, work_item_id: UUID) -> conv.ConversationState | None:
        """The WorkItem's Conversation; None until its first event (the stream opens lazily)."""
        work_item_id = inputs.aggregate_id(work_item_id, "WorkItem")
        return self._load_state(
            conv.conversation_id_for(work_item_id),
            None,
            self.project_conversation,
            conv.ConversationState,
        )

    def _load_state(
        self,
        aggregate_id: UUID,
        version: int | None,
        projector: Callable[..., Any],
        state_class: type[S],
    ) -> S | None:
        """The state, or None when the stream is missing, of another aggregate type, or
        asked for at a version it never had (before its first, or past its newest: the
        library would answer the newest)."""
        if version is not None and inputs.version(version, "version") < 1:
            return None
        try:
            state = self._load(aggregate_id, version, projector)
        except (AggregateNotFoundError, ForeignStream):
            return None
        if not isinstance(state, state_class):
            return None
        return state if version is None or state.version == version else None

    def state_at(self, kind: Kind, aggregate_id: UUID, version: int) -> AggregateState | None:
        """A stream's state at ``version``, for the detail view (which keeps no states)."""
        if kind == "item":
            return self._load_state(aggregate_id, version, self.project_work_item, wi.WorkItemState)
        if kind == "action":
            return self._load_state(aggregate_id, version, self.project_action, act.ActionState)
        if kind == "conversation":
            return self._load_state(
                aggregate_id, version, self.project_conversation, conv.ConversationState
            )
        return self._load_state(aggregate_id, version, self.project_ledger, rl.LedgerState)

    def conversation_owner(self, conversation_id: UUID) -> UUID | None:
        """The WorkItem of a Conversation stream (its id derives one way from the item's)."""
        state = self._load_state(
            conversation_id, 1, self.project_conversation, conv.ConversationState
        )
        return state.work_item_id if state is not None else None

    def together(self, wanted: Mapping[UUID, Kind]) -> dict[UUID, AggregateState] | None:
        """The newest states of ``wanted``, read together (one statement on PostgreSQL, one
        transaction on SQLite): each cached one brought up to date, each other one loaded
        from its newest snapshot (ADR-0069). None when
        one is missing or not of its kind: the caller then loads them one by one, which
        says which."""
        cache = self.store.repository.cache
        if self.streams_after is None or cache is None:
            return None
        cached: list[AggregateState | None] = []
        for aggregate_id in wanted:
            try:
                cached.append(cast(AggregateState, cache.get(aggregate_id)))
            except KeyError:
                cached.append(None)
        newer = self.streams_after.select_streams_after(
            [(i, s.version if s is not None else 0) for i, s in zip(wanted, cached, strict=True)]
        )
        found: dict[UUID, AggregateState] = {}
        for (aggregate_id, kind), state, stored in zip(wanted.items(), cached, newer, strict=True):
            try:
                # Also with no new event: the projector checks the cached state's type.
                after = self.projectors[kind](state, map(self.store.mapper.to_domain_event, stored))
            except (ForeignStream, UndecodableEvent):
                # Loaded one by one instead, where a snapshot that does not decode is
                # replaced by its events and a damaged event is reported.
                return None
            if after is None:
                return None
            if after is not state:
                cache.put(aggregate_id, after)
            found[aggregate_id] = after
        return found

    def run_states(
        self, action_id: UUID, *, with_ledger: bool, work_item_id: UUID | None = None
    ) -> tuple[act.ActionState, wi.WorkItemState, rl.LedgerState | None]:
        """An Action and its WorkItem (and, ``with_ledger``, the item's ledger), in one read
        when the Action is cached or ``work_item_id`` names its item (a claim's candidate
        does, ADR-0074), else the Action in one read and the others in another (a command
        on an Action this process has not seen, ADR-0069). A ``work_item_id`` that is not
        the Action's is only a lost read: they are then loaded one by one."""
        action_id = inputs.aggregate_id(action_id, "Action")
        cache = self.store.repository.cache
        try:
            known = cache.get(action_id) if cache is not None else None
        except KeyError:
            known = None
        if isinstance(known, act.ActionState):
            work_item_id = known.work_item_id
        elif work_item_id is None:
            first = self.together({action_id: "action"})
            known = first.get(action_id) if first is not None else None
            if isinstance(known, act.ActionState):
                work_item_id = known.work_item_id
        if work_item_id is not None:
            wanted: dict[UUID, Kind] = {action_id: "action", work_item_id: "item"}
            if with_ledger:
                wanted[rl.ledger_id_for(work_item_id)] = "ledger"
            states = self.together(wanted)
            if states is not None:
                action, item = states[action_id], states[work_item_id]
                ledger = states.get(rl.ledger_id_for(work_item_id)) if with_ledger else None
                if (
                    isinstance(action, act.ActionState)
                    and isinstance(item, wi.WorkItemState)
                    and action.work_item_id == item.id
                    and (ledger is None or isinstance(ledger, rl.LedgerState))
                ):
                    return action, item, ledger
        action = self.action(action_id)
        return action, self.work_item(action.work_item_id), None

    def actions(self, item: wi.WorkItemState, *statuses: str) -> dict[UUID, act.ActionState]:
        """The item's Actions (only those whose mirrored status is in ``statuses``, if given)."""
        entries = item.entries(*statuses) if statuses else item.plan
        return {e.action_id: self.action(e.action_id) for e in entries}

    def has_run(self, work_item_id: UUID, run_id: UUID) -> bool:
        """Whether ``run_id`` names a Run of one of the item's Actions. A Run stays in its
        Action's state once claimed, so a committed state this process holds that has it
        answers unread (the worker that claimed the Run holds its Action: a reservation
        costs no read more, ADR-0078's reasoning); else the item and its Actions are
        read, the one running first."""
        cached = self._cached(work_item_id)
        if isinstance(cached, wi.WorkItemState):
            for entry in cached.plan:
                action = self._cached(entry.action_id)
                if isinstance(action, act.ActionState) and action.run(run_id) is not None:
                    return True
        item = self.work_item(work_item_id)
        running_first = sorted(
            item.plan,
            key=lambda e: (e.status != "running", e.action_id != item.current_action_id),
        )
        return any(self.action(e.action_id).run(run_id) is not None for e in running_first)

    def events(
        self, aggregate_id: UUID, after: int | None = None, limit: int | None = None
    ) -> list[DomainEvent]:
        return cast(
            list[DomainEvent], list(self.store.events.get(aggregate_id, gt=after, limit=limit))
        )

    def event_count(self) -> int:
        return self.store.recorder.max_notification_id() or 0

    # --- the unit of work -----------------------------------------------------

    def save(self, unit: Unit) -> None:
        if unit.needs_conversation:
            # The unit woke the Coordinator: its mailbox entries join the same write. A
            # WorkItem created by this very unit has no Conversation yet: nothing to load.
            created = any(isinstance(e, wi.WorkItemCreated) for e in unit.events)
            unit.attach_conversation(None if created else self.conversation(unit.item.id))
        states: dict[UUID, AggregateState] = {unit.item.id: unit.item, **unit.actions}
        if unit.ledger is not None:
            states[unit.ledger.id] = unit.ledger
        if unit.conversation is not None:
            states[unit.conversation.id] = unit.conversation
        self.save_events(unit.events, states)

    def save_created(self, unit: Unit) -> None:
        """``save`` for a unit that starts a new WorkItem's streams, under ids drawn for
        it. The recorder sends a write again when its connection is lost before the
        answer (ADR-0056), so a create that had committed meets its own rows: the item
        stored as decided means it did. Anything else is refused, nothing written."""
        try:
            self.save(unit)
        except IntegrityError:
            try:
                stored: wi.WorkItemState | None = self.work_item(unit.item.id)
            except NotFound:
                stored = None
            if stored != unit.item:
                raise WriteContention(
                    f"WorkItem {unit.item.id} exists already: nothing was written"
                ) from None

    def save_events(
        self, events: Sequence[DomainEvent], states: Mapping[UUID, AggregateState]
    ) -> None:
        """One transaction: the events, snapshots of ``states`` that crossed an interval,
        and the rows and positions of the eager read models, applied from ``events``."""
        if not events:
            return
        along: dict[str, Any] = {}
        snapshots = self._snapshots(states, events)
        if snapshots:
            along.update(self.transaction.snapshots(snapshots))
        inline = None
        views = self.read_models.written_by(events)
        if views:
            # The states go along for the detail view, which takes them instead of
            # folding the events onto the states before them (ADR-0043).
            inline = InlineWrite(
                events, views, self.store.mapper, states=states, known=self._cached
            )
            along.update(self.transaction.inline(inline))
        try:
            # The event store's own put, not ``Application.save``: that one only collects
            # the events again, testing each against the library's runtime protocols (~10 us
            # an event), and its snapshot and notify hooks do nothing for events alone.
            self.store.events.put(events, **along)
        except BaseException:
            if inline is not None:
                inline.forget_uncommitted()
            raise
        cache = self.store.repository.cache
        if cache is not None:
            # The library caches only aggregates it saves, and it is given events: keep the
            # states just saved, so the next command's load replays nothing (ADR-0020).
            for state in states.values():
                cache.put(state.id, state)
        if inline is not None and inline.left_behind:
            # Too far behind to catch up inside the command; the rule is in inline.py.
            self.read_models.catch_up(inline.left_behind)

    def _cached(self, aggregate_id: UUID) -> AggregateState | None:
        """A committed state of the aggregate in the library's cache, if any: the states
        saved and loaded by this process (ADR-0020)."""
        cache = self.store.repository.cache
        if cache is None:
            return None
        try:
            state = cache.get(aggregate_id)
        except KeyError:
            return None
        return state if isinstance(state, AggregateState) else None

    def _snapshots(
        self, states: Mapping[UUID, AggregateState], events: Sequence[DomainEvent]
    ) -> list[DomainEvent]:
        """A snapshot of every aggregate whose stream crossed a multiple of the interval.

        The library snapshots only aggregates it was given, and it is given events.
        """
        if self.store.snapshots is None:
            return []
        crossed = {e.originator_id for e in events if e.originator_version % SNAPSHOT_INTERVAL == 0}
        return [
            self.snapshot_classes[type(state)](
                originator_id=state.id,
                originator_version=state.version,
                timestamp=events[-1].timestamp,
                state=state,  # type: ignore[call-arg]
            )
            for aggregate_id in crossed
            if (state := states.get(aggregate_id)) is not None
        ]

    def execute(self, decide: Callable[[], Unit]) -> Unit:
        """Decide and save; on a lost race back off, reload and decide again (the checks
        run again too)."""
        for attempt in range(SAVE_ATTEMPTS):
            if attempt:
                backoff.pause(attempt - 1)
            unit = decide()
            if self._won(partial(self.save, unit)):
                return unit
        raise WriteContention("the aggregates kept changing; try again")

    @staticmethod
    def _won(save: Callable[[], None]) -> bool:
        """Whether ``save`` committed; False when it lost a race (a stream had moved on
        past the version its events take)."""
        try:
            save()
        except IntegrityError:
            return False
        return True

    def execute_on_run(
        self,
        decide: Callable[[act.ActionState, wi.WorkItemState], Unit],
        action_id: UUID,
    ) -> Unit:
        """``execute`` for a command on a Run: decided on its Action and WorkItem.

        The first decision is on the states this process holds, unread (ADR-0078), when
        its events reach both streams: each event takes its stream's next version, so
        the save fails if either moved on. Otherwise (a stream the decision read but
        does not write, a refusal, a lost race) it is decided again on the states read."""
        action = self._cached(action_id)
        item = self._cached(action.work_item_id) if isinstance(action, act.ActionState) else None
        if isinstance(action, act.ActionState) and isinstance(item, wi.WorkItemState):
            try:
                unit = decide(action, item)
            except WorkcenterError:
                pass
            else:
                fenced = {action.id, item.id} <= {e.originator_id for e in unit.events}
                if fenced and self._won(partial(self.save, unit)):
                    return unit

        def read_and_decide() -> Unit:
            action, item, _ = self.run_states(action_id, with_ledger=False)
            return decide(action, item)

        return self.execute(read_and_decide)

    def save_action(
        self, decide: Callable[[act.ActionState], Sequence[DomainEvent]], action_id: UUID
    ) -> act.ActionState | None:
        """A command on the Action alone: load, decide, save; retried on a lost race.
        None if it kept losing.

        The first decision is on the state this process last saved or loaded, unread
        (ADR-0078): its events take the next version, so the save fails if the stream
        moved on. A decision that writes nothing, or refuses, proves nothing about a
        state that may be old, so it is decided again on the state read."""
        cached = self._cached(action_id)
        if isinstance(cached, act.ActionState):
            try:
                events = decide(cached)
            except WorkcenterError:
                events = ()
            if events:
                after = fold(cached, events, act.evolve)
                if self._won(partial(self.save_events, events, {cached.id: after})):
                    return after
        for attempt in range(SAVE_ATTEMPTS):
            if attempt:
                backoff.pause(attempt - 1)
            action = self.action(action_id)
            events = decide(action)
            after = fold(action, events, act.evolve)
            if self._won(partial(self.save_events, events, {action.id: after})):
                return after
        return None

    def check_expected(
        self,
        state: AggregateState,
        expected_version: int | None,
        conflicts: tuple[type[DomainEvent], ...] | None,
    ) -> None:
        """Refuse only if an event of the command's conflict class came after what the caller saw.

        ``conflicts=None`` is the strict class: any later event conflicts.
        """
        if expected_version is None or expected_version == state.version:
            return
        # The version said is the ledger's, as `budget show` names it beside the control
        # version (both are taken): "Execution control" alone read as the latter.
        subject = "Execution control (the ledger)" if isinstance(state, rl.LedgerState) else ""
        if expected_version > state.version or expected_version < 1:
            raise VersionConflict(
                state.id, expected_version, state.version, [UNKNOWN_VERSION], subject
            )
        later = self.events(state.id, after=expected_version)
        clashing = [
            type(e).__name__ for e in later if conflicts is None or isinstance(e, conflicts)
        ]
        if clashing:
            raise VersionConflict(state.id, expected_version, state.version, clashing, subject)
