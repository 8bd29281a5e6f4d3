"""Run commands (lifecycle.md 3.3 to 3.5): claim, renew, interrupt, defer, finish, recover.

The lease epoch and boot id fence workers; the aggregate version only guards
the write. Linear items follow the stage list; dynamic items derive their
status from their Actions after every change.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Literal
from uuid import UUID

from workcenter.domain import action as act
from workcenter.domain import modes
from workcenter.domain import resource_ledger as rl
from workcenter.domain import work_item as wi
from workcenter.domain.action_input import refuse_unconsumed
from workcenter.domain.actor import Actor
from workcenter.domain.errors import CommandRefused, StaleRun
from workcenter.domain.model import Emitter
from workcenter.domain.outcome import NormalisedOutcome, RunReport, normalise
from workcenter.domain.unit import Unit

DEFAULT_LEASE = timedelta(seconds=60)
RECOVERED_REASON = "process or lease ended before a terminal outcome"


def claimable(item: wi.WorkItemState, action: act.ActionState) -> str | None:
    """Why ``action`` cannot be claimed now, or None when it can."""
    if action.status != "ready" or action.current_run_id is not None:
        return f"Action is {action.status}"
    if item.stopped:
        return f"WorkItem is stopped by its budget ({item.stopped})"
    return modes.of(item).why_not_claimable(item, action)


def claim(
    item: wi.WorkItemState,
    action: act.ActionState,
    ledger: rl.LedgerState,
    *,
    worker: str,
    boot_id: str,
    lease: timedelta,
    at: datetime,
    by: Actor,
    client_claim_id: str | None = None,
) -> Unit:
    """Start a Run, unless the ledger has no attempt left for the Action.

    Then the Unit holds the stop instead (the item needs attention) and no Run:
    the stop must be saved, so it is returned rather than raised.
    """
    refusal = claimable(item, action)
    if refusal:
        raise CommandRefused(f"Cannot claim Action {action.id}: {refusal}")
    unit = Unit(item, {action.id: action}, at, ledger, by=by)
    stop = rl.can_attempt(
        ledger,
        action_id=action.id,
        attempts=action.counted_attempts,
        original_max_attempts=action.max_attempts,
        at=at,
        by=by,
    )
    if stop is not None:
        unit.apply_ledger(stop)
        return unit
    unit.apply_action(
        act.claim(
            action,
            worker=worker,
            boot_id=boot_id,
            lease=lease,
            at=at,
            by=by,
            client_claim_id=client_claim_id,
        )
    )
    unit.set_status("running", action.id)
    return unit


def _item_ended(item: wi.WorkItemState, ref: act.RunRef) -> str:
    """Why a live Run's command is refused when its WorkItem no longer runs work."""
    return f"Run {ref.run_id} no longer runs: its WorkItem is {item.status}"


def interrupt(
    item: wi.WorkItemState,
    action: act.ActionState,
    ref: act.RunRef,
    *,
    reason: str,
    at: datetime,
    by: Actor,
    progress: act.RunProgress | None = None,
) -> Unit:
    """The worker gives the Run up (LRF, expiry not checked), recording the Run's
    final ``progress`` (response, summary, counters) in the same write that
    releases the lease."""
    run = act.live_run(action, ref, at=None)
    if item.status not in wi.ACTIVE:
        raise StaleRun(_item_ended(item, ref))
    unit = Unit(item, {action.id: action}, at, by=by)
    unit.apply_action(
        act.interrupt(action, run, reason=reason or "interrupted", at=at, by=by, progress=progress)
    )
    modes.of(unit.item).after_run_ended(unit, action)
    return unit


