"""The service layer: load what a command needs, check what the caller saw,
call the domain, and save every touched aggregate in one atomic write.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from types import EllipsisType
from typing import Any, Protocol, cast
from uuid import UUID

from eventsourcing.application import AggregateNotFoundError, Application
from eventsourcing.persistence import IntegrityError

from workcenter.adapters.persistence import (
    SNAPSHOT_CLASSES,
    ActionSnapshot,
    LedgerSnapshot,
    WorkItemSnapshot,
    resolve_db_path,
    sqlite_env,
    store_env,
)
from workcenter.domain import action as act
from workcenter.domain import lifecycle, planning, runs
from workcenter.domain import resource_ledger as rl
from workcenter.domain import work_item as wi
from workcenter.domain.errors import InvalidInput, NotFound, VersionConflict, WorkcenterError
from workcenter.domain.goal_progress import GoalProgress
from workcenter.domain.model import AggregateState, DomainEvent
from workcenter.domain.outcome import RunReport
from workcenter.domain.unit import Unit
from workcenter.projections.inline import InlineProjections
from workcenter.projections.work_queue import WorkQueue, WorkQueueView

SNAPSHOT_INTERVAL = 50
SAVE_ATTEMPTS = 8
CLAIM_PAGE = 16


class Clock(Protocol):
    def now(self) -> datetime: ...


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)


class WriteContention(WorkcenterError):
    """Other writers kept moving the same aggregates; the command gave up."""

    code = "write_contention"


@dataclass(frozen=True)
class Claim:
    """A claimed Run and what its worker needs to execute it."""

    work_item_id: UUID
    action_id: UUID
    run_id: UUID
    boot_id: str
    lease_epoch: int
    expires_at: datetime
    worker: str
    action_type: str
    brief: act.Brief
    context: tuple[act.ContextEntry, ...]
    goal: str
    acceptance_criteria: tuple[str, ...]
    delivery_target: str | None
    attempt: int

    @property
    def ref(self) -> act.RunRef:
        return act.RunRef(
            action_id=self.action_id,
            run_id=self.run_id,
            boot_id=self.boot_id,
            lease_epoch=self.lease_epoch,
        )


def _projector(
    evolve: Callable[[Any, Any], Any],
    snapshot: type[ActionSnapshot | WorkItemSnapshot | LedgerSnapshot],
) -> Callable[[Any, Iterable[Any]], Any]:
    def project(state: Any, events: Iterable[Any]) -> Any:
        for event in events:
            state = event.state if isinstance(event, snapshot) else evolve(state, event)
        return state

    return project


project_action = _projector(act.evolve, ActionSnapshot)
project_work_item = _projector(wi.evolve, WorkItemSnapshot)
project_ledger = _projector(rl.evolve, LedgerSnapshot)


class EventStore(Application[UUID]):
    """The library application holding every WorkItem and Action stream."""

    name = "WorkCenter"
    env = store_env()
    is_snapshotting_enabled = True


class WorkCenter:
    """The embeddable service: every command and read of Workcenter."""

    def __init__(
        self, store: EventStore, *, clock: Clock | None = None, boot_id: str | None = None
    ):
        self.store = store
        self.clock = clock or SystemClock()
        self.boot_id = boot_id or uuid.uuid4().hex
        datastore = store.factory.datastore  # type: ignore[attr-defined]
        self.work_queue = WorkQueueView(datastore)
        self.work_queue.create_table()
        self.projections = InlineProjections(
            store.recorder, store.mapper, {WorkQueue.name: self.work_queue}
        )
        self.projections.catch_up()

    @classmethod
    def open(
        cls,
        db: str | os.PathLike[str] | None = None,
        *,
        clock: Clock | None = None,
        boot_id: str | None = None,
    ) -> WorkCenter:
        """Open (or create) the SQLite store at ``db``, ``$WORKCENTER_DB`` or ./workcenter.db."""
        return cls(EventStore(env=sqlite_env(resolve_db_path(db))), clock=clock, boot_id=boot_id)

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> WorkCenter:
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
        try:
            state = self._load(work_item_id, version, project_work_item)
        except AggregateNotFoundError:
            raise NotFound("WorkItem", work_item_id) from None
        if not isinstance(state, wi.WorkItemState):
            raise NotFound("WorkItem", work_item_id)
        return state

    def action(self, action_id: UUID, version: int | None = None) -> act.ActionState:
        try:
            state = self._load(action_id, version, project_action)
        except AggregateNotFoundError:
            raise NotFound("Action", action_id) from None
        if not isinstance(state, act.ActionState):
            raise NotFound("Action", action_id)
        return state

    def ledger(self, work_item_id: UUID, version: int | None = None) -> rl.LedgerState:
        """The WorkItem's ResourceLedger."""
        ledger_id = rl.ledger_id_for(work_item_id)
        try:
            state = self._load(ledger_id, version, project_ledger)
        except AggregateNotFoundError:
            raise NotFound("ResourceLedger of WorkItem", work_item_id) from None
        if not isinstance(state, rl.LedgerState):
            raise NotFound("ResourceLedger of WorkItem", work_item_id)
        return state

    def actions(self, item: wi.WorkItemState, *statuses: str) -> dict[UUID, act.ActionState]:
        """The item's Actions (only those whose mirrored status is in ``statuses``, if given)."""
        entries = item.entries(*statuses) if statuses else item.plan
        return {e.action_id: self.action(e.action_id) for e in entries}

    def event_count(self) -> int:
        return self.store.recorder.max_notification_id() or 0

    # --- writing --------------------------------------------------------------

    def _save(self, unit: Unit) -> None:
        if not unit.events:
            return
        self.store.save(*unit.events)
        self._snapshot(unit)
        self.projections.catch_up()

    def _snapshot(self, unit: Unit) -> None:
        states: dict[UUID, AggregateState] = {unit.item.id: unit.item, **unit.actions}
        if unit.ledger is not None:
            states[unit.ledger.id] = unit.ledger
        self._take_snapshots(states, unit.events)

    def _take_snapshots(
        self, states: Mapping[UUID, AggregateState], events: Sequence[DomainEvent]
    ) -> None:
        """Snapshot every aggregate whose stream crossed a multiple of the interval.

        The library snapshots only aggregates it was given, and it is given events.
        """
        crossed = {e.originator_id for e in events if e.originator_version % SNAPSHOT_INTERVAL == 0}
        snapshots = [
            SNAPSHOT_CLASSES[type(state)](
                originator_id=state.id,
                originator_version=state.version,
                timestamp=events[-1].timestamp,
                state=state,
            )
            for aggregate_id in crossed
            if (state := states.get(aggregate_id)) is not None
        ]
        if snapshots:
            assert self.store.snapshots is not None
            self.store.snapshots.put(snapshots)

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
        if expected_version > state.version or expected_version < 1:
            raise VersionConflict(state.id, expected_version, state.version, ["unknown version"])
        later = self.store.events.get(state.id, gt=expected_version)
        clashing = [
            type(e).__name__ for e in later if conflicts is None or isinstance(e, conflicts)
        ]
        if clashing:
            raise VersionConflict(state.id, expected_version, state.version, clashing)

    def _item_command(
        self,
        work_item_id: UUID,
        expected_version: int | None,
        conflicts: tuple[type[DomainEvent], ...] | None,
        decide: Callable[[wi.WorkItemState, dict[UUID, act.ActionState], datetime], Unit],
        *statuses: str,
    ) -> wi.WorkItemState:
        def attempt() -> Unit:
            item = self.work_item(work_item_id)
            self._check_expected(item, expected_version, conflicts)
            return decide(item, self.actions(item, *statuses), self.clock.now())

        return self._execute(attempt).item

    # --- WorkItem commands ----------------------------------------------------

    def create_work_item(
        self,
        *,
        title: str,
        goal: str,
        acceptance_criteria: list[str] | tuple[str, ...] = (),
        delivery_target: str | None = None,
        mode: wi.Mode = "dynamic",
        stages: tuple[str, ...] | None = None,
        start: bool = False,
        limits: Mapping[str, int] | None = None,
    ) -> wi.WorkItemState:
        """Create a WorkItem and its ResourceLedger (default limits, or ``limits``)."""
        if mode not in ("dynamic", "linear"):
            raise InvalidInput(f"mode must be dynamic or linear, not {mode!r}")
        contract = wi.validate_contract(
            title=title,
            goal=goal,
            acceptance_criteria=acceptance_criteria,
            delivery_target=delivery_target,
        )
        unit = lifecycle.create(
            work_item_id=uuid.uuid4(),
            mode=mode,
            contract=contract,
            stages=stages,
            start=start,
            at=self.clock.now(),
            limits=self._limits(limits),
        )
        self._save(unit)
        return unit.item

    @staticmethod
    def _limits(limits: Mapping[str, int] | None) -> rl.Limits | None:
        if limits is None:
            return None
        try:
            return rl.Limits(**limits)
        except (TypeError, ValueError) as error:
            raise InvalidInput(f"invalid limits: {error}") from None

    def update_contract(
        self,
        work_item_id: UUID,
        *,
        expected_version: int,
        title: str | None = None,
        goal: str | None = None,
        acceptance_criteria: list[str] | tuple[str, ...] | None = None,
        delivery_target: str | EllipsisType | None = ...,
    ) -> wi.WorkItemState:
        def decide(
            item: wi.WorkItemState, actions: dict[UUID, act.ActionState], at: datetime
        ) -> Unit:
            contract = wi.validate_contract(
                title=item.title if title is None else title,
                goal=item.goal if goal is None else goal,
                acceptance_criteria=(
                    item.acceptance_criteria if acceptance_criteria is None else acceptance_criteria
                ),
                delivery_target=item.delivery_target if delivery_target is ... else delivery_target,
            )
            return lifecycle.update_contract(item, actions, contract, at)

        return self._item_command(
            work_item_id, expected_version, lifecycle.UPDATE_CONFLICTS, decide, *act.OPEN_STATUSES
        )

    def start(self, work_item_id: UUID, *, expected_version: int | None = None) -> wi.WorkItemState:
        return self._item_command(
            work_item_id,
            expected_version,
            lifecycle.START_CONFLICTS,
            lifecycle.start,
            *act.OPEN_STATUSES,
        )

    def cancel(self, work_item_id: UUID, *, reason: str = "") -> wi.WorkItemState:
        return self._item_command(
            work_item_id,
            None,
            (),
            lambda item, actions, at: lifecycle.cancel(item, actions, at, reason),
            *act.OPEN_STATUSES,
        )

    def resume(
        self,
        work_item_id: UUID,
        *,
        expected_version: int,
        expected_ledger_version: int | None = None,
    ) -> wi.WorkItemState:
        """Resume a cancelled item, or one its budget stopped (after extending it)."""

        def attempt() -> Unit:
            item = self.work_item(work_item_id)
            self._check_expected(item, expected_version, lifecycle.RESUME_CONFLICTS)
            ledger = self.ledger(work_item_id)
            self._check_expected(ledger, expected_ledger_version, rl.CONTROL_EVENTS)
            actions = self.actions(item, "cancelled", *act.OPEN_STATUSES)
            stopping = lifecycle.stopping_action_id(ledger)
            if stopping is not None and stopping not in actions:
                actions[stopping] = self.action(stopping)
            return lifecycle.resume(item, actions, ledger, self.clock.now())

        return self._execute(attempt).item

    def retry(
        self,
        work_item_id: UUID,
        action_id: UUID,
        *,
        expected_version: int,
        expected_generation: int | None = None,
        answer: str = "",
    ) -> wi.WorkItemState:
        return self._action_input(
            work_item_id,
            action_id,
            expected_version,
            lambda item, actions, at: lifecycle.retry(
                item,
                actions,
                action_id=action_id,
                expected_generation=expected_generation,
                answer=answer,
                at=at,
            ),
        )

    def guide(
        self,
        work_item_id: UUID,
        action_id: UUID,
        *,
        expected_version: int,
        expected_generation: int | None = None,
        guidance: str,
    ) -> wi.WorkItemState:
        return self._action_input(
            work_item_id,
            action_id,
            expected_version,
            lambda item, actions, at: lifecycle.guide(
                item,
                actions,
                action_id=action_id,
                expected_generation=expected_generation,
                guidance=guidance,
                at=at,
            ),
        )

    def _action_input(
        self,
        work_item_id: UUID,
        action_id: UUID,
        expected_version: int,
        decide: Callable[[wi.WorkItemState, dict[UUID, act.ActionState], datetime], Unit],
    ) -> wi.WorkItemState:
        """Retry and guidance: the open Actions plus the target, whatever its status."""
        return self._item_command(
            work_item_id,
            expected_version,
            lifecycle.ACTION_INPUT_CONFLICTS,
            lambda item, actions, at: decide(
                item, actions | {action_id: self.action(action_id)}, at
            ),
            *act.OPEN_STATUSES,
        )

    def plan_actions(
        self,
        work_item_id: UUID,
        *,
        expected_version: int,
        actions: Sequence[Mapping[str, Any]],
        close_actions: list[Mapping[str, Any]] = (),  # type: ignore[assignment]
        supersede_action_ids: list[UUID] = (),  # type: ignore[assignment]
        goal_refs: Mapping[str, Any] | None = None,
        rationale: str = "",
    ) -> wi.WorkItemState:
        payload = {
            "actions": actions,
            "close_actions": close_actions,
            "supersede_action_ids": supersede_action_ids,
            "goal_refs": goal_refs,
            "rationale": rationale,
        }
        return self._item_command(
            work_item_id,
            expected_version,
            None,
            lambda item, loaded, at: planning.plan_actions(item, loaded, payload, at=at),
        )

    def complete(
        self, work_item_id: UUID, *, expected_version: int, completion: Mapping[str, Any]
    ) -> wi.WorkItemState:
        return self._item_command(
            work_item_id,
            expected_version,
            None,
            lambda item, loaded, at: planning.complete(item, loaded, completion, at=at),
        )

    # --- Run commands ---------------------------------------------------------

    def claim_next(self, worker: str, *, lease_seconds: float = 60.0) -> Claim | None:
        """Claim the oldest claimable Action, or return None when there is none.

        Candidates come from the work-queue read model; each is re-checked on its
        aggregates, and a stale candidate or a lost race moves on to the next.
        """
        lease = timedelta(seconds=lease_seconds)
        self.projections.catch_up()
        seen: set[UUID] = set()
        offset = 0
        while True:
            candidates = self.work_queue.ready_actions(CLAIM_PAGE, offset)
            if not candidates:
                return None
            offset += len(candidates)
            for action_id in candidates:
                if action_id in seen:
                    continue
                seen.add(action_id)
                claim = self._try_claim(action_id, worker, lease)
                if claim is not None:
                    return claim

    def _try_claim(self, action_id: UUID, worker: str, lease: timedelta) -> Claim | None:
        action = self.action(action_id)
        item = self.work_item(action.work_item_id)
        if runs.claimable(item, action) is not None:
            return None
        unit = runs.claim(
            item,
            action,
            self.ledger(item.id),
            worker=worker,
            boot_id=self.boot_id,
            lease=lease,
            at=self.clock.now(),
        )
        try:
            self._save(unit)
        except IntegrityError:
            return None
        claimed = unit.action(action_id)
        run = claimed.current_run
        if run is None:
            return None  # the ledger had no attempt left: the stop was saved instead
        return Claim(
            work_item_id=item.id,
            action_id=action_id,
            run_id=run.id,
            boot_id=run.owner_boot_id,
            lease_epoch=run.lease_epoch,
            expires_at=run.expires_at,
            worker=worker,
            action_type=claimed.type,
            brief=claimed.brief,
            context=claimed.context,
            goal=item.goal,
            acceptance_criteria=item.acceptance_criteria,
            delivery_target=item.delivery_target,
            attempt=claimed.attempt,
        )

    def renew_lease(self, claim: Claim | act.RunRef, *, lease_seconds: float = 60.0) -> bool:
        """Extend the lease; False when the Run is no longer live (stop working on it)."""
        ref = claim.ref if isinstance(claim, Claim) else claim
        for _ in range(SAVE_ATTEMPTS):
            action = self.action(ref.action_id)
            try:
                events = runs.renew(
                    action, ref, lease=timedelta(seconds=lease_seconds), at=self.clock.now()
                )
            except WorkcenterError:
                return False
            try:
                self.store.save(*events)
            except IntegrityError:
                continue
            self._take_snapshots({action.id: project_action(action, events)}, events)
            self.projections.catch_up()
            return True
        return False

    def _run_command(
        self,
        claim: Claim | act.RunRef,
        decide: Callable[[wi.WorkItemState, act.ActionState, act.RunRef, datetime], Unit],
    ) -> act.ActionState:
        ref = claim.ref if isinstance(claim, Claim) else claim

        def attempt() -> Unit:
            action = self.action(ref.action_id)
            item = self.work_item(action.work_item_id)
            return decide(item, action, ref, self.clock.now())

        return self._execute(attempt).action(ref.action_id)

    def finish_run(
        self, claim: Claim | act.RunRef, report: RunReport | Mapping[str, Any]
    ) -> act.ActionState:
        """Record the Run's outcome: completed, waiting, retryable or failed."""
        return self._run_command(
            claim,
            lambda item, action, ref, at: runs.finish(
                item, action, ref, dict(report) if isinstance(report, Mapping) else report, at=at
            ),
        )

    def interrupt(self, claim: Claim | act.RunRef, *, reason: str = "") -> act.ActionState:
        return self._run_command(
            claim,
            lambda item, action, ref, at: runs.interrupt(item, action, ref, reason=reason, at=at),
        )

    def recover(self, *, worker: str | None = None) -> list[UUID]:
        """End every Run whose lease expired or whose owner restarted (a new boot id).

        With ``worker``, only that worker's Runs are judged by boot id; without
        it, every Run from another boot is dead (one process owns all workers).
        """
        self.projections.catch_up()
        recovered: list[UUID] = []
        for action_id, run_id, *_ in self.work_queue.live_runs():

            def attempt(action_id: UUID = action_id, run_id: UUID = run_id) -> Unit:
                action = self.action(action_id)
                run = action.run(run_id)
                at = self.clock.now()
                if run is None or not runs.is_dead(run, boot_id=self.boot_id, worker=worker, at=at):
                    return Unit(self.work_item(action.work_item_id), {}, at)
                return runs.recover(
                    self.work_item(action.work_item_id), action, run_id=run_id, at=at
                )

            if self._execute(attempt).events:
                recovered.append(run_id)
        return recovered

    # --- ResourceLedger commands ---------------------------------------------

    def _ledger_command(
        self,
        work_item_id: UUID,
        decide: Callable[[wi.WorkItemState, rl.LedgerState, datetime], Unit],
    ) -> Unit:
        def attempt() -> Unit:
            item = self.work_item(work_item_id)
            return decide(item, self.ledger(work_item_id), self.clock.now())

        return self._execute(attempt)

    def reserve_request(
        self,
        work_item_id: UUID,
        *,
        request: Mapping[str, Any],
        kind: rl.RequestKind = "action",
        run_id: UUID | None = None,
        request_id: str | None = None,
    ) -> rl.Admission:
        """Admit one LLM request before it is sent, at its estimated cost.

        A denial is returned (and a stopping denial saved); the caller must not
        send the request. Only a stop writes the WorkItem too.
        """
        request_id = request_id or uuid.uuid4().hex
        estimate = rl.estimate_tokens(request)
        admission: list[rl.Admission] = []

        def decide(item: wi.WorkItemState, ledger: rl.LedgerState, at: datetime) -> Unit:
            answer = rl.reserve(
                ledger,
                request_id=request_id,
                kind=kind,
                run_id=run_id,
                estimated_tokens=estimate,
                item_active=item.status not in wi.TERMINAL,
                at=at,
            )
            admission[:] = [answer]
            unit = Unit(item, {}, at, ledger)
            unit.apply_ledger(answer.events)
            return unit

        self._ledger_command(work_item_id, decide)
        return admission[0]

    def settle_request(
        self,
        work_item_id: UUID,
        request_id: str,
        *,
        usage: Mapping[str, Any] | rl.Usage | None,
        complete: bool = True,
    ) -> bool:
        """Record what a request cost; False when there was nothing to settle."""
        normalised = (
            usage if isinstance(usage, rl.Usage) or usage is None else rl.normalize_usage(usage)
        )

        def decide(item: wi.WorkItemState, ledger: rl.LedgerState, at: datetime) -> Unit:
            unit = Unit(item, {}, at, ledger)
            unit.apply_ledger(
                rl.settle(ledger, request_id=request_id, usage=normalised, complete=complete, at=at)
            )
            return unit

        return bool(self._ledger_command(work_item_id, decide).events)

    def extend_budget(
        self, work_item_id: UUID, *, expected_version: int, additions: Mapping[str, Any]
    ) -> rl.LedgerState:
        """A user raises limits. Clears no stop: resume does, once nothing is spent."""

        def decide(item: wi.WorkItemState, ledger: rl.LedgerState, at: datetime) -> Unit:
            self._check_expected(ledger, expected_version, rl.CONTROL_EVENTS)
            unit = Unit(item, {}, at, ledger)
            unit.apply_ledger(rl.extend(ledger, additions, at))
            return unit

        ledger = self._ledger_command(work_item_id, decide).ledger
        assert ledger is not None
        return ledger

    def record_coordinator_failure(self, work_item_id: UUID, *, turn_id: str) -> rl.LedgerState:
        def decide(item: wi.WorkItemState, ledger: rl.LedgerState, at: datetime) -> Unit:
            unit = Unit(item, {}, at, ledger)
            unit.apply_ledger(rl.record_coordinator_failure(ledger, turn_id=turn_id, at=at))
            return unit

        ledger = self._ledger_command(work_item_id, decide).ledger
        assert ledger is not None
        return ledger

    def can_coordinate_automatically(
        self, work_item_id: UUID, *, user_message: bool = False
    ) -> bool:
        try:
            item = self.work_item(work_item_id)
        except NotFound:
            return False
        if item.status in wi.TERMINAL or item.stopped:
            return False
        retry_after = self.ledger(work_item_id).retry_after
        return user_message or retry_after is None or self.clock.now() >= retry_after

    # --- reads ----------------------------------------------------------------

    def goal_progress(self, work_item_id: UUID) -> GoalProgress:
        item = self.work_item(work_item_id)
        return planning.progress(item, self.actions(item))

    def list_work_items(self, status: str | None = None) -> list[dict[str, Any]]:
        self.projections.catch_up()
        return self.work_queue.work_items(status)

    def history(self, work_item_id: UUID) -> list[DomainEvent]:
        """The WorkItem's events in order (its Action events are in ``action_history``)."""
        self.work_item(work_item_id)
        return cast(list[DomainEvent], list(self.store.events.get(work_item_id)))

    def action_history(self, action_id: UUID) -> list[DomainEvent]:
        return cast(list[DomainEvent], list(self.store.events.get(action_id)))
