"""The service layer: load what a command needs, check what the caller saw,
call the domain, and save every touched aggregate in one atomic write.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from types import EllipsisType
from typing import Any, cast
from uuid import UUID, uuid4

from eventsourcing.persistence import IntegrityError

from workcenter.budget import BudgetCommands
from workcenter.domain import action as act
from workcenter.domain import action_input, bounds, inputs, lifecycle, planning, runs
from workcenter.domain import resource_ledger as rl
from workcenter.domain import work_item as wi
from workcenter.domain.errors import InvalidInput, WorkcenterError
from workcenter.domain.goal_progress import GoalProgress
from workcenter.domain.model import DomainEvent
from workcenter.domain.outcome import RunReport
from workcenter.domain.run import parse_progress
from workcenter.domain.unit import Unit
from workcenter.projections.audit import DEFAULT_LIMIT, Audit, AuditRow
from workcenter.run_side import RunSide
from workcenter.store import (
    SAVE_ATTEMPTS,
    SNAPSHOT_INTERVAL,
    Clock,
    EventStore,
    SystemClock,
    WriteContention,
    project_action,
)

__all__ = [
    "SNAPSHOT_INTERVAL",
    "Claim",
    "Clock",
    "EventStore",
    "SystemClock",
    "WorkCenter",
    "WriteContention",
]

CLAIM_PAGE = 16


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
    # Input queued for the Action and not yet consumed: the Run should consume it.
    inputs: tuple[act.QueuedInput, ...] = ()

    @property
    def ref(self) -> act.RunRef:
        return act.RunRef(
            action_id=self.action_id,
            run_id=self.run_id,
            boot_id=self.boot_id,
            lease_epoch=self.lease_epoch,
        )


class WorkCenter(BudgetCommands):
    """The embeddable service: every command and read of Workcenter."""

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
        stages: Sequence[str | Mapping[str, Any]] | None = None,
        start: bool = False,
        limits: Mapping[str, int] | None = None,
    ) -> wi.WorkItemState:
        """Create a WorkItem and its ResourceLedger (default limits, or ``limits``).

        A linear item's ``stages`` are names or ``{"type", "maxAttempts"}`` objects. Texts
        and lists are bounded (docs/limits.md): input past a bound is refused."""
        if not isinstance(mode, str) or mode not in ("dynamic", "linear"):
            raise InvalidInput(f"mode must be dynamic or linear, not {mode!r}")
        contract = wi.validate_contract(
            title=title,
            goal=goal,
            acceptance_criteria=acceptance_criteria,
            delivery_target=delivery_target,
        )
        unit = lifecycle.create(
            work_item_id=uuid4(),
            mode=mode,
            contract=contract,
            stages=stages,
            start=inputs.flag(start, "start"),
            at=self.clock.now(),
            limits=self._limits(limits),
        )
        self._save(unit)
        return unit.item

    @staticmethod
    def _limits(limits: Mapping[str, int] | None) -> rl.Limits | None:
        if limits is None:
            return None
        inputs.mapping(limits, "limits")
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
        """Edit the contract; a title, goal, criteria or target edit conflicts with any
        other contract edit after ``expected_version``."""
        expected_version = inputs.version(expected_version)

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
        expected_version = inputs.optional_version(expected_version, "expected_version")
        return self._item_command(
            work_item_id,
            expected_version,
            lifecycle.START_CONFLICTS,
            lifecycle.start,
            *act.OPEN_STATUSES,
        )

    def cancel(self, work_item_id: UUID, *, reason: str = "") -> wi.WorkItemState:
        reason = inputs.text(reason, "reason", bounds.REASON)
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
        expected_ledger_version: int,
    ) -> wi.WorkItemState:
        """Resume a cancelled item, or one its budget stopped (after extending it).

        ``expected_ledger_version`` is the ledger version the user saw: a stop, extend
        or resume recorded after it refuses the resume (the execution-control check)."""
        expected_version = inputs.version(expected_version)
        expected_ledger_version = inputs.version(expected_ledger_version, "expected_ledger_version")

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
        answer = inputs.text(answer, "answer", bounds.ANSWER)
        expected_generation = inputs.optional_version(expected_generation, "expected_generation")
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
        guidance = inputs.text(guidance, "guidance", bounds.GUIDANCE)
        expected_generation = inputs.optional_version(expected_generation, "expected_generation")
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
        expected_version = inputs.version(expected_version)
        action_id = inputs.aggregate_id(action_id, "Action")
        return self._item_command(
            work_item_id,
            expected_version,
            lifecycle.ACTION_INPUT_CONFLICTS,
            lambda item, actions, at: decide(
                item, actions | {action_id: self.action(action_id)}, at
            ),
            *act.OPEN_STATUSES,
        )

    def add_input(
        self,
        work_item_id: UUID,
        action_id: UUID,
        *,
        expected_version: int,
        expected_generation: int,
        text: str,
        expected_run_id: UUID | None = None,
    ) -> act.ActionState:
        """Send input to a ready Action (a new generation) or to the Run of a running one
        (queued for it; refused if that Run, its generation or its lease is stale)."""
        if not isinstance(work_item_id, UUID) or not isinstance(action_id, UUID):
            raise InvalidInput("work_item_id and action_id must be ids")
        if isinstance(expected_generation, bool) or not isinstance(expected_generation, int):
            raise InvalidInput("expected_generation must be an integer")
        if expected_run_id is not None and not isinstance(expected_run_id, UUID):
            raise InvalidInput("expected_run_id must be a Run id")
        input_id = uuid4()
        self._item_command(
            work_item_id,
            expected_version,
            action_input.INPUT_CONFLICTS,
            lambda item, actions, at: action_input.add_input(
                item,
                actions | {action_id: self.action(action_id)},
                action_id=action_id,
                input_id=input_id,
                text=text,
                expected_generation=expected_generation,
                expected_run_id=expected_run_id,
                at=at,
            ),
            *act.OPEN_STATUSES,
        )
        return self.action(action_id)

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
        expected_version = inputs.version(expected_version)
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
        expected_version = inputs.version(expected_version)
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
        ``lease_seconds`` is from 1 s to 24 h (86,400 s).
        """
        worker = inputs.text(worker, "worker", bounds.WORKER, required=True)
        lease = timedelta(seconds=inputs.lease_seconds(lease_seconds))
        self._catch_up_work_queue()
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
            inputs=claimed.unconsumed_inputs,
        )

    def renew_lease(self, claim: Claim | act.RunRef, *, lease_seconds: float = 60.0) -> bool:
        """Extend the lease by ``lease_seconds`` (1 s to 24 h) from now; False when the
        Run is no longer live (stop working on it)."""
        ref = self._run_ref(claim)
        lease = timedelta(seconds=inputs.lease_seconds(lease_seconds))
        for _ in range(SAVE_ATTEMPTS):
            action = self.action(ref.action_id)
            try:
                events = act.renew(action, ref, lease=lease, at=self.clock.now())
            except WorkcenterError:
                return False
            try:
                self._save_events(events, {action.id: project_action(action, events)})
            except IntegrityError:
                continue
            return True
        return False

    def _run_command(
        self,
        claim: Claim | act.RunRef,
        decide: Callable[[wi.WorkItemState, act.ActionState, act.RunRef, datetime], Unit],
    ) -> act.ActionState:
        ref = self._run_ref(claim)

        def attempt() -> Unit:
            action = self.action(ref.action_id)
            item = self.work_item(action.work_item_id)
            return decide(item, action, ref, self.clock.now())

        return self._execute(attempt).action(ref.action_id)

    @staticmethod
    def _run_ref(claim: object) -> act.RunRef:
        if isinstance(claim, Claim):
            return claim.ref
        if not isinstance(claim, act.RunRef):
            raise InvalidInput(f"expected a Claim or a RunRef, not {type(claim).__name__}")
        return claim

    def finish_run(
        self, claim: Claim | act.RunRef, report: RunReport | Mapping[str, Any]
    ) -> act.ActionState:
        """Record the Run's outcome: completed, waiting, retryable or failed."""
        if not isinstance(report, RunReport | Mapping):
            raise InvalidInput(f"a run report must be a mapping, not {type(report).__name__}")
        return self._run_command(
            claim,
            lambda item, action, ref, at: runs.finish(
                item, action, ref, dict(report) if isinstance(report, Mapping) else report, at=at
            ),
        )

    def interrupt(
        self,
        claim: Claim | act.RunRef,
        *,
        reason: str = "",
        progress: act.RunProgress | Mapping[str, Any] | None = None,
    ) -> act.ActionState:
        """Give the Run up gracefully; ``progress`` ({summary, response, stats}) is its
        final response and execution stats, recorded as the lease is released."""
        reason = inputs.text(reason, "reason", bounds.REASON)
        final = parse_progress(progress)
        return self._run_command(
            claim,
            lambda item, action, ref, at: runs.interrupt(
                item, action, ref, reason=reason, at=at, progress=final
            ),
        )

    @property
    def _run_side(self) -> RunSide:
        return RunSide(self)

    def defer(self, claim: Claim | act.RunRef) -> act.ActionState:
        """The workspace is busy: end the Run as deferred and give its attempt back."""
        return self._run_side.defer(claim)

    def pending_input(self, claim: Claim | act.RunRef) -> tuple[act.QueuedInput, ...]:
        return self._run_side.pending_input(claim)

    def consume_input(
        self, claim: Claim | act.RunRef, input_ids: Sequence[UUID]
    ) -> act.ActionState:
        return self._run_side.consume_input(claim, input_ids)

    def recover(self, *, worker: str | None = None) -> list[UUID]:
        """End every Run whose lease expired or whose owner restarted (a new boot id).

        With ``worker``, only that worker's Runs are judged by boot id; without
        it, every Run from another boot is dead (one process owns all workers).
        """
        if worker is not None:
            worker = inputs.text(worker, "worker", bounds.WORKER, required=True)
        self._catch_up_work_queue()
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

    # --- reads ----------------------------------------------------------------

    def goal_progress(self, work_item_id: UUID) -> GoalProgress:
        item = self.work_item(work_item_id)
        return planning.progress(item, self.actions(item))

    def list_work_items(self, status: str | None = None) -> list[dict[str, Any]]:
        if status is not None and (not isinstance(status, str) or status not in wi.STATUSES):
            raise InvalidInput(f"status must be one of {', '.join(wi.STATUSES)}, not {status!r}")
        self._catch_up_work_queue()
        return self.work_queue.work_items(status)

    def history(self, work_item_id: UUID) -> list[DomainEvent]:
        """The WorkItem's events in order (its Action events are in ``action_history``)."""
        work_item_id = self.work_item(work_item_id).id
        return cast(list[DomainEvent], list(self.store.events.get(work_item_id)))

    def action_history(self, action_id: UUID) -> list[DomainEvent]:
        action_id = self.action(action_id).id  # NotFound unless it is an Action
        return cast(list[DomainEvent], list(self.store.events.get(action_id)))

    def _catch_up_audit(self) -> None:
        """With inline projections off the audit view is as fresh as the runner made it."""
        if self.inline_projections:
            self.projections.catch_up(names=[Audit.name])

    def audit(
        self,
        work_item_id: UUID,
        *,
        limit: int | None = DEFAULT_LIMIT,
        action_id: UUID | None = None,
        run_id: UUID | None = None,
        type: str | None = None,
        until: int | None = None,
    ) -> list[AuditRow]:
        """The item's events (its Actions' and ledger's too) from the audit view, in
        position order: the newest ``limit`` that match the filters (up to position
        ``until``, if given)."""
        work_item_id = self.work_item(work_item_id).id
        if limit is not None:
            limit = inputs.version(limit, "limit")
        if until is not None:
            until = inputs.version(until, "until")
        action_id = inputs.optional_id(action_id, "Action")
        run_id = inputs.optional_id(run_id, "Run")
        if type is not None:
            type = inputs.text(type, "type", bounds.ACTION_TYPE)
        self._catch_up_audit()
        return self.audit_view.events(
            work_item_id,
            limit=limit,
            action_id=action_id,
            run_id=run_id,
            type=type,
            max_position=until,
        )

    def state_at(
        self, work_item_id: UUID, *, version: int | None = None, at: datetime | None = None
    ) -> tuple[int, wi.WorkItemState, dict[UUID, act.ActionState]]:
        """(position, item, its Actions) as they were at WorkItem ``version`` or at time ``at``.

        Each Action is loaded at its latest version written at or before the position.
        """
        if (version is None) == (at is None):
            raise InvalidInput("give exactly one of version or at")
        if version is not None:
            version = inputs.version(version, "version")
        if at is not None:
            at = inputs.moment(at, "at")
        work_item_id = self.work_item(work_item_id).id
        self._catch_up_audit()
        position = self.audit_view.cut(work_item_id, version=version, at=at)
        if position is None:
            when = f"version {version}" if version is not None else f"time {at}"
            raise InvalidInput(f"WorkItem {work_item_id} has no state at {when}")
        versions = self.audit_view.versions_at(work_item_id, position)
        item = self.work_item(work_item_id, version=versions[("work_item", work_item_id)])
        actions = {
            e.action_id: self.action(e.action_id, version=versions[("action", e.action_id)])
            for e in item.plan
            if ("action", e.action_id) in versions
        }
        return position, item, actions
