"""Dynamic planning and completion: what a Coordinator's ``create_actions`` and
``complete`` decisions do (coordinator.md 4.3 and 4.6).

Until a Coordinator exists the service layer exposes them as the commands
``plan_actions`` and ``complete``. Both are strict about what the caller saw:
any WorkItem event after the expected version refuses them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Annotated, Any, Literal
from uuid import UUID

from pydantic import BeforeValidator, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from workcenter.domain import action as act
from workcenter.domain import action_generation as generation
from workcenter.domain import bounds, decision_models, inputs, modes
from workcenter.domain import conversation as conv
from workcenter.domain import work_item as wi
from workcenter.domain.actor import Actor
from workcenter.domain.errors import CommandRefused, InvalidInput
from workcenter.domain.goal_progress import GoalProgress, derive_goal_progress, is_proof
from workcenter.domain.model import Immutable
from workcenter.domain.unit import Unit

MAX_NEW_ACTIONS = 8
MAX_ACTIONS_PER_ITEM = 64
BRIEF_LIMIT = bounds.BRIEF_FIELD
SUMMARY_LIMIT = bounds.COMPLETION_SUMMARY
RATIONALE_MIN = 20
_SLUG = re.compile(r"[^a-z0-9_]+")


class _Input(Immutable):
    model_config = ConfigDict(
        extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=True
    )


# The bounds of docs/limits.md, on the texts as given.
_Brief = Annotated[str, Field(max_length=bounds.BRIEF_FIELD)]
_Reason = Annotated[str, Field(max_length=bounds.REASON)]
_Criterion = Annotated[str, Field(max_length=bounds.CRITERION)]
_Ids = Annotated[tuple[UUID, ...], Field(max_length=bounds.IDS)]


class ActionSpec(_Input):
    type: Annotated[str, Field(max_length=bounds.ACTION_TYPE)] = "custom"
    objective: _Brief
    approach: _Brief
    expected_outcome: _Brief
    # Clamped as the Coordinator's create_actions are (coordinator.md 4.3), not refused.
    workspace_mode: Annotated[
        act.WorkspaceMode | None, BeforeValidator(decision_models.clamp_workspace_mode)
    ] = "shared"
    max_attempts: Annotated[int, BeforeValidator(decision_models.clamp_max_attempts)] = (
        act.DEFAULT_MAX_ATTEMPTS
    )
    source_action_ids: _Ids = ()


class CloseAction(_Input):
    action_id: UUID
    reason: _Reason


class GoalRefs(_Input):
    criteria: Annotated[tuple[_Criterion, ...], Field(max_length=bounds.CRITERIA)] = ()
    blocker_action_ids: _Ids = ()
    delivery: bool = False


class Plan(_Input):
    actions: Annotated[tuple[ActionSpec, ...], Field(max_length=MAX_NEW_ACTIONS * 2)]
    close_actions: Annotated[tuple[CloseAction, ...], Field(max_length=MAX_ACTIONS_PER_ITEM)] = ()
    supersede_action_ids: _Ids = ()
    goal_refs: GoalRefs | None = None
    rationale: Annotated[str, Field(max_length=bounds.RATIONALE)] = ""


class AcceptanceResultInput(_Input):
    criterion: _Criterion
    status: Annotated[str, Field(max_length=bounds.ACTION_TYPE)]
    evidence_run_ids: _Ids = ()


class Completion(_Input):
    summary: Annotated[str, Field(max_length=bounds.COMPLETION_SUMMARY)]
    acceptance_results: Annotated[
        tuple[AcceptanceResultInput, ...], Field(max_length=bounds.CRITERIA)
    ]
    evidence_run_ids: _Ids = ()
    residual_risks: Annotated[
        tuple[Annotated[str, Field(max_length=bounds.RISK)], ...], Field(max_length=bounds.RISKS)
    ] = ()
    close_actions: Annotated[tuple[CloseAction, ...], Field(max_length=MAX_ACTIONS_PER_ITEM)] = ()


def _parse(model: type[Any], payload: Any) -> Any:
    if isinstance(payload, model):
        return payload
    inputs.payload(payload, model.__name__)
    try:
        return model.model_validate(payload)
    except ValidationError as error:
        raise InvalidInput(f"malformed {model.__name__}: {inputs.describe(error)}") from None


def progress(item: wi.WorkItemState, actions: Mapping[UUID, act.ActionState]) -> GoalProgress:
    return derive_goal_progress(
        criteria=item.acceptance_criteria,
        contract_revision=item.contract_revision,
        delivery_target=item.delivery_target,
        actions=list(actions.values()),
    )


# What a dynamic item with nothing open waits for: a Coordinator step already due (a
# wake in its mailbox), a person's word after a turn that failed for good (a permanent
# failure is not retried, ADR-0023), or a person's word with nothing due at all.
PlanWait = Literal["due", "failed", "idle"]


def awaits_plan(item: wi.WorkItemState) -> bool:
    """Whether ``item`` waits for its Coordinator to plan its next Actions: its
    Coordinator plans them (a dynamic item), it runs, and no Action is ready, running or
    waiting. Only then does ``plan_wait`` need its Conversation."""
    return (
        modes.of(item).takes_plans
        and item.status == "running"
        and not item.entries("ready", "running", "waiting")
    )


def plan_wait(
    item: wi.WorkItemState, conversation: conv.ConversationState | None
) -> PlanWait | None:
    """What an item that ``awaits_plan`` waits for before its next Actions are planned;
    None for any other item (ADR-0129)."""
    if not awaits_plan(item):
        return None
    if conversation is None:
        return "idle"
    if conversation.open_entries():
        return "due"
    last = max(conversation.entries, key=lambda entry: entry.sequence, default=None)
    turn = conversation.turns.get(last.turn_id) if last and last.turn_id else None
    return "failed" if turn is not None and turn.status == "failed" else "idle"


def slug(text: str) -> str:
    return _SLUG.sub("_", text.strip().lower()).strip("_")


class PreparedAction(Immutable):
    """A planned Action as it will be recorded: type slugged, mode and attempts clamped."""

    type: str
    brief: act.Brief
    workspace_mode: act.WorkspaceMode
    max_attempts: int
    source_action_ids: tuple[UUID, ...] = ()


def _brief(spec: ActionSpec, rationale: str = "") -> act.Brief:
    fields = {
        "objective": spec.objective.strip(),
        "approach": spec.approach.strip(),
        "expected_outcome": spec.expected_outcome.strip(),
    }
    for name, text in fields.items():
        if not inputs.visible(text):
            why = " (it shows nothing)" if text else ""
            raise InvalidInput(f"{name} is required for every planned Action{why}")
        if len(text) > BRIEF_LIMIT:
            raise InvalidInput(f"{name} is longer than {BRIEF_LIMIT} characters")
    return act.Brief(**fields, rationale=rationale)


def prepare(spec: ActionSpec, rationale: str = "") -> PreparedAction:
    """The Action ``spec`` asks for."""
    kind = slug(spec.type) or "custom"
    if kind == "triage":
        raise InvalidInput("dynamic plans never create triage Actions")
    return PreparedAction(
        type=kind,
        brief=_brief(spec, rationale),
        workspace_mode=spec.workspace_mode or "shared",
        max_attempts=spec.max_attempts,
        source_action_ids=tuple(dict.fromkeys(spec.source_action_ids)),
    )


def check_sources(
    item: wi.WorkItemState, prepared: PreparedAction, actions: Mapping[UUID, act.ActionState]
) -> None:
    """sourceActionIds must name Actions of this item (coordinator.md 4.3); they are
    audit links only, so nothing waits on them. An ``integrate`` Action merges what
    isolated-write Actions made, so its sources must be those, completed."""
    known = {entry.action_id for entry in item.plan}
    sources = prepared.source_action_ids
    strangers = [str(i) for i in sources if i not in known]
    if strangers:
        raise InvalidInput(
            f"sourceActionIds must name Actions of this WorkItem; unknown: {', '.join(strangers)}"
        )
    if prepared.workspace_mode != "integrate":
        return
    if not sources:
        raise InvalidInput(
            "an integrate Action needs sourceActionIds: the completed isolated-write Actions "
            "whose work it integrates"
        )
    for source in sources:
        action = actions.get(source)
        if action is None or (action.status, action.workspace_mode) != (
            "completed",
            "isolated-write",
        ):
            shown = f"{action.status} {action.workspace_mode}" if action else "not loaded"
            raise CommandRefused(
                f"an integrate Action's sources must be completed isolated-write Actions; "
                f"Action {source} is {shown}"
            )


def _refuse_strangers(
    field: str, ids: Iterable[UUID], actions: Mapping[UUID, act.ActionState]
) -> None:
    """Like sourceActionIds: an id that is no Action of this item is malformed input,
    not an Action in the wrong status."""
    strangers = [str(i) for i in ids if i not in actions]
    if strangers:
        raise InvalidInput(
            f"{field} must name Actions of this WorkItem; unknown: {', '.join(strangers)}"
        )


def check_closures(closes: Sequence[CloseAction], actions: Mapping[UUID, act.ActionState]) -> None:
    ids = [c.action_id for c in closes]
    if len(set(ids)) != len(ids):
        raise InvalidInput("closeActions names an Action twice")
    _refuse_strangers("closeActions", ids, actions)
    for close in closes:
        if not close.reason.strip():
            raise InvalidInput("closeActions needs a reason for every Action")
        if actions[close.action_id].status not in ("waiting", "failed"):
            raise CommandRefused(
                f"Action {close.action_id} is not waiting or failed; it cannot close"
            )


def check_supersedes(
    action_ids: Sequence[UUID],
    closes: Sequence[CloseAction],
    actions: Mapping[UUID, act.ActionState],
) -> None:
    _refuse_strangers("supersedeActionIds", action_ids, actions)
    closing = {c.action_id for c in closes}
    for action_id in action_ids:
        if action_id in closing:
            raise InvalidInput(f"Action {action_id} cannot be both closed and superseded")
        if actions[action_id].status not in ("ready", "waiting", "failed"):
            raise CommandRefused(f"Action {action_id} is not ready, waiting or failed")


def refuse_unless_plannable(item: wi.WorkItemState, new_actions: int) -> None:
    """The item takes ``new_actions`` planned Actions: dynamic, active, not stopped,
    1 to 8 at once and at most 64 in all, history included."""
    if not modes.of(item).takes_plans:
        raise CommandRefused("Only dynamic WorkItems take planned Actions")
    if item.status not in wi.ACTIVE:
        raise CommandRefused(f"Cannot plan Actions for a WorkItem that is {item.status}")
    if item.stopped:
        raise CommandRefused(f"WorkItem is stopped by its budget ({item.stopped}); resume it first")
    if not 1 <= new_actions <= MAX_NEW_ACTIONS:
        raise InvalidInput(f"plan 1 to {MAX_NEW_ACTIONS} Actions at once")
    if len(item.plan) + new_actions > MAX_ACTIONS_PER_ITEM:
        raise CommandRefused(f"a WorkItem holds at most {MAX_ACTIONS_PER_ITEM} Actions")


def refuse_if_goal_met(goal: GoalProgress) -> None:
    """The goal gate: nothing is left to plan for once completion is possible."""
    if (
        goal.total_criteria_count
        and not goal.remaining_criteria
        and goal.delivery.status == "passed"
        and not goal.blockers
    ):
        raise CommandRefused("The goal is already met; complete the WorkItem instead")


def check_goal_refs(refs: GoalRefs, goal: GoalProgress) -> None:
    blockers = {b.action_id for b in goal.blockers}
    named = False
    for criterion in refs.criteria:
        if criterion not in goal.remaining_criteria:
            raise CommandRefused(f"goalRefs names a criterion that is not unmet: {criterion!r}")
        named = True
    for action_id in refs.blocker_action_ids:
        if action_id not in blockers:
            raise CommandRefused(f"goalRefs names {action_id}, which is not a current blocker")
        named = True
    if refs.delivery:
        if goal.delivery.status == "passed":
            raise CommandRefused("goalRefs names the delivery, which has already passed")
        named = True
    if not named:
        raise InvalidInput("goalRefs must name an unmet criterion, a blocker or the delivery")


def refuse_mutating_without_target(item: wi.WorkItemState, mode: str | None) -> None:
    """The delivery gate: until the target is confirmed only read-mode Actions are
    planned (an absent mode counts as mutating)."""
    if item.delivery_target is None and mode != "read":
        raise CommandRefused(
            "The delivery target is unconfirmed: only read-mode Actions may be planned"
        )


def repeat_keys(
    actions: Mapping[UUID, act.ActionState], statuses: frozenset[str]
) -> set[tuple[str, str]]:
    """(type, objective) of the Actions in ``statuses``: planning one again is a repeat."""
    return {(a.type, a.brief.objective) for a in actions.values() if a.status in statuses}


def record_plan(
    unit: Unit,
    closes: Sequence[CloseAction],
    supersede_action_ids: Sequence[UUID],
    prepared: Sequence[PreparedAction],
) -> act.ActionState:
    """Close, then supersede, then add the new Actions; the first created one is returned."""
    for close in closes:
        unit.apply_action(
            act.close(
                unit.action(close.action_id), reason=close.reason.strip(), at=unit.at, by=unit.by
            )
        )
    for action_id in supersede_action_ids:
        unit.apply_action(
            generation.invalidate(
                unit.action(action_id),
                status="superseded",
                reason="replanned",
                at=unit.at,
                by=unit.by,
            )
        )
    created = [
        unit.plan_action(
            type=p.type,
            brief=p.brief,
            workspace_mode=p.workspace_mode,
            max_attempts=p.max_attempts,
            source_action_ids=p.source_action_ids,
        )
        for p in prepared
    ]
    return created[0]


def plan_actions(
    item: wi.WorkItemState,
    actions: Mapping[UUID, act.ActionState],
    payload: Plan | Mapping[str, Any],
    *,
    at: datetime,
    by: Actor,
) -> Unit:
    plan: Plan = _parse(Plan, payload)
    refuse_unless_plannable(item, len(plan.actions))
    if item.entries("running"):
        raise CommandRefused("Cannot plan Actions while a Run is active")
    check_closures(plan.close_actions, actions)
    check_supersedes(plan.supersede_action_ids, plan.close_actions, actions)

    goal = progress(item, actions)
    refuse_if_goal_met(goal)
    if plan.goal_refs is not None:
        check_goal_refs(plan.goal_refs, goal)

    # The stand-in command counts only open Actions as repeats; a Coordinator
    # decision counts completed ones too (coordinator.md 9.2, ADR-0025).
    live = repeat_keys(actions, act.OPEN_STATUSES)
    new: list[PreparedAction] = []
    for spec in plan.actions:
        prepared = prepare(spec)
        refuse_mutating_without_target(item, prepared.workspace_mode)
        check_sources(item, prepared, actions)
        key = (prepared.type, prepared.brief.objective)
        if key in live and (plan.goal_refs is None or len(plan.rationale.strip()) < RATIONALE_MIN):
            raise InvalidInput(
                f"repeating a live {prepared.type} Action needs goalRefs and a rationale of "
                f"{RATIONALE_MIN}+ characters"
            )
        live.add(key)
        new.append(prepared)

    unit = Unit(item, actions, at, by=by)
    record_plan(unit, plan.close_actions, plan.supersede_action_ids, new)
    unit.derive_status()
    return unit


def complete(
    item: wi.WorkItemState,
    actions: Mapping[UUID, act.ActionState],
    payload: Completion | Mapping[str, Any],
    *,
    at: datetime,
    by: Actor,
) -> Unit:
    completion: Completion = _parse(Completion, payload)
    if not modes.of(item).takes_plans:
        raise CommandRefused("Linear WorkItems complete through their deliver stage")
    if item.status not in wi.ACTIVE:
        raise CommandRefused(f"Cannot complete a WorkItem that is {item.status}")
    if item.stopped:
        raise CommandRefused(f"WorkItem is stopped by its budget ({item.stopped}); resume it first")
    criteria = item.acceptance_criteria
    if not criteria:
        raise CommandRefused("A WorkItem with no acceptance criteria cannot be completed")
    summary = completion.summary.strip()
    if not summary or len(summary) > SUMMARY_LIMIT:
        raise InvalidInput(f"summary is required and at most {SUMMARY_LIMIT} characters")
    results = completion.acceptance_results
    if [r.criterion for r in results] != list(criteria):
        raise InvalidInput("acceptanceResults must give one result per criterion, in order")
    cited: list[UUID] = []
    for result in results:
        if result.status != "passed" or not result.evidence_run_ids:
            raise InvalidInput(f"criterion {result.criterion!r} must be passed with evidence runs")
        cited.extend(r for r in result.evidence_run_ids if r not in cited)
    if not completion.evidence_run_ids or not set(cited) <= set(completion.evidence_run_ids):
        raise InvalidInput("evidenceRunIds must be non-empty and cover every cited Run")
    check_closures(completion.close_actions, actions)

    unit = Unit(item, actions, at, by=by)
    for close in completion.close_actions:
        unit.apply_action(
            act.close(unit.action(close.action_id), reason=close.reason.strip(), at=at, by=by)
        )
    unfinished = [a.id for a in unit.actions.values() if a.status in act.OPEN_STATUSES]
    if unfinished:
        raise CommandRefused(f"Unfinished Actions must be closed first: {unfinished}")

    goal = progress(unit.item, unit.actions)
    runs = {run.id: (action, run) for action in unit.actions.values() for run in action.runs}
    for run_id in completion.evidence_run_ids:
        found = runs.get(run_id)
        if found is None:
            raise CommandRefused(f"Run {run_id} does not belong to this WorkItem")
        action, run = found
        if not (
            action.result_run_id == run.id
            and run.generation == action.generation
            and run.spec_hash == action.spec_hash
            and run.contract_revision == item.contract_revision
            and action.contract_revision == item.contract_revision
            and is_proof(run, criteria)
        ):
            raise CommandRefused(f"Run {run_id} is not a current, canonical proof")
    if goal.remaining_criteria:
        raise CommandRefused(f"Criteria are not met: {list(goal.remaining_criteria)}")
    for result, progress_row in zip(results, goal.criteria, strict=True):
        listed = set(progress_row.evidence_run_ids)
        if not any(r in listed for r in result.evidence_run_ids):
            raise CommandRefused(
                f"criterion {result.criterion!r} cites no Run that goal progress lists for it"
            )
    if item.delivery_target is None:
        raise CommandRefused("The delivery target is unconfirmed")
    delivering = [r for r in completion.evidence_run_ids if r in goal.delivery.evidence_run_ids]
    if not delivering:
        raise CommandRefused("No evidence Run carries current, fresh delivery evidence")

    outputs: list[wi.ResultOutput] = []
    seen: set[tuple[str, str]] = set()
    for run_id in completion.evidence_run_ids:
        action, run = runs[run_id]
        for output in run.result.outputs if run.result else ():
            if output.is_negative or output.ref is None or (output.kind, output.ref) in seen:
                continue
            seen.add((output.kind, output.ref))
            outputs.append(
                wi.ResultOutput(
                    kind=output.kind,
                    label=output.label,
                    ref=output.ref,
                    status=output.status,
                    action_id=action.id,
                    run_id=run.id,
                )
            )
    responses: tuple[wi.ResultResponse, ...] = ()
    if item.delivery_target == "response":
        responses = tuple(
            wi.ResultResponse(
                run_id=run_id,
                summary=runs[run_id][1].result.summary,  # type: ignore[union-attr]
                evidence=tuple(e.label for e in runs[run_id][1].result.evidence),  # type: ignore[union-attr]
            )
            for run_id in delivering
        )
    unit.item_event(
        wi.WorkItemCompleted,
        final_result=wi.FinalResult(
            summary=summary,
            acceptance_results=tuple(
                wi.AcceptanceResult(
                    criterion=r.criterion, status="passed", evidence_run_ids=r.evidence_run_ids
                )
                for r in results
            ),
            evidence_run_ids=completion.evidence_run_ids,
            residual_risks=tuple(r.strip() for r in completion.residual_risks),
            outputs=tuple(outputs[:50]),
            responses=responses,
        ),
    )
    return unit
