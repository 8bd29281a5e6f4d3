"""Loading and saving aggregates: the plumbing every service command shares.

Aggregates are loaded through the library's repository (cache and snapshots)
with pure projector functions, and a command's Unit of events is saved in one
transaction together with any snapshot due and the rows of the inline read
models (ADR-0016); a lost race reloads and decides again.
"""

from __future__ import annotations

import os
import sqlite3
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol, Self, TypeVar, cast
from uuid import UUID

import orjson
from eventsourcing.application import AggregateNotFoundError, Application
from eventsourcing.persistence import IntegrityError, PersistenceError
from eventsourcing.sqlite import SQLiteCursor

from workcenter.adapters.persistence import (
    SNAPSHOT_CLASSES,
    ActionSnapshot,
    LedgerSnapshot,
    StoreUnavailable,
    WorkItemSnapshot,
    prepare_store_file,
    resolve_db_path,
    sqlite_env,
    store_env,
)
from workcenter.adapters.recorders import (
    INLINE_WRITE,
    SNAPSHOTS,
    OneCommitSQLiteRecorder,
    SnapshotWrite,
)
from workcenter.adapters.sqlite_settings import SYNCHRONOUS_ENV, validate_synchronous
from workcenter.domain import action as act
from workcenter.domain import inputs
from workcenter.domain import resource_ledger as rl
from workcenter.domain import work_item as wi
from workcenter.domain.errors import InvalidInput, NotFound, VersionConflict, WorkcenterError
from workcenter.domain.model import AggregateState, DomainEvent
from workcenter.domain.unit import Unit
from workcenter.projections import lifecycle as projection_lifecycle
from workcenter.projections.detail import (
    Detail,
    DetailView,
    EventStoreStates,
    Kind,
    refreshes_detail,
)
from workcenter.projections.inline import InlineProjections, InlineWrite, InTransactionView
from workcenter.projections.lifecycle import Progress, ProjectionStatus, RebuildReport
from workcenter.projections.work_queue import WorkQueue, WorkQueueView

SNAPSHOT_INTERVAL = 50
S = TypeVar("S", bound=AggregateState)
# Read models written in each command's own transaction (ADR-0016). The detail view
# is too, in every command that changes a WorkItem or an Action (`refreshes_detail`),
# so a browser's read right after a write finds the DTO stored (ADR-0019 measured
# this against catching it up on read and a fold on read).
EAGER_VIEWS: list[str] = [WorkQueue.name]
SAVE_ATTEMPTS = 8
OPEN_ATTEMPTS = 4


class Clock(Protocol):
    def now(self) -> datetime: ...


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)


class WriteContention(WorkcenterError):
    """Other writers kept moving the same aggregates; the command gave up."""

    code = "write_contention"


class ForeignStream(Exception):
    """The stream loaded belongs to another aggregate type (an Action's id given as a
    WorkItem's, say): the load answers NotFound, never a fold of foreign events."""


def _projector(
    evolve: Callable[[Any, Any], Any],
    state_class: type[AggregateState],
    event_class: type[DomainEvent],
    snapshot: type[ActionSnapshot | WorkItemSnapshot | LedgerSnapshot],
) -> Callable[[Any, Iterable[Any]], Any]:
    def project(state: Any, events: Iterable[Any]) -> Any:
        if state is not None and not isinstance(state, state_class):
            raise ForeignStream  # a cached state of another type
        for event in events:
            if isinstance(event, snapshot):
                state = event.state
            elif isinstance(event, event_class):
                state = evolve(state, event)
            else:
                raise ForeignStream
        return state

    return project


project_action = _projector(act.evolve, act.ActionState, act.ActionEvent, ActionSnapshot)
project_work_item = _projector(wi.evolve, wi.WorkItemState, wi.WorkItemEvent, WorkItemSnapshot)
project_ledger = _projector(rl.evolve, rl.LedgerState, rl.LedgerEvent, LedgerSnapshot)
STATE_LOADERS: dict[str, tuple[Callable[..., Any], type[AggregateState]]] = {
    "item": (project_work_item, wi.WorkItemState),
    "action": (project_action, act.ActionState),
    "ledger": (project_ledger, rl.LedgerState),
}


