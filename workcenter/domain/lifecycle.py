"""WorkItem lifecycle commands (lifecycle.md 3.1, 3.2, 3.6): create, update the
contract, start, cancel, resume, retry, guide.

Each command is a pure function of the states it is given; it either raises a
typed refusal before any event exists or returns a Unit of events to save in
one write. Each declares the event types it conflicts with: a caller's
expected version is refused only if an event of that class was recorded after
it (spec README, "conflict classes").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Literal
from uuid import UUID

from workcenter.domain import action as act
from workcenter.domain import action_generation as generation
from workcenter.domain import inputs, modes
from workcenter.domain import resource_ledger as rl
from workcenter.domain import work_item as wi
from workcenter.domain.actor import Actor
from workcenter.domain.errors import CommandRefused, InvalidInput
from workcenter.domain.model import DomainEvent
from workcenter.domain.modes import prior_result
from workcenter.domain.unit import Unit
from workcenter.domain.workflow import Stage

# A title is part of the contract: two edits from the same version have one winner
# (ADR-0004), whichever fields each changed.
UPDATE_CONFLICTS: tuple[type[DomainEvent], ...] = (
    wi.TitleChanged,
    wi.ContractRefined,
    wi.WorkItemCancelled,
    wi.WorkItemCompleted,
)
START_CONFLICTS: tuple[type[DomainEvent], ...] = (wi.WorkItemStarted, wi.WorkItemCancelled)
# Resume also checks the ledger version the user saw against rl.CONTROL_EVENTS.
RESUME_CONFLICTS: tuple[type[DomainEvent], ...] = (
    wi.ContractRefined,
    wi.WorkItemCancelled,
    wi.WorkItemResumed,
    wi.WorkItemCompleted,
)
# A cancel naming the version its caller saw (over HTTP, If-Match) conflicts like a resume.
CANCEL_CONFLICTS: tuple[type[DomainEvent], ...] = RESUME_CONFLICTS
# Retry and guidance act on one Action as the user saw it: its generation is
# checked exactly, and the item conflicts on contract or lifecycle changes.
ACTION_INPUT_CONFLICTS: tuple[type[DomainEvent], ...] = RESUME_CONFLICTS


def stripped(text: object) -> str:
    """User text as the event records it; the service refused it first if it was too long
    (docs/limits.md), so nothing is cut here."""
    return text.strip() if isinstance(text, str) else ""


def invalidate_open(unit: Unit, status: Literal["superseded", "cancelled"], reason: str) -> None:
    for action in list(unit.actions.values()):
        unit.apply_action(
            generation.invalidate(action, status=status, reason=reason, at=unit.at, by=unit.by)
        )


def _open_actions(item: wi.WorkItemState, actions: Mapping[UUID, act.ActionState]) -> None:
    missing = [e.action_id for e in item.entries(*act.OPEN_STATUSES) if e.action_id not in actions]
    if missing:
        raise ValueError(f"the command needs every open Action loaded; missing {missing}")


def create(
    *,
    work_item_id: UUID,
    mode: wi.Mode,
    contract: wi.Contract,
    stages: Sequence[str | Mapping[str, object] | Stage] | None,
    start: bool,
    at: datetime,
    by: Actor,
    limits: rl.Limits | None = None,
) -> Unit:
    """``stages`` (linear only) are names or ``{type, maxAttempts}`` objects."""
    workflow = modes.policy(mode).workflow(stages)
    unit = Unit.new_item(
        wi.create(
            work_item_id=work_item_id,
            mode=mode,
            contract=contract,
            stages=tuple(s.type for s in workflow),
            stage_max_attempts=tuple(s.max_attempts for s in workflow),
            at=at,
            by=by,
            started=start,
        ),
        at,
        by=by,
    )
    unit.apply_ledger(rl.open_ledger(work_item_id, at, limits, by=by))
    if start:
        _start(unit, recorded=True)
    return unit


def _start(unit: Unit, *, recorded: bool = False) -> None:
    """Start the item; ``recorded`` when its creation already says it started (ADR-0046)."""
    if not recorded:
        unit.item_event(wi.WorkItemStarted)
    policy = modes.of(unit.item)
    policy.begin(unit)
    item = unit.item
    policy.wake(
        unit,
        "work_item_started",
        f"dynamic:start:{item.id}:{item.contract_revision}",
        contract_revision=item.contract_revision,
    )


def start(
    item: wi.WorkItemState, actions: Mapping[UUID, act.ActionState], at: datetime, by: Actor
) -> Unit:
    wi.refuse_if_terminal(item, "start")
    unit = Unit(item, actions, at, by=by)
    current = actions.get(item.current_action_id) if item.current_action_id else None
    if current is not None and current.status == "ready":
        return unit  # already started: a no-op (both modes, lifecycle.md 3.1)
    if item.status in ("ready", "running"):
        raise CommandRefused(f"WorkItem is {item.status}: it was started already")
    if item.status != "draft":
        raise CommandRefused(
            f"WorkItem is {item.status}; it must be resumed with retry (of a failed or"
            " waiting Action), or with resume after a cancel or a budget stop"
        )
    _start(unit)
    return unit


def update_contract(
    item: wi.WorkItemState,
    actions: Mapping[UUID, act.ActionState],
    contract: wi.Contract,
    at: datetime,
    by: Actor,
) -> Unit:
    """A contract change (goal, criteria, delivery target) supersedes the open work."""
    wi.refuse_if_terminal(item, "update")
    unit = Unit(item, actions, at, by=by)
    changed = refine_contract(unit, contract)
    if not changed:
        return unit
    policy = modes.of(item)
    policy.restart(unit, item)
    if item.status != "draft":
        # A direct edit wakes the Coordinator; a decision's own refinement does not.
        revision = unit.item.contract_revision
        policy.wake(
            unit,
            "contract_changed",
            f"dynamic:contract:{item.id}:{revision}",
            contract_revision=revision,
            changed_fields=list(changed),
        )
    return unit


def refine_contract(unit: Unit, contract: wi.Contract) -> tuple[str, ...]:
    """Record ``contract`` on the unit's item: a title alone is renamed; a change of goal,
    criteria or delivery target is a new contract revision that supersedes every open
    Action in the same write (coordinator.md 4.7). Returns the changed contract fields;
    the caller decides what the item does next."""
    item = unit.item
    _open_actions(item, unit.actions)
    if contract.title != item.title:
        unit.item_event(wi.TitleChanged, title=contract.title)
    changed = tuple(
        name
        for name in ("goal", "acceptance_criteria", "delivery_target")
        if getattr(contract, name) != getattr(item, name)
    )
    if not changed:
        return ()
    unit.item_event(
        wi.ContractRefined,
        goal=contract.goal,
        acceptance_criteria=contract.acceptance_criteria,
        delivery_target=contract.delivery_target,
        contract_revision=item.contract_revision + 1,
        changed_fields=changed,
    )
    invalidate_open(unit, "superseded", "contract changed")
    return changed


def cancel(
    item: wi.WorkItemState,
    actions: Mapping[UUID, act.ActionState],
    at: datetime,
    reason: str,
    by: Actor,
) -> Unit:
    if item.status == "done":
        raise CommandRefused("Completed WorkItem cannot be cancelled")
    unit = Unit(item, actions, at, by=by)
    if item.status == "cancelled":
        return unit
    _open_actions(item, actions)
    invalidate_open(unit, "cancelled", reason or "work item cancelled")
    unit.item_event(wi.WorkItemCancelled, reason=stripped(reason))
    return unit


def resume(
    item: wi.WorkItemState,
    actions: Mapping[UUID, act.ActionState],
    ledger: rl.LedgerState,
    at: datetime,
    by: Actor,
) -> Unit:
    """Resume a cancelled item, or one its ledger stopped (resource-ledger.md 3).

    A stopped item's open work is cancelled first, then it resumes like a
    cancelled one, with the stop cleared in the same write. Refused while a
    budget is still spent. ``actions`` must hold the open and cancelled Actions,
    and the Action that stopped the item, if one did.
    """
    # A done item keeps a late overrun's stop (ADR-0008), which blocks only spending: its
    # final result is written once, so it is never resumed (ADR-0133).
    if item.status == "done" or (item.status != "cancelled" and not item.stopped):
        raise CommandRefused(
            f"WorkItem is {item.status}; only a cancelled or stopped WorkItem that is not"
            " done can be resumed"
        )
    stopping = _stopping_action(ledger, actions.values())
    # Every resume, of a cancelled item too, clears retry_after and moves the control version.
    ledger_events = rl.resume(
        ledger,
        stopping_action_can_attempt=stopping is None
        or not ledger.attempts_needed(stopping.counted_attempts, stopping.max_attempts),
        at=at,
        by=by,
    )
    unit = Unit(item, actions, at, ledger, by=by)
    if item.status != "cancelled":
        invalidate_open(unit, "cancelled", "stopped by its budget")
    unit.apply_ledger(ledger_events)
    unit.item_event(wi.WorkItemResumed)
    cancelled = sorted(
        (a for a in unit.actions.values() if a.status == "cancelled"), key=lambda a: a.sequence
    )
    policy = modes.of(item)
    policy.resume(unit, cancelled)
    # Pre-stop decisions can never apply later (coordinator.md 6.4).
    unit.retire_thinking_turns()
    assert unit.ledger is not None
    control = unit.ledger.control_version
    policy.wake(
        unit, "work_item_resumed", f"dynamic:resume:{item.id}:{control}", ledger_control=control
    )
    return unit


def _stopping_action(
    ledger: rl.LedgerState, actions: Iterable[act.ActionState]
) -> act.ActionState | None:
    action_id = stopping_action_id(ledger)
    return next((a for a in actions if a.id == action_id), None) if action_id else None


def resume_needs(ledger: rl.LedgerState, actions: Iterable[act.ActionState]) -> dict[str, int]:
    """The least addition to each limit before a resume is taken, by limit name in the
    order of the limits: the budgets still spent and, after an attempts stop, its
    Action's attempts (``actions`` must hold it). Empty when a resume is taken."""
    needs = ledger.resume_needs()
    stopping = _stopping_action(ledger, actions)
    if stopping is not None:
        attempts = ledger.attempts_needed(stopping.counted_attempts, stopping.max_attempts)
        if attempts:
            needs["max_action_attempts"] = attempts
    return {name: needs[name] for name in rl.LIMIT_NAMES if name in needs}


