"""The rules a Coordinator decision must pass, shared by parse and apply (coordinator.md
4.3-4.7, 9.1-9.4).

Every check takes the stage it runs at: the same broken rule is a ``DecisionInvalid``
at parse (the provider turn is rejected and the model gets one corrective retry) and
a ``DecisionRefused`` at apply (the turn fails). The planning rules themselves live
in ``planning.py`` and the contract refinement in ``lifecycle.py``; this module
decides which of them a decision kind runs, on which state, and at which stage.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Literal, NoReturn
from uuid import UUID

from pydantic import ValidationError

from workcenter.domain import action as act
from workcenter.domain import bounds, inputs, lifecycle, modes, planning
from workcenter.domain import resource_ledger as rl
from workcenter.domain import work_item as wi
from workcenter.domain.actor import Actor
from workcenter.domain.decision_models import (
    ActionBrief,
    ContractPatch,
    Decision,
    GoalRefs,
    TurnAuthority,
)
from workcenter.domain.errors import (
    CommandRefused,
    DecisionInvalid,
    DecisionRefused,
    InvalidInput,
)
from workcenter.domain.model import Immutable
from workcenter.domain.unit import Unit

Stage = Literal["parse", "apply"]
PATCH_KINDS: tuple[str, ...] = ("create_actions", "request_human")
MAX_GUIDANCE = 8
# A repeat is the same type and objective as any Action that still stands: open or
# completed (9.2). Closed, superseded and cancelled Actions are history.
REPEAT_STATUSES: frozenset[str] = act.OPEN_STATUSES | {"completed"}


def refuse(stage: Stage, message: str) -> NoReturn:
    if stage == "parse":
        raise DecisionInvalid(message)
    raise DecisionRefused(message)


@contextmanager
def at_stage(stage: Stage) -> Iterator[None]:
    """The planning rules' own refusals, re-raised as the stage's refusal."""
    try:
        yield
    except (InvalidInput, CommandRefused) as error:
        if isinstance(error, DecisionInvalid | DecisionRefused):
            raise
        refuse(stage, str(error))


# --- authority and the contract patch (4.7, 9.3) ------------------------------------


class Patch(Immutable):
    """A normalised contract patch: None leaves a field as it is."""

    title: str | None = None
    goal: str | None = None
    acceptance_criteria: tuple[str, ...] | None = None
    delivery_target: wi.DeliveryTarget | None = None

    def contract(self, item: wi.WorkItemState) -> wi.Contract:
        return wi.Contract(
            title=item.title if self.title is None else self.title,
            goal=item.goal if self.goal is None else self.goal,
            acceptance_criteria=(
                item.acceptance_criteria
                if self.acceptance_criteria is None
                else self.acceptance_criteria
            ),
            delivery_target=(
                item.delivery_target if self.delivery_target is None else self.delivery_target
            ),
        )


def check_authority(decision: Decision, authority: TurnAuthority, stage: Stage) -> None:
    if decision.kind not in authority.allowed_kinds:
        turn = "an automatic" if authority.automatic else "this"
        refuse(stage, f"{decision.kind} is not allowed in {turn} turn")
    patch = decision.contract_patch
    if not authority.user_originated and patch is not None and patch.present_keys:
        # The mere presence of a key refuses, even null or [] (4.7).
        refuse(
            stage,
            "only a turn a user began may change the contract; contractPatch names "
            + ", ".join(sorted(patch.present_keys)),
        )


def normalise_patch(patch: ContractPatch | None, stage: Stage) -> Patch | None:
    """4.7: titles and goals trimmed (empty ignored), criteria a list (trimmed, empties
    dropped), a known delivery target; an empty patch is none."""
    if patch is None:
        return None
    criteria: tuple[str, ...] | None = None
    raw = patch.acceptance_criteria
    if raw is not None:
        if not isinstance(raw, list | tuple) or not all(isinstance(c, str) for c in raw):
            refuse(stage, "contractPatch.acceptanceCriteria must be a list of texts")
        criteria = tuple(c.strip()[: bounds.CRITERION] for c in raw if c.strip())
        if len(criteria) > bounds.CRITERIA:
            refuse(stage, f"a contract holds at most {bounds.CRITERIA} acceptance criteria")
    target = patch.delivery_target
    if target is not None and target not in wi.DELIVERY_TARGETS:
        refuse(
            stage,
            f"contractPatch.deliveryTarget must be one of {', '.join(wi.DELIVERY_TARGETS)}",
        )
    normalised = Patch(
        title=(patch.title or "").strip()[: bounds.TITLE] or None,
        goal=(patch.goal or "").strip()[: bounds.GOAL] or None,
        acceptance_criteria=criteria,
        delivery_target=target,
    )
    return None if normalised == Patch() else normalised


def check_patch_kind(decision: Decision, patch: Patch | None) -> None:
    """At apply only: at parse a patch on another kind is dropped instead (4.7)."""
    if patch is None:
        return
    if decision.kind not in PATCH_KINDS:
        refuse("apply", f"{decision.kind} cannot carry a contract patch")
    if patch.delivery_target is not None and decision.kind != "request_human":
        refuse("apply", "only request_human may set the delivery target")


def refined(
    item: wi.WorkItemState,
    actions: Mapping[UUID, act.ActionState],
    patch: Patch | None,
    *,
    at: datetime,
    by: Actor,
    ledger: rl.LedgerState | None = None,
) -> tuple[Unit, bool]:
    """A unit holding the refinement ``patch`` makes (if any) and whether the contract
    changed: a change supersedes every open Action in the same write (4.7, 9.4)."""
    unit = Unit(item, actions, at, ledger, by=by)
    if patch is None:
        return unit, False
    return unit, bool(lifecycle.refine_contract(unit, patch.contract(item)))


# --- create_actions (4.3, 9.2) --------------------------------------------------------


def _closes(decision: Decision) -> list[planning.CloseAction]:
    return [
        planning.CloseAction(action_id=c.action_id, reason=c.reason)
        for c in decision.close_actions or ()
    ]


def _goal_refs(refs: GoalRefs) -> planning.GoalRefs:
    try:
        return planning.GoalRefs(
            criteria=refs.criteria or (),
            blocker_action_ids=refs.blocker_action_ids or (),
            delivery=bool(refs.delivery),
        )
    except ValidationError as error:  # past the bounds no criterion or Action can have
        raise InvalidInput(f"goalRefs: {inputs.describe(error)}") from None


def _rationale(brief: ActionBrief) -> str:
    own = (brief.rationale or "").strip()
    inside = (brief.goal_refs.rationale or "").strip() if brief.goal_refs else ""
    return (own or inside)[: bounds.RATIONALE]


def _spec(brief: ActionBrief) -> planning.ActionSpec:
    return planning.ActionSpec(
        type=(brief.type or "custom")[: bounds.ACTION_TYPE],
        objective=brief.objective,
        approach=brief.approach,
        expected_outcome=brief.expected_outcome,
        workspace_mode=brief.workspace_mode or "shared",
        max_attempts=brief.max_attempts,
        source_action_ids=brief.source_action_ids or (),
    )


def check_create_actions(
    decision: Decision, unit: Unit, changed: bool, stage: Stage
) -> list[planning.PreparedAction]:
    """Every 4.3 rule on the state after the refinement (``unit``), the Actions to add."""
    briefs = decision.actions or ()
    closes = _closes(decision)
    supersedes = decision.supersede_action_ids or ()
    item, actions = unit.item, unit.actions
    with at_stage(stage):
        planning.refuse_unless_plannable(item, len(briefs))
        if decision.work_item_type is not None and not planning.slug(decision.work_item_type):
            raise InvalidInput("workItemType must hold letters or digits")
        if not changed:
            # A contract change supersedes all open work, so both lists are moot then.
            planning.check_closures(closes, actions)
            planning.check_supersedes(supersedes, closes, actions)
            if stage == "apply" and item.entries("running"):
                raise CommandRefused("Cannot plan Actions while a Run is active")
        goal = planning.progress(item, actions)
        planning.refuse_if_goal_met(goal)
        standing = planning.repeat_keys(actions, REPEAT_STATUSES)
        prepared: list[planning.PreparedAction] = []
        for brief in briefs:
            # On the raw mode (absent counts as mutating), which the prepared one
            # follows: an absent or unknown mode is prepared as shared.
            planning.refuse_mutating_without_target(item, brief.workspace_mode)
            action = planning.prepare(_spec(brief), _rationale(brief))
            planning.check_sources(item, action, actions)
            if brief.goal_refs is not None:
                planning.check_goal_refs(_goal_refs(brief.goal_refs), goal)
            key = (action.type, action.brief.objective)
            if key in standing and (
                brief.goal_refs is None or len(action.brief.rationale) < planning.RATIONALE_MIN
            ):
                raise InvalidInput(
                    f"repeating the {action.type} Action {action.brief.objective!r} needs "
                    f"goalRefs and a rationale of {planning.RATIONALE_MIN}+ characters"
                )
            standing.add(key)
            prepared.append(action)
    return prepared


def record_create_actions(
    decision: Decision, unit: Unit, changed: bool, prepared: Sequence[planning.PreparedAction]
) -> None:
    closes = () if changed else _closes(decision)
    supersedes = () if changed else decision.supersede_action_ids or ()
    first = planning.record_plan(unit, closes, supersedes, prepared)
    unit.set_status("ready", first.id)  # the first created Action is the current one (9.2)


# --- guide_actions (4.4) ----------------------------------------------------------------


def check_guidance(
    decision: Decision,
    item: wi.WorkItemState,
    actions: Mapping[UUID, act.ActionState],
    stage: Stage,
    ledger: rl.LedgerState | None = None,
) -> list[tuple[act.ActionState, str]]:
    """1 to 8 unique targets; unfinished at parse (a running one passes), ready, waiting
    or failed at apply, and with an attempt left by the ``ledger`` (ADR-0130). One miss
    refuses all."""
    entries = decision.guidance or ()
    if not 1 <= len(entries) <= MAX_GUIDANCE:
        refuse(stage, f"guide_actions needs 1 to {MAX_GUIDANCE} guidance entries")
    ids = [e.action_id for e in entries]
    if len(set(ids)) != len(ids):
        refuse(stage, "guidance names an Action twice")
    allowed = act.OPEN_STATUSES if stage == "parse" else frozenset({"ready", "waiting", "failed"})
    targets: list[tuple[act.ActionState, str]] = []
    for entry in entries:
        target = actions.get(entry.action_id)
        instruction = entry.instruction.strip()
        if not instruction:
            refuse(stage, f"guidance for {entry.action_id} needs an instruction")
        if target is None or target.work_item_id != item.id or target.status not in allowed:
            status = target.status if target is not None else "unknown"
            refuse(stage, f"Action {entry.action_id} is {status}; it cannot be guided now")
        if ledger is not None and lifecycle.no_attempt_left(item, target, ledger):
            # Taken, it would stop the item at the Action's next claim.
            refuse(
                stage,
                f"Action {entry.action_id} has no attempt left: ask the human to extend its"
                " attempts (request_human)",
            )
        targets.append((target, instruction))
    return targets


def record_guidance(unit: Unit, targets: Sequence[tuple[act.ActionState, str]]) -> None:
    for target, instruction in targets:
        entry = act.ContextEntry(kind="guidance", text=instruction)
        modes.of(unit.item).next_generation(unit, unit.action(target.id), "guided", (entry,))


# --- closures of complete (4.6, checked at parse) -------------------------------------------


def check_complete_closures(
    decision: Decision, actions: Mapping[UUID, act.ActionState], stage: Stage
) -> None:
    with at_stage(stage):
        planning.check_closures(_closes(decision), actions)


def completion_payload(decision: Decision) -> dict[str, object]:
    """The decision's completion in the shape ``planning.complete`` validates (4.6)."""
    completion = decision.completion
    if completion is None:
        refuse("apply", "complete needs a completion")
    return {
        "summary": completion.summary or "",
        "acceptanceResults": [
            {
                "criterion": r.criterion,
                "status": r.status,
                "evidenceRunIds": list(r.evidence_run_ids or ()),
            }
            for r in completion.acceptance_results or ()
        ],
        "evidenceRunIds": list(completion.evidence_run_ids or ()),
        "residualRisks": list(completion.residual_risks or ()),
        "closeActions": [
            {"actionId": c.action_id, "reason": c.reason} for c in decision.close_actions or ()
        ],
    }
