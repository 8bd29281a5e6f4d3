"""Run-side service commands beyond claim, renew and finish: deferral and the
input a running Action receives. ``WorkCenter`` delegates to them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING
from uuid import UUID

from eventsourcing.persistence import IntegrityError

from workcenter.domain import action as act
from workcenter.domain import action_input, runs
from workcenter.domain import actor as actors
from workcenter.domain.actor import Actor
from workcenter.domain.errors import InvalidInput
from workcenter.store import SAVE_ATTEMPTS, WriteContention, project_action

if TYPE_CHECKING:
    from workcenter.application import Claim, WorkCenter


def run_ref(claim: object) -> act.RunRef:
    """The fencing reference of a Claim or RunRef; anything else is refused."""
    if isinstance(claim, act.RunRef):
        return claim
    ref = getattr(claim, "ref", None)
    if isinstance(ref, act.RunRef):
        return ref
    raise InvalidInput("expected a Claim or RunRef of a claimed Run")


class RunSide:
    def __init__(self, wc: WorkCenter) -> None:
        self.wc = wc

    def defer(self, claim: Claim | act.RunRef, actor: Actor | str | None) -> act.ActionState:
        """The workspace is busy: end the Run as deferred and give its attempt back."""
        return self.wc._run_command(
            run_ref(claim),
            actor,
            lambda item, action, ref, at, by: runs.defer(item, action, ref, at=at, by=by),
        )

    def pending_input(self, claim: Claim | act.RunRef) -> tuple[act.QueuedInput, ...]:
        """Input queued for the Action that this live Run has not consumed yet."""
        ref = run_ref(claim)
        return action_input.pending(self.wc.action(ref.action_id), ref)

    def consume_input(
        self, claim: Claim | act.RunRef, input_ids: Sequence[UUID], actor: Actor | str | None
    ) -> act.ActionState:
        """Record that the Run took the named queued input into its work (by the Run's
        worker unless ``actor`` says otherwise)."""
        ref = run_ref(claim)
        chosen = None if actor is None else actors.parse(actor)  # refused before any load
        if isinstance(input_ids, str | bytes) or not isinstance(input_ids, Sequence):
            raise InvalidInput("input_ids must be a list of input ids")
        if not all(isinstance(i, UUID) for i in input_ids):
            raise InvalidInput("input_ids must be a list of input ids")
        for _ in range(SAVE_ATTEMPTS):
            action = self.wc.action(ref.action_id)
            by = chosen or self.wc._run_actor(ref, action)
            events = action_input.consume(action, ref, input_ids, at=self.wc.clock.now(), by=by)
            after = project_action(action, events)
            try:
                self.wc._save_events(events, {action.id: after})
            except IntegrityError:
                continue
            return after  # type: ignore[no-any-return]
        raise WriteContention("the Action kept changing; try again")