def stopping_action_id(ledger: rl.LedgerState) -> UUID | None:
    """The Action whose attempts stopped the item, which resume must load."""
    reason = ledger.stop_reason
    if reason is None or reason.code != "action_attempts_exhausted":
        return None
    value = reason.details.get("action_id")
    return UUID(value) if isinstance(value, str) else None


def _target(
    item: wi.WorkItemState,
    actions: Mapping[UUID, act.ActionState],
    action_id: UUID,
    expected_generation: int | None,
    what: str,
) -> act.ActionState:
    action = actions.get(action_id)
    if action is None or action.work_item_id != item.id:
        raise CommandRefused(f"Action {action_id} does not belong to WorkItem {item.id}")
    if expected_generation is not None and action.generation != expected_generation:
        raise CommandRefused(f"Action changed before {what} was applied")
    return action


def _next_generation(
    unit: Unit,
    target: act.ActionState,
    ledger: rl.LedgerState,
    reason: Literal["guided", "retried"],
    entries: tuple[act.ContextEntry, ...],
) -> Unit:
    """The mode's next attempt at ``target`` (see ``ModePolicy.next_generation``).

    Refused up front when it would run the Action again with no attempt left: taken,
    it would only stop the item at its next claim (ADR-0091)."""
    if no_attempt_left(unit.item, target, ledger):
        verb = "retry" if reason == "retried" else "guide it"
        raise CommandRefused(
            f"Action {target.sequence} has no attempt left (used {target.counted_attempts} "
            f"of {ledger.effective_max_attempts(target.max_attempts)}): extend"
            f" max_action_attempts first, then {verb}"
        )
    modes.of(unit.item).next_generation(unit, target, reason, entries)
    return unit


