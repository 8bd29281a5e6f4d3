"""The service layer: load what a command needs, check what the caller saw,
call the domain, and save every touched aggregate in one atomic write.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from types import EllipsisType
from typing import Any, cast
from uuid import UUID, uuid4

from workcenter import audit_trail, claiming
from workcenter.budget import BudgetCommands
from workcenter.claiming import Claim
from workcenter.domain import action as act
from workcenter.domain import action_input, bounds, inputs, lifecycle, planning, runs
from workcenter.domain import actor as actors
from workcenter.domain import resource_ledger as rl
from workcenter.domain import work_item as wi
from workcenter.domain.actor import Actor
from workcenter.domain.errors import InvalidInput
from workcenter.domain.goal_progress import GoalProgress
from workcenter.domain.model import DomainEvent
from workcenter.domain.outcome import RunReport
from workcenter.domain.run import parse_progress
from workcenter.domain.unit import Unit
from workcenter.projections import audit as audit_rows
from workcenter.projections.audit import DEFAULT_LIMIT, AuditRow
from workcenter.run_side import RunSide
from workcenter.store import (
    SNAPSHOT_INTERVAL,
    Clock,
    EventStore,
    SystemClock,
    WriteContention,
)

__all__ = [
    "SNAPSHOT_INTERVAL",
    "Actor",
    "Claim",
    "Clock",
    "EventStore",
    "SystemClock",
    "WorkCenter",
    "WriteContention",
]


class WorkCenter(BudgetCommands):
    """The embeddable service: every command and read of Workcenter."""

    def _item_command(
        self,
        work_item_id: UUID,
        expected_version: int | None,
        conflicts: tuple[type[DomainEvent], ...] | None,
        decide: Callable[[wi.WorkItemState, dict[UUID, act.ActionState], datetime, Actor], Unit],
        *statuses: str,
        by: Actor,
    ) -> wi.WorkItemState:
        def attempt() -> Unit:
            item = self.work_item(work_item_id)
            self._check_expected(item, expected_version, conflicts)
            return decide(item, self.actions(item, *statuses), self.clock.now(), by)

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
        actor: Actor | str | None = None,
    ) -> wi.WorkItemState:
        """Create a WorkItem and its ResourceLedger (default limits, or ``limits``).

        A linear item's ``stages`` are names or ``{"type", "maxAttempts"}`` objects. Texts
        and lists are bounded (docs/limits.md): input past a bound is refused."""
        by = actors.resolve(actor, actors.USER)
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
            by=by,
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
        actor: Actor | str | None = None,
    ) -> wi.WorkItemState:
        """Edit the contract; a title, goal, criteria or target edit conflicts with any
        other contract edit after ``expected_version``."""
        expected_version = inputs.version(expected_version)

        def decide(
            item: wi.WorkItemState, actions: dict[UUID, act.ActionState], at: datetime, by: Actor
        ) -> Unit:
            contract = wi.validate_contract(
                title=item.title if title is None else title,
                goal=item.goal if goal is None else goal,
                acceptance_criteria=(
                    item.acceptance_criteria if acceptance_criteria is None else acceptance_criteria
                ),
                delivery_target=item.delivery_target if delivery_target is ... else delivery_target,
            )
            return lifecycle.update_contract(item, actions, contract, at, by)

        return self._item_command(
            work_item_id,
            expected_version,
            lifecycle.UPDATE_CONFLICTS,
            decide,
            *act.OPEN_STATUSES,
            by=actors.resolve(actor, actors.USER),
        )

    def start(
        self,
        work_item_id: UUID,
        *,
        expected_version: int | None = None,
        actor: Actor | str | None = None,
    ) -> wi.WorkItemState:
        expected_version = inputs.optional_version(expected_version, "expected_version")
        return self._item_command(
            work_item_id,
            expected_version,
            lifecycle.START_CONFLICTS,
            lifecycle.start,
            *act.OPEN_STATUSES,
            by=actors.resolve(actor, actors.USER),
        )

    def cancel(
        self, work_item_id: UUID, *, reason: str = "", actor: Actor | str | None = None
    ) -> wi.WorkItemState:
        reason = inputs.text(reason, "reason", bounds.REASON)
        return self._item_command(
            work_item_id,
            None,
            (),
            lambda item, actions, at, by: lifecycle.cancel(item, actions, at, reason, by),
            *act.OPEN_STATUSES,
            by=actors.resolve(actor, actors.USER),
        )

    def resume(
        self,
        work_item_id: UUID,
        *,
        expected_version: int,
        expected_ledger_version: int,
        actor: Actor | str | None = None,
    ) -> wi.WorkItemState:
        """Resume a cancelled item, or one its budget stopped (after extending it).

        ``expected_ledger_version`` is the ledger version the user saw: a stop, extend
        or resume recorded after it refuses the resume (the execution-control check)."""
        expected_version = inputs.version(expected_version)
        expected_ledger_version = inputs.version(expected_ledger_version, "expected_ledger_version")
        by = actors.resolve(actor, actors.USER)

        def attempt() -> Unit:
            item = self.work_item(work_item_id)
            self._check_expected(item, expected_version, lifecycle.RESUME_CONFLICTS)
            ledger = self.ledger(work_item_id)
            self._check_expected(ledger, expected_ledger_version, rl.CONTROL_EVENTS)
            actions = self.actions(item, "cancelled", *act.OPEN_STATUSES)
            stopping = lifecycle.stopping_action_id(ledger)
            if stopping is not None and stopping not in actions:
                actions[stopping] = self.action(stopping)
            return lifecycle.resume(item, actions, ledger, self.clock.now(), by)

        return self._execute(attempt).item

    def retry(
        self,
        work_item_id: UUID,
        action_id: UUID,
        *,
        expected_version: int,
        expected_generation: int | None = None,
        answer: str = "",
        actor: Actor | str | None = None,
    ) -> wi.WorkItemState:
        answer = inputs.text(answer, "answer", bounds.ANSWER)
        expected_generation = inputs.optional_version(expected_generation, "expected_generation")
        return self._action_input(
            work_item_id,
            action_id,
            expected_version,
            actors.resolve(actor, actors.USER),
            lambda item, actions, at, by: lifecycle.retry(
                item,
                actions,
                action_id=action_id,
                expected_generation=expected_generation,
                answer=answer,
                at=at,
                by=by,
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
        actor: Actor | str | None = None,
    ) -> wi.WorkItemState:
        guidance = inputs.text(guidance, "guidance", bounds.GUIDANCE)
        expected_generation = inputs.optional_version(expected_generation, "expected_generation")
        return self._action_input(
            work_item_id,
            action_id,
            expected_version,
            actors.resolve(actor, actors.USER),
            lambda item, actions, at, by: lifecycle.guide(
                item,
                actions,
                action_id=action_id,
                expected_generation=expected_generation,
                guidance=guidance,
                at=at,
                by=by,
            ),
        )

    def _action_input(
        self,
        work_item_id: UUID,
        action_id: UUID,
        expected_version: int,
        by: Actor,
        decide: Callable[[wi.WorkItemState, dict[UUID, act.ActionState], datetime, Actor], Unit],
    ) -> wi.WorkItemState:
        """Retry and guidance: the open Actions plus the target, whatever its status."""
        expected_version = inputs.version(expected_version)
        action_id = inputs.aggregate_id(action_id, "Action")
        return self._item_command(
            work_item_id,
            expected_version,
            lifecycle.ACTION_INPUT_CONFLICTS,
            lambda item, actions, at, by: decide(
                item, actions | {action_id: self.action(action_id)}, at, by
            ),
            *act.OPEN_STATUSES,
            by=by,
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
        actor: Actor | str | None = None,
    ) -> act.ActionState:
        """Send input to a ready Action (a new generation) or to the Run of a running one
        (queued for it; refused if that Run, its generation or its lease is stale)."""
        by = actors.resolve(actor, actors.USER)
        if not isinstance(work_item_id, UUID) or not isinstance(action_id, UUID):
            raise InvalidInput("work_item_id and action_id must be ids")
        expected_version = inputs.version(expected_version)
        expected_generation = inputs.version(expected_generation, "expected_generation")
        if expected_run_id is not None and not isinstance(expected_run_id, UUID):
            raise InvalidInput("expected_run_id must be a Run id")
        input_id = uuid4()
        self._item_command(
            work_item_id,
            expected_version,
            action_input.INPUT_CONFLICTS,
            lambda item, actions, at, by: action_input.add_input(
                item,
                actions | {action_id: self.action(action_id)},
                action_id=action_id,
                input_id=input_id,
                text=text,
                expected_generation=expected_generation,
                expected_run_id=expected_run_id,
                at=at,
                by=by,
            ),
            *act.OPEN_STATUSES,
            by=by,
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
        actor: Actor | str | None = None,
    ) -> wi.WorkItemState:
        """A Coordinator turn's plan (its stand-in until there is a Coordinator)."""
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
            lambda item, loaded, at, by: planning.plan_actions(item, loaded, payload, at=at, by=by),
            by=actors.resolve(actor, actors.COORDINATOR),
        )

    def complete(
        self,
        work_item_id: UUID,
        *,
        expected_version: int,
        completion: Mapping[str, Any],
        actor: Actor | str | None = None,
    ) -> wi.WorkItemState:
        """A Coordinator turn's completion (its stand-in until there is a Coordinator)."""
        expected_version = inputs.version(expected_version)
        return self._item_command(
            work_item_id,
            expected_version,
            None,
            lambda item, loaded, at, by: planning.complete(item, loaded, completion, at=at, by=by),
            by=actors.resolve(actor, actors.COORDINATOR),
        )

    # --- Run commands ---------------------------------------------------------

    def claim_next(
        self, worker: str, *, lease_seconds: float = 60.0, actor: Actor | str | None = None
    ) -> Claim | None:
        """Claim the oldest claimable Action, or return None when there is none.

        Candidates come from the work-queue read model; each is re-checked on its
        aggregates, and a stale candidate or a lost race moves on to the next.
        ``lease_seconds`` is from 1 s to 24 h (86,400 s). The claim is by the worker
        ``worker@boot`` unless ``actor`` says otherwise.
        """
        worker = inputs.text(worker, "worker", bounds.WORKER, required=True)
        lease = timedelta(seconds=inputs.lease_seconds(lease_seconds))
        by = actors.resolve(actor, actors.worker(worker, self.boot_id))
        return claiming.claim_next(self, worker, lease, by)

    @property
    def _run_side(self) -> RunSide:
        return RunSide(self)

    def renew_lease(
        self,
        claim: Claim | act.RunRef,
        *,
        lease_seconds: float = 60.0,
        actor: Actor | str | None = None,
    ) -> bool:
        """Extend the lease by ``lease_seconds`` (1 s to 24 h) from now; False when the
        Run is no longer live (stop working on it)."""
        return self._run_side.renew_lease(claim, lease_seconds, actor)

    def finish_run(
        self,
        claim: Claim | act.RunRef,
        report: RunReport | Mapping[str, Any],
        *,
        actor: Actor | str | None = None,
    ) -> act.ActionState:
        """Record the Run's outcome: completed, waiting, retryable or failed.

        By the claim's worker unless ``actor`` says otherwise."""
        if not isinstance(report, RunReport | Mapping):
            raise InvalidInput(f"a run report must be a mapping, not {type(report).__name__}")
        return self._run_side.command(
            claim,
            actor,
            lambda item, action, ref, at, by: runs.finish(
                item,
                action,
                ref,
                dict(report) if isinstance(report, Mapping) else report,
                at=at,
                by=by,
            ),
        )

    def interrupt(
        self,
        claim: Claim | act.RunRef,
        *,
        reason: str = "",
        progress: act.RunProgress | Mapping[str, Any] | None = None,
        actor: Actor | str | None = None,
    ) -> act.ActionState:
        """Give the Run up gracefully; ``progress`` ({summary, response, stats}) is its
        final response and execution stats, recorded as the lease is released. By the
        claim's worker unless ``actor`` says otherwise."""
        reason = inputs.text(reason, "reason", bounds.REASON)
        final = parse_progress(progress)
        return self._run_side.command(
            claim,
            actor,
            lambda item, action, ref, at, by: runs.interrupt(
                item, action, ref, reason=reason, at=at, by=by, progress=final
            ),
        )

    def defer(
        self, claim: Claim | act.RunRef, *, actor: Actor | str | None = None
    ) -> act.ActionState:
        """The workspace is busy: end the Run as deferred and give its attempt back.

        By the claim's worker unless ``actor`` says otherwise."""
        return self._run_side.defer(claim, actor)

    def pending_input(self, claim: Claim | act.RunRef) -> tuple[act.QueuedInput, ...]:
        return self._run_side.pending_input(claim)

    def consume_input(
        self,
        claim: Claim | act.RunRef,
        input_ids: Sequence[UUID],
        *,
        actor: Actor | str | None = None,
    ) -> act.ActionState:
        return self._run_side.consume_input(claim, input_ids, actor)

    def recover(self, *, worker: str | None = None, actor: Actor | str | None = None) -> list[UUID]:
        """End every Run whose lease expired or whose owner restarted (a new boot id).

        With ``worker``, only that worker's Runs are judged by boot id; without
        it, every Run from another boot is dead (one process owns all workers).
        Recovery is the operator's unless ``actor`` says otherwise.
        """
        return self._run_side.recover(worker, actor)

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
        """The item's events (its Actions' and ledger's too) read from the event store,
        in position order: the newest ``limit`` that match the filters (up to position
        ``until``, if given), each with the actor its command recorded."""
        if limit is not None:
            limit = inputs.version(limit, "limit")
        if until is not None:
            until = inputs.version(until, "until")
        action_id = inputs.optional_id(action_id, "Action")
        run_id = inputs.optional_id(run_id, "Run")
        if type is not None:
            type = inputs.text(type, "type", bounds.ACTION_TYPE)
        return audit_rows.select(
            audit_trail.rows(self, work_item_id, until),
            limit=limit,
            action_id=action_id,
            run_id=run_id,
            type=type,
        )

    def state_at(
        self, work_item_id: UUID, *, version: int | None = None, at: datetime | None = None
    ) -> tuple[int, wi.WorkItemState, dict[UUID, act.ActionState]]:
        """(position, item, its Actions) as they were at WorkItem ``version`` or at time ``at``.

        Each Action is loaded at its latest version written at or before the position.
        """
        work_item_id = inputs.aggregate_id(work_item_id, "WorkItem")
        if version is not None:
            version = inputs.version(version, "version")
        if at is not None:
            at = inputs.moment(at, "at")
        return audit_trail.state_at(self, work_item_id, version=version, at=at)
