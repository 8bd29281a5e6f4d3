"""Run-side service commands after the claim: lease renewal, the Run commands'
common path and who they are by, deferral, the input a running Action receives,
and recovery of dead Runs. ``WorkCenter`` delegates to them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING
from uuid import UUID

from eventsourcing.persistence import IntegrityError

from workcenter.domain import action as act
from workcenter.domain import action_input, bounds, inputs, runs
from workcenter.domain import actor as actors
from workcenter.domain import work_item as wi
from workcenter.domain.actor import Actor
from workcenter.domain.errors import InvalidInput, WorkcenterError
from workcenter.domain.unit import Unit
from workcenter.store import SAVE_ATTEMPTS, WriteContention, project_action

if TYPE_CHECKING:
    from workcenter.application import WorkCenter
    from workcenter.claiming import Claim

RunDecision = Callable[[wi.WorkItemState, act.ActionState, act.RunRef, datetime, Actor], Unit]


def run_ref(claim: object) -> act.RunRef:
    """The fencing reference of a Claim or RunRef; anything else is refused."""
    if isinstance(claim, act.RunRef):
        return claim
    ref = getattr(claim, "ref", None)
    if isinstance(ref, act.RunRef):
        return ref
    raise InvalidInput(f"expected a Claim or a RunRef, not {type(claim).__name__}")


def run_actor(claim: Claim | act.RunRef, action: act.ActionState) -> Actor:
    """The worker a Run command is by: the claim's, else the one that claimed the Run."""
    held = getattr(claim, "actor", None)
    if isinstance(held, Actor):
        return held
    run = action.run(run_ref(claim).run_id)
    # No such Run: the decision refuses the command, so nothing is recorded by anyone.
    return actors.worker(run.worker, run.owner_boot_id) if run else actors.OPERATOR


def chosen_actor(actor: Actor | str | None) -> Actor | None:
    """An explicit actor, checked before anything is loaded; None for the Run's worker."""
    return None if actor is None else actors.parse(actor)


class RunSide:
    def __init__(self, wc: WorkCenter) -> None:
        self.wc = wc

    def command(
        self, claim: Claim | act.RunRef, actor: Actor | str | None, decide: RunDecision
    ) -> act.ActionState:
        """Load the Run's Action and item, decide as the Run's worker (or ``actor``), save."""
        ref = run_ref(claim)
        chosen = chosen_actor(actor)

        def attempt() -> Unit:
            action = self.wc.action(ref.action_id)
            item = self.wc.work_item(action.work_item_id)
            by = chosen or run_actor(claim, action)
            return decide(item, action, ref, self.wc.clock.now(), by)

        return self.wc._execute(attempt).action(ref.action_id)

    def renew_lease(
        self, claim: Claim | act.RunRef, lease_seconds: float, actor: Actor | str | None
    ) -> bool:
        """Extend the lease; False when the Run is no longer live (stop working on it)."""
        ref = run_ref(claim)
        lease = timedelta(seconds=inputs.lease_seconds(lease_seconds))
        chosen = chosen_actor(actor)
        for _ in range(SAVE_ATTEMPTS):
            action = self.wc.action(ref.action_id)
            try:
                events = act.renew(
                    action,
                    ref,
                    lease=lease,
                    at=self.wc.clock.now(),
                    by=chosen or run_actor(claim, action),
                )
            except WorkcenterError:
                return False
            try:
                self.wc._save_events(events, {action.id: project_action(action, events)})
            except IntegrityError:
                continue
            return True
        return False

    def defer(self, claim: Claim | act.RunRef, actor: Actor | str | None) -> act.ActionState:
        """The workspace is busy: end the Run as deferred and give its attempt back."""
        return self.command(
            claim,
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
        chosen = chosen_actor(actor)
        if isinstance(input_ids, str | bytes) or not isinstance(input_ids, Sequence):
            raise InvalidInput("input_ids must be a list of input ids")
        if not all(isinstance(i, UUID) for i in input_ids):
            raise InvalidInput("input_ids must be a list of input ids")
        for _ in range(SAVE_ATTEMPTS):
            action = self.wc.action(ref.action_id)
            by = chosen or run_actor(claim, action)
            events = action_input.consume(action, ref, input_ids, at=self.wc.clock.now(), by=by)
            after = project_action(action, events)
            try:
                self.wc._save_events(events, {action.id: after})
            except IntegrityError:
                continue
            return after  # type: ignore[no-any-return]
        raise WriteContention("the Action kept changing; try again")

    def recover(self, worker: str | None, actor: Actor | str | None) -> list[UUID]:
        """End every dead Run (see ``WorkCenter.recover``); the operator's by default."""
        wc = self.wc
        if worker is not None:
            worker = inputs.text(worker, "worker", bounds.WORKER, required=True)
        by = actors.resolve(actor, actors.OPERATOR)
        wc._catch_up_work_queue()
        recovered: list[UUID] = []
        for action_id, run_id, *_ in wc.work_queue.live_runs():

            def attempt(action_id: UUID = action_id, run_id: UUID = run_id) -> Unit:
                action = wc.action(action_id)
                run = action.run(run_id)
                at = wc.clock.now()
                if run is None or not runs.is_dead(run, boot_id=wc.boot_id, worker=worker, at=at):
                    return Unit(wc.work_item(action.work_item_id), {}, at, by=by)
                return runs.recover(
                    wc.work_item(action.work_item_id), action, run_id=run_id, at=at, by=by
                )

            if wc._execute(attempt).events:
                recovered.append(run_id)
        return recovered