INLINE_ENV = "WORKCENTER_INLINE_PROJECTIONS"


def inline_from_env() -> bool:
    """Inline projections are on unless ``$WORKCENTER_INLINE_PROJECTIONS`` says 0/false/no/off."""
    return os.environ.get(INLINE_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


class EventStore(Application[UUID]):
    """The library application holding every WorkItem and Action stream."""

    name = "WorkCenter"
    env = store_env()
    is_snapshotting_enabled = True


class Store:
    """The event store, the clock, the boot id and the inline read models of one service."""

    def __init__(
        self,
        store: EventStore,
        *,
        clock: Clock | None = None,
        boot_id: str | None = None,
        inline_projections: bool | None = None,
    ):
        if not isinstance(store.recorder, OneCommitSQLiteRecorder):
            # Any other recorder would silently drop the views and snapshots of each save.
            raise TypeError("the event store must use OneCommitSQLiteRecorder (see sqlite_env)")
        self.store = store
        self.clock = clock or SystemClock()
        self.boot_id = boot_id or uuid.uuid4().hex
        # Off (scale-out): saves leave the views to `workcenter projections run`.
        self.inline_projections = (
            inline_projections if inline_projections is not None else inline_from_env()
        )
        datastore = store.factory.datastore  # type: ignore[attr-defined]
        self.work_queue = WorkQueueView(datastore)
        self.work_queue.create_table()
        self.details = DetailView(
            datastore, source=EventStoreStates(store.recorder, self._state_at)
        )
        self.details.create_table()
        self.projections = InlineProjections(
            store.recorder,
            store.mapper,
            # The registry of inline read models: adding one is one entry here.
            {
                WorkQueue.name: self.work_queue,
                Detail.name: self.details,
            },
        )
        self.inline_views: dict[str, InTransactionView] = {
            name: cast(InTransactionView, self.projections.views[name]) for name in EAGER_VIEWS
        }
        self._catch_up_inline()

    @classmethod
    def open(
        cls,
        db: str | os.PathLike[str] | None = None,
        *,
        clock: Clock | None = None,
        boot_id: str | None = None,
        inline_projections: bool | None = None,
        sqlite_synchronous: str | None = None,
        create: bool = True,
    ) -> Self:
        """Open the SQLite store at ``db``, ``$WORKCENTER_DB`` or ./workcenter.db (creating it
        unless ``create`` is false). ``StoreUnavailable`` if it cannot be opened, or is
        another application's file; a refused file is left as it was.

        ``sqlite_synchronous`` (FULL or NORMAL, else ``$WORKCENTER_SQLITE_SYNCHRONOUS``,
        else NORMAL) is what a commit waits for (ADR-0018)."""
        db_path = resolve_db_path(db)
        # A bad synchronous setting is InvalidInput before any file exists.
        validate_synchronous(sqlite_synchronous or os.environ.get(SYNCHRONOUS_ENV, "NORMAL"))
        env = sqlite_env(db_path, sqlite_synchronous)
        prepare_store_file(db_path, create=create)
        for attempt in range(OPEN_ATTEMPTS):
            try:
                return cls(
                    EventStore(env=env),
                    clock=clock,
                    boot_id=boot_id,
                    inline_projections=inline_projections,
                )
            except (PersistenceError, sqlite3.Error) as error:
                # Processes that open a new file at once race to create its tables (a
                # lock, or the library's migration row written twice); the loser's next
                # try finds them made. A store that cannot be opened fails every try.
                failure = error
                time.sleep(0.05 * (attempt + 1))
        raise StoreUnavailable(f"cannot open the store at {db_path}: {failure}") from None

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # --- loading --------------------------------------------------------------

    def _load(self, aggregate_id: UUID, version: int | None, projector: Callable[..., Any]) -> Any:
        repository = self.store.repository
        state = repository.get(aggregate_id, version=version, projector_func=projector)
        if version is None and repository.cache is not None:
            # The library fast-forwards a cached state but keeps the old (immutable) one
            # in the cache; put the newer state back so the next load replays only the
            # events after it, not every event since the aggregate was first cached.
            repository.cache.put(aggregate_id, state)
        return state

    def work_item(self, work_item_id: UUID, version: int | None = None) -> wi.WorkItemState:
        work_item_id = inputs.aggregate_id(work_item_id, "WorkItem")
        state = self._load_state(work_item_id, version, project_work_item, wi.WorkItemState)
        if state is None:
            raise NotFound("WorkItem", work_item_id)
        return state

    def action(self, action_id: UUID, version: int | None = None) -> act.ActionState:
        action_id = inputs.aggregate_id(action_id, "Action")
        state = self._load_state(action_id, version, project_action, act.ActionState)
        if state is None:
            raise NotFound("Action", action_id)
        return state

    def ledger(self, work_item_id: UUID, version: int | None = None) -> rl.LedgerState:
        """The WorkItem's ResourceLedger."""
        work_item_id = inputs.aggregate_id(work_item_id, "WorkItem")
        ledger_id = rl.ledger_id_for(work_item_id)
        state = self._load_state(ledger_id, version, project_ledger, rl.LedgerState)
        if state is None:
            raise NotFound("ResourceLedger of WorkItem", work_item_id)
        return state

    def _load_state(
        self,
        aggregate_id: UUID,
        version: int | None,
        projector: Callable[..., Any],
        state_class: type[S],
    ) -> S | None:
        """The state, or None when the stream is missing, of another aggregate type, or
        asked for at a version before its first."""
        if version is not None and inputs.version(version, "version") < 1:
            return None
        try:
            state = self._load(aggregate_id, version, projector)
        except (AggregateNotFoundError, ForeignStream):
            return None
        return state if isinstance(state, state_class) else None

    def _state_at(self, kind: Kind, aggregate_id: UUID, version: int) -> AggregateState | None:
        """A stream's state at ``version``, for the detail view (which keeps no states)."""
        projector, state_class = STATE_LOADERS[kind]
        return self._load_state(aggregate_id, version, projector, state_class)

    def actions(self, item: wi.WorkItemState, *statuses: str) -> dict[UUID, act.ActionState]:
        """The item's Actions (only those whose mirrored status is in ``statuses``, if given)."""
        entries = item.entries(*statuses) if statuses else item.plan
        return {e.action_id: self.action(e.action_id) for e in entries}

    def event_count(self) -> int:
        return self.store.recorder.max_notification_id() or 0

    # --- read models ----------------------------------------------------------

    def detail(self, work_item_id: UUID) -> dict[str, Any]:
        """The item's detail DTO from the detail read model (as of the item's latest event).

        With inline projections on it reflects every command committed before the read:
        the view is written at each save, and if it is behind the head of the event log
        (a writer crashed between its events and its views) the read catches it up first.
        With inline projections off it is as fresh as the runner has made it (ADR-0019)."""
        work_item_id = inputs.aggregate_id(work_item_id, "WorkItem")
        head_sql = self.store.recorder.select_max_notification_id_statement  # type: ignore[attr-defined]

        def head(c: SQLiteCursor) -> int:
            c.execute(head_sql)
            return int(c.fetchone()[0] or 0)

        raw, current = self.details.current_detail_bytes(work_item_id, Detail.name, head)
        if not current and self.inline_projections:
            self.projections.catch_up(names=[Detail.name])
            raw = self.details.detail_bytes(work_item_id)
        dto = None if raw is None else dict(orjson.loads(raw))
        if dto is None:
            self.work_item(work_item_id)  # NotFound if there is no such item
            raise NotFound("detail (the projection runner is behind) of WorkItem", work_item_id)
        return dto

    def projection_status(self) -> list[ProjectionStatus]:
        """Each registered read model's position, the head of the event sequence, the lag."""
        return projection_lifecycle.status(self.projections, self.store.recorder)

    def rebuild_projection(
        self, name: str | None = None, *, progress: Progress | None = None
    ) -> list[RebuildReport]:
        """Replay one read model (default: every one) from zero into shadow tables and swap
        it in atomically: readers see the old view until the new one is complete."""
        if name is not None and not isinstance(name, str):
            raise InvalidInput(f"a read model's name is a string, not {type(name).__name__}")
        names = list(self.projections.views) if name is None else [name]
        unknown = [n for n in names if n not in self.projections.views]
        if unknown:
            known = ", ".join(self.projections.views)
            raise InvalidInput(f"no read model named {unknown[0]!r} (known: {known})")
        return [
            projection_lifecycle.rebuild(
                self.projections, self.store.recorder, self.store.mapper, n, progress
            )
            for n in names
        ]

    # --- writing --------------------------------------------------------------

    def _save(self, unit: Unit) -> None:
        states: dict[UUID, AggregateState] = {unit.item.id: unit.item, **unit.actions}
        if unit.ledger is not None:
            states[unit.ledger.id] = unit.ledger
        self._save_events(unit.events, states)

    def _save_events(
        self, events: Sequence[DomainEvent], states: Mapping[UUID, AggregateState]
    ) -> None:
        """One transaction: the events, snapshots of ``states`` that crossed an interval,
        and the rows and positions of the eager read models, applied from ``events``."""
        if not events:
            return
        along: dict[str, Any] = {}
        snapshots = self._snapshots(states, events)
        if snapshots:
            assert self.store.snapshots is not None
            along[SNAPSHOTS] = SnapshotWrite(
                self.store.snapshots.recorder,  # type: ignore[arg-type]
                [self.store.mapper.to_stored_event(s) for s in snapshots],
            )
        inline = None
        if self.inline_projections:
            inline = along[INLINE_WRITE] = InlineWrite(
                events, self._inline_views(events), self.store.mapper
            )
        self.store.save(*events, **along)
        cache = self.store.repository.cache
        if cache is not None:
            # The library caches only aggregates it saves, and it is given events: keep the
            # states just saved, so the next command's load replays nothing (ADR-0020).
            for state in states.values():
                cache.put(state.id, state)
        if inline is not None and inline.left_behind:
            # Too far behind to catch up inside the command; the rule is in inline.py.
            self.projections.catch_up(names=inline.left_behind)

    def _inline_views(self, events: Sequence[DomainEvent]) -> dict[str, InTransactionView]:
        if not refreshes_detail(events):
            return self.inline_views
        return {**self.inline_views, Detail.name: cast(InTransactionView, self.details)}

    def _catch_up_inline(self) -> None:
        if self.inline_projections:
            self.projections.catch_up(names=EAGER_VIEWS)

    def _catch_up_work_queue(self) -> None:
        """Claims and recovery read the work queue: bring it up to the head first, even
        when inline projections are off (then only it, leaving the rest to the runner)."""
        self.projections.catch_up(names=[WorkQueue.name])

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
            SNAPSHOT_CLASSES[type(state)](
                originator_id=state.id,
                originator_version=state.version,
                timestamp=events[-1].timestamp,
                state=state,
            )
            for aggregate_id in crossed
            if (state := states.get(aggregate_id)) is not None
        ]

    def _execute(self, decide: Callable[[], Unit]) -> Unit:
        """Decide and save; on a lost race reload and decide again (the checks run again too)."""
        for _ in range(SAVE_ATTEMPTS):
            unit = decide()
            try:
                self._save(unit)
            except IntegrityError:
                continue
            return unit
        raise WriteContention("the aggregates kept changing; try again")

    def _check_expected(
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
        subject = "Execution control" if isinstance(state, rl.LedgerState) else ""
        if expected_version > state.version or expected_version < 1:
            raise VersionConflict(
                state.id, expected_version, state.version, ["unknown version"], subject
            )
        later = self.store.events.get(state.id, gt=expected_version)
        clashing = [
            type(e).__name__ for e in later if conflicts is None or isinstance(e, conflicts)
        ]
        if clashing:
            raise VersionConflict(state.id, expected_version, state.version, clashing, subject)