def no_attempt_left(
    item: wi.WorkItemState, target: act.ActionState, ledger: rl.LedgerState
) -> bool:
    """Whether a retry, an answer or guidance of ``target`` would be refused for its
    attempts: its mode runs it again as itself (a linear item plans a new Action, with
    attempts of its own), and the ledger allows it no more."""
    allowed = ledger.effective_max_attempts(target.max_attempts)
    return modes.of(item).next_generation_reuses_attempts and target.counted_attempts >= allowed


def retry(
    item: wi.WorkItemState,
    actions: Mapping[UUID, act.ActionState],
    ledger: rl.LedgerState,
    *,
    action_id: UUID,
    expected_generation: int | None,
    answer: str,
    at: datetime,
    by: Actor,
) -> Unit:
    """Retry a waiting or failed Action with the previous Run as context."""
    if item.status not in modes.of(item).retry_item_statuses:
        raise CommandRefused(f"WorkItem is {item.status}; it does not need retry")
    target = _target(item, actions, action_id, expected_generation, "input")
    if target.status not in ("waiting", "failed"):
        raise CommandRefused(f"Action is {target.status}; only waiting or failed Actions retry")
    answer = stripped(answer)
    # An answer of zero-width characters shows nothing to the Run that asked.
    if target.status == "waiting" and not inputs.visible(answer):
        raise InvalidInput("a waiting Action needs an answer to retry")
    entries = tuple(
        e
        for e in (
            prior_result(target, answer),
            act.ContextEntry(kind="input", text=answer) if answer else None,
        )
        if e is not None
    )
    return _next_generation(Unit(item, actions, at, by=by), target, ledger, "retried", entries)


def guide(
    item: wi.WorkItemState,
    actions: Mapping[UUID, act.ActionState],
    ledger: rl.LedgerState,
    *,
    action_id: UUID,
    expected_generation: int | None,
    guidance: str,
    at: datetime,
    by: Actor,
) -> Unit:
    """Give an Action guidance: a new generation (dynamic) or a replacement (linear)."""
    guidance = stripped(guidance)
    if not inputs.visible(guidance):
        raise InvalidInput(
            "guidance text is required" + (" (it shows nothing)" if guidance else "")
        )
    policy = modes.of(item)
    if item.status not in policy.guidance_item_statuses:
        raise CommandRefused(f"WorkItem is {item.status}; no active Action for guidance")
    target = _target(item, actions, action_id, expected_generation, "guidance")
    if target.status not in policy.guidable_statuses or (
        policy.current_action_only and item.current_action_id != target.id
    ):
        raise CommandRefused(f"Action is {target.status}; no active Action for guidance")
    entry = act.ContextEntry(kind="guidance", text=guidance)
    unit = Unit(item, actions, at, by=by)
    return _next_generation(unit, target, ledger, "guided", (entry,))
