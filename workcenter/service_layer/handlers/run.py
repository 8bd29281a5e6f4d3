"""The Run commands: the claim, lease renewal, finishing, interrupting and
deferring a Run, the input a running Action receives, and recovery of dead Runs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

from workcenter.domain import action as act
from workcenter.domain import action_input, bounds, inputs, runs
from workcenter.domain import actor as actors
from workcenter.domain import work_item as wi
from workcenter.domain.actor import Actor
from workcenter.domain.errors import InvalidInput, WorkcenterError
from workcenter.domain.model import DomainEvent
from workcenter.domain.outcome import RunReport
from workcenter.domain.run import parse_progress
from workcenter.domain.unit import Unit
from workcenter.projections.work_queue import Candidate, WorkQueue, WorkQueueView
from workcenter.service_layer.handlers import claim as claiming
from workcenter.service_layer.handlers.claim import Claim
from workcenter.service_layer.ports import Clock
from workcenter.service_layer.read_models import ReadModels
from workcenter.service_layer.repository import Repository, WriteContention

log = logging.getLogger("workcenter.leases")

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


class RunCommands:
    """A worker's side: what it claims and how its Runs end."""

    def __init__(
        self, repository: Repository, read_models: ReadModels, clock: Clock, boot_id: str
    ) -> None:
        self.repo = repository
        self.read_models = read_models
        self.clock = clock
        self.boot_id = boot_id

    def work_queue(self) -> WorkQueueView:
        """Claims and recovery read the work queue: it is brought up to the head first,
        even when inline projections are off (then only it, leaving the rest to the runner)."""
        return self.read_models.fresh(WorkQueue.name)  # type: ignore[no-any-return]

    @contextmanager
    def claim_turn(self, client_claim_id: str) -> Iterator[tuple[UUID, UUID] | None]:
        """The turn of the claims with ``client_claim_id`` across the store's processes,
        where its database offers one (ADR-0118). Yields the (Action, Run) the latest
        claim with the id got, if any: read in the turn's own exchange when the work queue
        is at the head, else from the queue brought up to it."""
        view: WorkQueueView = self.read_models.view(WorkQueue.name)
        at_head = self.read_models.at_head

        def current(c: Any) -> Callable[[], bool]:
            return at_head(c, WorkQueue.name)

        with view.claim_turn(client_claim_id, current) as read:
            yield (
                read.found if read is not None else self.work_queue().claimed_by_id(client_claim_id)
            )

    @contextmanager
    def claim_candidates(self, page: int) -> Iterator[Iterator[Candidate]]:
        """The claimable Actions, oldest first, each held for this claim where the
        database can (ADR-0054). When the view is at the head (the common case) its
        position and the first candidate are read in one transaction; else it is caught
        up first, as ``work_queue`` does. On PostgreSQL that transaction's ``BEGIN``, the
        position and the first candidate are one round trip (ADR-0074)."""

        def catch_up() -> None:
            self.read_models.catch_up([WorkQueue.name])

        if self.read_models.catches_up_on_read(WorkQueue.name):
            view: WorkQueueView = self.read_models.view(WorkQueue.name)
            at_head = self.read_models.at_head

            def current(c: Any) -> Callable[[], bool]:
                return at_head(c, WorkQueue.name)

            with view.claim_candidates(page, current, catch_up) as candidates:
                if candidates is not None:
                    yield candidates
                    return
        with self.work_queue().claim_candidates(page, catch_up=catch_up) as candidates:
            assert candidates is not None  # no ``current`` check was asked for
            yield candidates

    def claim_next(
        self, worker: str, lease_seconds: float, actor: Actor | str | None
    ) -> Claim | None:
        """See ``WorkCenter.claim_next``."""
        worker = inputs.text(worker, "worker", bounds.WORKER, required=True)
        lease = timedelta(seconds=inputs.lease_seconds(lease_seconds))
        by = actors.resolve(actor, actors.worker(worker, self.boot_id))
        return claiming.claim_next(self, worker, lease, by)

    def command(
        self, claim: Claim | act.RunRef, actor: Actor | str | None, decide: RunDecision
    ) -> act.ActionState:
        """Load the Run's Action and item, decide as the Run's worker (or ``actor``), save."""
        ref = run_ref(claim)
        chosen = chosen_actor(actor)

        def attempt(action: act.ActionState, item: wi.WorkItemState) -> Unit:
            by = chosen or run_actor(claim, action)
            return decide(item, action, ref, self.clock.now(), by)

        return self.repo.execute_on_run(attempt, ref.action_id).action(ref.action_id)

    def renew_lease(
        self, claim: Claim | act.RunRef, lease_seconds: float, actor: Actor | str | None
    ) -> bool:
        """Extend the lease; False when the Run is no longer live (stop working on it)."""
        ref = run_ref(claim)
        lease = timedelta(seconds=inputs.lease_seconds(lease_seconds))
        chosen = chosen_actor(actor)

        refused: list[WorkcenterError] = []

        def renew(action: act.ActionState) -> Sequence[DomainEvent]:
            refused.clear()  # only the last decision counts (it may be decided again)
            by = chosen or run_actor(claim, action)
            try:
                return act.renew(action, ref, lease=lease, at=self.clock.now(), by=by)
            except WorkcenterError as error:
                refused.append(error)  # a Run no longer live: nothing is written
                return []

        return self.repo.save_action(renew, ref.action_id) is not None and not refused

    def finish_run(
        self,
        claim: Claim | act.RunRef,
        report: RunReport | Mapping[str, Any],
        actor: Actor | str | None,
    ) -> act.ActionState:
        if not isinstance(report, RunReport | Mapping):
            raise InvalidInput(f"a run report must be a mapping, not {type(report).__name__}")
        return self.command(
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
        reason: str,
        progress: act.RunProgress | Mapping[str, Any] | None,
        actor: Actor | str | None,
    ) -> act.ActionState:
        reason = inputs.text(reason, "reason", bounds.REASON)
        final = parse_progress(progress)
        return self.command(
            claim,
            actor,
            lambda item, action, ref, at, by: runs.interrupt(
                item, action, ref, reason=reason, at=at, by=by, progress=final
            ),
        )

    def defer(
        self,
        claim: Claim | act.RunRef,
        actor: Actor | str | None,
        reason: str = act.DEFERRED_REASON,
    ) -> act.ActionState:
        """The Run cannot start: end it as deferred and give its attempt back."""
        return self.command(
            claim,
            actor,
            lambda item, action, ref, at, by: runs.defer(
                item, action, ref, at=at, by=by, reason=reason
            ),
        )

    def pending_input(
        self, claim: Claim | act.RunRef, *, unexpired: bool = False
    ) -> tuple[act.QueuedInput, ...]:
        """Input queued for the Action that this live Run has not consumed yet; with
        ``unexpired``, only while the Run's lease has not expired (LRF+)."""
        ref = run_ref(claim)
        at = self.clock.now() if unexpired else None
        return action_input.pending(self.repo.action(ref.action_id), ref, at=at)

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
        if len(input_ids) > bounds.IDS:
            # The bound every command naming ids keeps (docs/limits.md; found unkept by
            # acceptance testing, ADR-0138).
            raise InvalidInput(f"input_ids names more than {bounds.IDS} ids ({len(input_ids)})")

        def consume(action: act.ActionState) -> Sequence[DomainEvent]:
            by = chosen or run_actor(claim, action)
            return action_input.consume(action, ref, input_ids, at=self.clock.now(), by=by)

        after = self.repo.save_action(consume, ref.action_id)
        if after is None:
            raise WriteContention("the Action kept changing; try again")
        return after

    def recover(self, actor: Actor | str | None) -> list[UUID]:
        """End every dead Run (see ``WorkCenter.recover``); the operator's by default."""
        return self.recover_by(actors.resolve(actor, actors.OPERATOR))

    def recover_by(self, by: Actor) -> list[UUID]:
        """End every dead Run as ``by`` (checked, or the store's own: the system's).
        Each is said in one warning line naming its worker: a dead worker's Runs were
        taken back without a word (found by acceptance testing, ADR-0142)."""
        repo = self.repo
        recovered: list[UUID] = []
        now = self.clock.now().timestamp()
        for action_id, run_id, worker, boot, expires_at in self.work_queue().live_runs():
            if expires_at > now:
                # The queue is at the head, renewals included, and sorted by expiry:
                # no Run from here on has run out its lease.
                break

            def attempt(action_id: UUID = action_id, run_id: UUID = run_id) -> Unit:
                action = repo.action(action_id)
                run = action.run(run_id)
                at = self.clock.now()
                if run is None or not runs.is_dead(run, at=at):
                    return Unit(repo.work_item(action.work_item_id), {}, at, by=by)
                return runs.recover(
                    repo.work_item(action.work_item_id), action, run_id=run_id, at=at, by=by
                )

            if repo.execute(attempt).events:
                recovered.append(run_id)
                log.warning(
                    "Run %s of Action %s ended: its worker %s@%s let its lease lapse at %s"
                    " (recovered by %s)",
                    run_id,
                    action_id,
                    worker,
                    boot,
                    datetime.fromtimestamp(expires_at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                    by,
                )
        return recovered