def defer(
    item: wi.WorkItemState,
    action: act.ActionState,
    ref: act.RunRef,
    *,
    at: datetime,
    by: Actor,
    reason: str = act.DEFERRED_REASON,
) -> Unit:
    """The Run cannot start, its workspace busy or its claim unanswered (LRF+): it ends
    as deferred, its attempt is given back, and the Action is ready to claim again."""
    run = act.live_run(action, ref, at=at)
    if item.status not in wi.ACTIVE:
        raise StaleRun(_item_ended(item, ref))
    unit = Unit(item, {action.id: action}, at, by=by)
    emit: Emitter[act.ActionEvent] = Emitter.after(action, at, by)
    emit(
        act.RunDeferred,
        run_id=run.id,
        reason=reason,
        attempt=max(0, action.attempt - 1),
    )
    unit.apply_action(emit.events)
    modes.of(unit.item).after_run_ended(unit, action)
    return unit


def finish(
    item: wi.WorkItemState,
    action: act.ActionState,
    ref: act.RunRef,
    report: RunReport | dict[str, Any],
    *,
    at: datetime,
    by: Actor,
) -> Unit:
    """Record a Run's terminal outcome (LRF+), then move the WorkItem on."""
    normalised = normalise(report, item=item, action=action)
    run = act.live_run(action, ref, at=at)
    if item.status not in wi.ACTIVE:
        raise StaleRun(_item_ended(item, ref))
    refuse_unconsumed(action)
    unit = Unit(item, {action.id: action}, at, by=by)
    if normalised.contract_patch is not None:
        _apply_patch(unit, normalised)
    unit.apply_action(
        act.finish(
            action,
            run,
            outcome=normalised.outcome,
            result=normalised.result,
            at=at,
            by=by,
            report_digest=normalised.digest,
        )
    )
    modes.of(item).after_finish(unit, unit.action(action.id), normalised)
    return unit


def _apply_patch(unit: Unit, normalised: NormalisedOutcome) -> None:
    """A triage patch refines title, goal and criteria in the same write (never the target)."""
    patch = normalised.contract_patch
    assert patch is not None
    item = unit.item
    if patch.title and patch.title != item.title:
        unit.item_event(wi.TitleChanged, title=patch.title)
    goal = patch.goal or item.goal
    criteria = (
        patch.acceptance_criteria
        if patch.acceptance_criteria is not None
        else item.acceptance_criteria
    )
    changed = tuple(
        name
        for name, new, old in (
            ("goal", goal, item.goal),
            ("acceptance_criteria", criteria, item.acceptance_criteria),
        )
        if new != old
    )
    if changed:
        unit.item_event(
            wi.ContractRefined,
            goal=goal,
            acceptance_criteria=criteria,
            delivery_target=item.delivery_target,
            contract_revision=item.contract_revision + 1,
            changed_fields=changed,
        )


def recover(
    item: wi.WorkItemState,
    action: act.ActionState,
    *,
    run_id: UUID,
    at: datetime,
    by: Actor,
) -> Unit:
    """End a Run whose process or lease is gone (lifecycle.md 3.5)."""
    run = action.run(run_id)
    if run is None or run.status != "running":
        raise CommandRefused(f"Run {run_id} is not running")
    unit = Unit(item, {action.id: action}, at, by=by)
    current = (
        action.status == "running"
        and action.current_run_id == run.id
        and action.lease_epoch == run.lease_epoch
        and item.status in wi.ACTIVE
    )
    if current:
        unit.apply_action(act.interrupt(action, run, reason=RECOVERED_REASON, at=at, by=by))
        modes.of(unit.item).after_run_ended(unit, action)
        return unit
    status: Literal["cancelled", "superseded"] = (
        "cancelled" if item.status == "cancelled" else "superseded"
    )
    unit.apply_action(
        act.interrupt(
            action,
            run,
            reason="no longer owns the current Action",
            at=at,
            by=by,
            run_status=status,
        )
    )
    modes.of(item).after_stale_run_ended(unit)
    return unit


def is_dead(run: act.Run, *, at: datetime) -> bool:
    """A recovery candidate: a running Run whose lease expired (ADR-0048).

    Neither its worker's name nor its boot id is evidence that its process is gone:
    two live processes may share a name, and any process may hold Runs of any boot.
    Only an unrenewed lease proves the owner stopped working on it.
    """
    return run.status == "running" and run.expires_at <= at
