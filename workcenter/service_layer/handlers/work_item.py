"""The WorkItem commands: create, edit, start, cancel, resume, retry, guide, add
input, and a Coordinator turn's plan and completion."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from types import EllipsisType
from typing import Any
from uuid import UUID, uuid4, uuid5

from eventsourcing.persistence import IntegrityError

from workcenter.domain import action as act
from workcenter.domain import action_input, bounds, inputs, lifecycle, modes, planning
from workcenter.domain import actor as actors
from workcenter.domain import resource_ledger as rl
from workcenter.domain import work_item as wi
from workcenter.domain.actor import Actor
from workcenter.domain.errors import InvalidInput, NotFound, RequestIdUsed
from workcenter.domain.model import DomainEvent
from workcenter.domain.unit import Unit
from workcenter.service_layer.ports import Clock
from workcenter.service_layer.repository import Repository, WriteContention

# A create's request id names its WorkItem (ADR-0139): a retry addresses the streams the
# first attempt wrote, and the store's version check finds them.
CREATE_REQUESTS = UUID("8f0f4f2e-5b1c-4d3e-9a57-0c6a3e1d2b90")


class WorkItemCommands:
    """Each command loads the item and the Actions it needs, checks what the caller
    saw, lets the domain decide, and saves the unit (again on a lost race)."""

    def __init__(self, repository: Repository, clock: Clock) -> None:
        self.repo = repository
        self.clock = clock

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
            item = self.repo.work_item(work_item_id)
            self.repo.check_expected(item, expected_version, conflicts)
            return decide(item, self.repo.actions(item, *statuses), self.clock.now(), by)

        return self.repo.execute(attempt).item

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
        request_id: str | None = None,
    ) -> wi.WorkItemState:
        """Create a WorkItem and its ResourceLedger (default limits, or ``limits``).

        A linear item's ``stages`` are names or ``{"type", "maxAttempts"}`` objects. Texts
        and lists are bounded (docs/limits.md): input past a bound is refused. With a
        ``request_id`` (ADR-0139) the create is idempotent: sent again with the same
        input, it answers the WorkItem the first one made, as it is now; with other
        input, ``RequestIdUsed``."""
        unit = new_work_item(
            title=title,
            goal=goal,
            acceptance_criteria=acceptance_criteria,
            delivery_target=delivery_target,
            mode=mode,
            stages=stages,
            start=start,
            limits=limits,
            actor=actor,
            at=self.clock.now(),
            request_id=request_id,
        )
        if request_id is None:
            self.repo.save_created(unit)
            return unit.item
        try:
            self.repo.save(unit)
        except IntegrityError:
            return self._created_before(unit)
        return unit.item

    def _created_before(self, unit: Unit) -> wi.WorkItemState:
        """The WorkItem a create with the same request id made, if it was made with the
        same input (its first events equal this unit's, but for their time)."""
        item_id = unit.item.id
        try:
            stored = self.repo.work_item(item_id)
        except NotFound:
            raise WriteContention(
                f"WorkItem {item_id} could not be written: nothing was written"
            ) from None
        made = [self.repo.events(i, limit=1)[0] for i in (item_id, rl.ledger_id_for(item_id))]
        sent = [next(e for e in unit.events if e.originator_id == m.originator_id) for m in made]
        if [_input_of(e) for e in made] != [_input_of(e) for e in sent]:
            raise RequestIdUsed(
                f"request_id was used to create WorkItem {item_id} with other input:"
                " nothing was written; a new WorkItem needs a new request_id"
            )
        return stored

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
        self,
        work_item_id: UUID,
        *,
        reason: str = "",
        expected_version: int | None = None,
        actor: Actor | str | None = None,
    ) -> wi.WorkItemState:
        reason = inputs.text(reason, "reason", bounds.REASON)
        expected_version = inputs.optional_version(expected_version, "expected_version")
        return self._item_command(
            work_item_id,
            expected_version,
            lifecycle.CANCEL_CONFLICTS,
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
            item = self.repo.work_item(work_item_id)
            self.repo.check_expected(item, expected_version, lifecycle.RESUME_CONFLICTS)
            ledger = self.repo.ledger(work_item_id)
            self.repo.check_expected(ledger, expected_ledger_version, rl.CONTROL_EVENTS)
            actions = self.repo.actions(item, "cancelled", *act.OPEN_STATUSES)
            stopping = lifecycle.stopping_action_id(ledger)
            if stopping is not None and stopping not in actions:
                actions[stopping] = self.repo.action(stopping)
            return lifecycle.resume(item, actions, ledger, self.clock.now(), by)

        return self.repo.execute(attempt).item

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
            lambda item, actions, ledger, at, by: lifecycle.retry(
                item,
                actions,
                ledger,
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
            lambda item, actions, ledger, at, by: lifecycle.guide(
                item,
                actions,
                ledger,
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
        decide: Callable[
            [wi.WorkItemState, dict[UUID, act.ActionState], rl.LedgerState, datetime, Actor],
            Unit,
        ],
    ) -> wi.WorkItemState:
        """Retry and guidance: the open Actions plus the target, whatever its status, and
        the ledger, which says whether the target has an attempt left."""
        expected_version = inputs.version(expected_version)
        action_id = inputs.aggregate_id(action_id, "Action")
        return self._item_command(
            work_item_id,
            expected_version,
            lifecycle.ACTION_INPUT_CONFLICTS,
            lambda item, actions, at, by: decide(
                item,
                actions | {action_id: self.repo.action(action_id)},
                self.repo.ledger(work_item_id),
                at,
                by,
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
                actions | {action_id: self.repo.action(action_id)},
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
        return self.repo.action(action_id)

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


def new_work_item(
    *,
    title: str,
    goal: str,
    acceptance_criteria: list[str] | tuple[str, ...],
    delivery_target: str | None,
    mode: wi.Mode,
    stages: Sequence[str | Mapping[str, Any]] | None,
    start: bool,
    limits: Mapping[str, int] | None,
    actor: Actor | str | None,
    at: datetime,
    request_id: str | None = None,
) -> Unit:
    """The new WorkItem's unit, decided on nothing but its input: a store is needed only
    to save it, so a caller may learn of a refusal before it makes one."""
    by = actors.resolve(actor, actors.USER)
    work_item_id = uuid4()
    if request_id is not None:
        request_id = inputs.text(request_id, "request_id", bounds.REQUEST_ID, required=True)
        work_item_id = uuid5(CREATE_REQUESTS, request_id)
    if not isinstance(mode, str) or mode not in modes.POLICIES:
        raise InvalidInput(f"mode must be dynamic or linear, not {mode!r}")
    contract = wi.validate_contract(
        title=title,
        goal=goal,
        acceptance_criteria=acceptance_criteria,
        delivery_target=delivery_target,
    )
    return lifecycle.create(
        work_item_id=work_item_id,
        mode=mode,
        contract=contract,
        stages=stages,
        start=inputs.flag(start, "start"),
        at=at,
        by=by,
        limits=_limits(limits),
    )


def _input_of(event: DomainEvent) -> dict[str, Any]:
    return event.model_dump(exclude={"timestamp"})


def _limits(limits: Mapping[str, int] | None) -> rl.Limits | None:
    if limits is None:
        return None
    inputs.mapping(limits, "limits")
    for name, value in limits.items():
        if name not in rl.LIMIT_NAMES:
            raise InvalidInput(f"{name!r} is not a limit; use one of {', '.join(rl.LIMIT_NAMES)}")
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise InvalidInput(f"limits.{name} must be a positive integer, not {value!r}")
        if value > rl.MAX_SAFE_INTEGER:
            raise InvalidInput(f"limits.{name} must be at most {rl.MAX_SAFE_INTEGER}")
    # Checked above in the caller's words: pydantic's own message names its classes.
    return rl.Limits(**limits)
