"""User input on one Action (lifecycle.md 3.2): a new generation for a ready
Action, or a message queued for the Run of a running one.

Queued input is the Run's to consume: the Run cannot finish while input queued
for its generation is unconsumed (the input gate), so a user's message is never
silently lost behind an outcome computed without it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from uuid import UUID

from workcenter.domain import action as act
from workcenter.domain import action_generation as generation
from workcenter.domain import inputs, modes
from workcenter.domain import work_item as wi
from workcenter.domain.actor import Actor
from workcenter.domain.errors import CommandRefused, InvalidInput
from workcenter.domain.lifecycle import ACTION_INPUT_CONFLICTS
from workcenter.domain.model import DomainEvent, Emitter
from workcenter.domain.run import INPUT_LIMIT
from workcenter.domain.unit import Unit

# Input acts on the Action as the user saw it (its generation, and the Run if the
# user names one, are checked exactly) and conflicts with what retry and guidance do.
INPUT_CONFLICTS: tuple[type[DomainEvent], ...] = ACTION_INPUT_CONFLICTS


def input_text(text: object) -> str:
    """Trimmed input text; empty or over-long text is refused, never cut."""
    return inputs.text(text, "input text", INPUT_LIMIT, required=True)


def add_input(
    item: wi.WorkItemState,
    actions: Mapping[UUID, act.ActionState],
    *,
    action_id: UUID,
    input_id: UUID,
    text: str,
    expected_generation: int,
    expected_run_id: UUID | None,
    at: datetime,
    by: Actor,
) -> Unit:
    """Send input to a ready or running Action.

    Ready: a new generation in place with the input (and any input still queued)
    in its context. Running: queued for its Run, refused when stale: another
    generation, another Run than the one the user saw, or a lease that expired.
    """
    text = input_text(text)
    wi.refuse_if_terminal(item, "send input to")
    action = actions.get(action_id)
    if action is None or action.work_item_id != item.id:
        raise CommandRefused(f"Action {action_id} does not belong to WorkItem {item.id}")
    if action.generation != expected_generation:
        raise CommandRefused("Action changed before input was applied")
    if modes.of(item).current_action_only and item.current_action_id != action.id:
        raise CommandRefused("input goes to the current Action of a linear WorkItem")
    unit = Unit(item, actions, at, by=by)
    if action.status == "ready":
        if expected_run_id is not None:
            raise _not_the_run(action, expected_run_id)
        entries = tuple(act.ContextEntry(kind="input", text=i.text) for i in action.inputs)
        unit.apply_action(
            generation.reset(
                action,
                reason="input",
                add_context=(*entries, act.ContextEntry(kind="input", text=text)),
                contract_revision=item.contract_revision,
                at=at,
                by=by,
                keep_inputs=True,
            )
        )
        return unit
    run = action.current_run
    if action.status != "running" or run is None:
        raise CommandRefused(
            f"Action is {action.status}; input needs a ready or running Action "
            "(a waiting or failed one takes retry)"
        )
    if expected_run_id is not None and expected_run_id != run.id:
        raise _not_the_run(action, expected_run_id)
    if run.expires_at <= at:
        raise CommandRefused(
            "the running Run's lease expired; send the input again when it is recovered"
        )
    emit: Emitter[act.ActionEvent] = Emitter.after(action, at, by)
    emit(act.InputQueued, input_id=input_id, text=text, run_id=run.id)
    unit.apply_action(emit.events)
    return unit


def _not_the_run(action: act.ActionState, run_id: UUID) -> CommandRefused:
    """Input named a Run that is not the Action's running one: one of its ended Runs,
    or none of its own."""
    if any(run.id == run_id for run in action.runs):
        return CommandRefused("the Run the input was meant for has ended")
    return CommandRefused(f"Run {run_id} is not a Run of Action {action.sequence}")


def pending(
    action: act.ActionState, ref: act.RunRef, *, at: datetime | None = None
) -> tuple[act.QueuedInput, ...]:
    """The input waiting for the live Run ``ref`` (LRF; with ``at``, LRF+): StaleRun for
    any other."""
    act.live_run(action, ref, at=at)
    return action.unconsumed_inputs


def consume(
    action: act.ActionState,
    ref: act.RunRef,
    input_ids: Sequence[UUID],
    *,
    at: datetime,
    by: Actor,
) -> list[act.ActionEvent]:
    """The live Run (LRF+) takes queued input; unknown or already consumed ids are refused."""
    act.live_run(action, ref, at=at)
    waiting = {i.id for i in action.unconsumed_inputs}
    ids = tuple(dict.fromkeys(input_ids))
    if not ids:
        raise InvalidInput("name the input to consume")
    unknown = [str(i) for i in ids if i not in waiting]
    if unknown:
        raise CommandRefused(f"no unconsumed input {', '.join(unknown)} for this Run")
    emit: Emitter[act.ActionEvent] = Emitter.after(action, at, by)
    emit(act.InputConsumed, run_id=ref.run_id, input_ids=ids)
    return emit.events


def refuse_unconsumed(action: act.ActionState) -> None:
    """The input gate: a Run cannot finish while input queued for it is unconsumed."""
    waiting = action.unconsumed_inputs
    if waiting:
        raise CommandRefused(
            f"the Run has {len(waiting)} unconsumed input(s); consume them before finishing"
        )
