"""A new generation of an Action, and its end: the decisions that make an Action's
earlier Runs stop being current (guidance, a retry, a resume, input to a ready
Action) or take it out of the plan (superseded, cancelled).

Each returns the Action's events; the Action aggregate (``action``) folds them.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from workcenter.domain import action as act
from workcenter.domain.actor import Actor
from workcenter.domain.model import Emitter


def reset(
    state: act.ActionState,
    *,
    reason: Literal["guided", "retried", "resumed", "input"],
    add_context: tuple[act.ContextEntry, ...],
    contract_revision: int,
    at: datetime,
    by: Actor,
    keep_inputs: bool = False,
) -> list[act.ActionEvent]:
    """A new generation: earlier Runs stop being current; user input entries are
    dropped unless ``keep_inputs`` (resume keeps accepted inputs)."""
    kept = state.context if keep_inputs else tuple(e for e in state.context if e.kind != "input")
    context = kept + add_context
    running = state.current_run_id if state.status == "running" else None
    emit: Emitter[act.ActionEvent] = Emitter.after(state, at, by)
    emit(
        act.ActionReset,
        reason=reason,
        context=context,
        contract_revision=contract_revision,
        generation=state.generation + 1,
        spec_hash=act.spec_hash(
            type=state.type,
            brief=state.brief,
            workspace_mode=state.workspace_mode,
            max_attempts=state.max_attempts,
            context=context,
            contract_revision=contract_revision,
        ),
        lease_epoch=state.lease_epoch + 1 if running else state.lease_epoch,
        ended_run_id=running,
    )
    return emit.events


def invalidate(
    state: act.ActionState,
    *,
    status: Literal["superseded", "cancelled"],
    reason: str,
    at: datetime,
    by: Actor,
) -> list[act.ActionEvent]:
    """Invalidate(X): only open Actions are touched; others yield no event."""
    if state.status not in act.OPEN_STATUSES:
        return []
    emit: Emitter[act.ActionEvent] = Emitter.after(state, at, by)
    emit(
        act.ActionInvalidated,
        status=status,
        reason=reason,
        lease_epoch=state.lease_epoch + 1,
        ended_run_id=state.current_run_id if state.status == "running" else None,
    )
    return emit.events


def supersede_cancelled(
    state: act.ActionState, *, reason: str, at: datetime, by: Actor
) -> list[act.ActionEvent]:
    """Dynamic resume: a cancelled Action becomes superseded history."""
    if state.status != "cancelled":
        return []
    emit: Emitter[act.ActionEvent] = Emitter.after(state, at, by)
    emit(
        act.ActionInvalidated,
        status="superseded",
        reason=reason,
        lease_epoch=state.lease_epoch + 1,
        ended_run_id=None,
    )
    return emit.events
