"""The claim: a worker takes the oldest claimable Action, and what it gets to run it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Protocol
from uuid import UUID

from eventsourcing.persistence import IntegrityError

from workcenter.domain import action as act
from workcenter.domain import actor as actors
from workcenter.domain import runs
from workcenter.domain import work_item as wi
from workcenter.domain.actor import Actor
from workcenter.projections.work_queue import Candidate
from workcenter.service_layer import backoff
from workcenter.service_layer.ports import Clock
from workcenter.service_layer.repository import Repository

CLAIM_PAGE = 16
# Saves of one candidate's claim, each decided on the states read after the last lost
# one; from the third on after a backoff, as siblings claimed at once each win the item's
# stream in turn. The first read again is at once: most often it finds the candidate
# taken (on SQLite, by another process's claim) and the claim goes on to the next.
SAVE_TRIES = 8


@dataclass(frozen=True)
class Claim:
    """A claimed Run and what its worker needs to execute it."""

    work_item_id: UUID
    action_id: UUID
    run_id: UUID
    boot_id: str
    lease_epoch: int
    expires_at: datetime
    worker: str
    action_type: str
    brief: act.Brief
    context: tuple[act.ContextEntry, ...]
    goal: str
    acceptance_criteria: tuple[str, ...]
    delivery_target: str | None
    attempt: int
    # Input queued for the Action and not yet consumed: the Run should consume it.
    inputs: tuple[act.QueuedInput, ...] = ()
    # Candidates this claim tried, the won one included: 1 unless it lost races to
    # other workers or met stale queue rows (counted for the scale-out benchmark).
    candidates_tried: int = 1
    # A claim repeated with its client claim id, answered with the Run the first got
    # and nothing written (ADR-0114).
    replayed: bool = False

    @property
    def ref(self) -> act.RunRef:
        return act.RunRef(
            action_id=self.action_id,
            run_id=self.run_id,
            boot_id=self.boot_id,
            lease_epoch=self.lease_epoch,
        )

    @property
    def actor(self) -> Actor:
        """The worker that holds the claim: who its renewals, finish and interrupt are by."""
        return actors.worker(self.worker, self.boot_id)


class ClaimSource(Protocol):
    """What a claim needs of the Run handler: the work queue's candidates, the
    repository that loads and saves them, the clock and this process's boot id."""

    repo: Repository
    clock: Clock
    boot_id: str

    def claim_candidates(self, page: int) -> AbstractContextManager[Iterator[Candidate]]: ...


def claim_next(
    wc: ClaimSource,
    worker: str,
    lease: timedelta,
    by: Actor,
    client_claim_id: str | None = None,
) -> Claim | None:
    """Claim for ``worker`` (already validated) by ``by``; see ``WorkCenter.claim_next``.
    ``client_claim_id`` (validated) is recorded on the Run's claim (ADR-0114).

    The candidates come oldest first; on PostgreSQL each is held for this claim until
    it ends, so concurrent claims pass over each other's (ADR-0054)."""
    with wc.claim_candidates(CLAIM_PAGE) as candidates:
        for tried, candidate in enumerate(candidates, start=1):
            claim = _try_claim(wc, candidate, worker, lease, by, client_claim_id)
            if claim is not None:
                return replace(claim, candidates_tried=tried)
    return None


def _try_claim(
    wc: ClaimSource,
    candidate: Candidate,
    worker: str,
    lease: timedelta,
    by: Actor,
    client_claim_id: str | None,
) -> Claim | None:
    """The candidate claimed, or None when it is not claimable (any more). A save that
    lost a race is decided again on the states read: the race may have been for a stream
    the candidate shares (its item's or ledger's, with another Action of the item claimed
    at the same moment), and on PostgreSQL the candidate is still held for this claim."""
    for tried in range(SAVE_TRIES):
        if tried > 1:
            backoff.pause(tried - 2)
        action, item, ledger = wc.repo.run_states(
            candidate.action_id, with_ledger=True, work_item_id=candidate.work_item_id
        )
        if runs.claimable(item, action) is not None:
            return None
        unit = runs.claim(
            item,
            action,
            ledger or wc.repo.ledger(item.id),
            worker=worker,
            boot_id=wc.boot_id,
            lease=lease,
            at=wc.clock.now(),
            by=by,
            client_claim_id=client_claim_id,
        )
        try:
            wc.repo.save(unit)
        except IntegrityError:
            continue
        claimed = unit.action(candidate.action_id)
        run = claimed.current_run
        if run is None:
            return None  # the ledger had no attempt left: the stop was saved instead
        return claim_of(item, claimed, run)
    return None


def claim_of(
    item: wi.WorkItemState, action: act.ActionState, run: act.Run, *, replayed: bool = False
) -> Claim:
    """What a worker is told of its Run ``run`` of ``action``: its fence and its work."""
    return Claim(
        work_item_id=item.id,
        action_id=action.id,
        run_id=run.id,
        boot_id=run.owner_boot_id,
        lease_epoch=run.lease_epoch,
        expires_at=run.expires_at,
        worker=run.worker,
        action_type=action.type,
        brief=action.brief,
        context=action.context,
        goal=item.goal,
        acceptance_criteria=item.acceptance_criteria,
        delivery_target=item.delivery_target,
        attempt=run.attempt,
        inputs=action.unconsumed_inputs,
        replayed=replayed,
    )
