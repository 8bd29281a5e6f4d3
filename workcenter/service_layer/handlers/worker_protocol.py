"""A remote worker's side of the Run commands (ADR-0063): what the HTTP worker
protocol asks of the service, beside the Python ``WorkCenter`` verbs it builds on.

Three things differ from an in-process worker. A remote worker's claim is owned by
the boot id the worker names (its own process, not the server's), so the audit
says which process ran a Run and a server restart fences nobody. Every Run
command names its Run by the fence the claim returned (``act.RunRef``), and the
model requests it reserves and settles are fenced the same way. And a network
retries: a finish or a settlement that arrives a second time is recognised by
what it repeats (the fence and a digest of the report; the fence, the request id
and the usage) and answered with the first result, writing nothing; so is a claim
that carries the worker's own id for it (ADR-0114).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, suppress
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from uuid import UUID

from workcenter.domain import action as act
from workcenter.domain import actor as actors
from workcenter.domain import bounds, inputs
from workcenter.domain import resource_ledger as rl
from workcenter.domain.errors import (
    ClaimIdUsed,
    CommandRefused,
    InvalidInput,
    NotFound,
    StaleRun,
    WorkcenterError,
)
from workcenter.domain.outcome import RunReport, report_digest
from workcenter.projections.work_queue import Candidate
from workcenter.service_layer.cadence import Cadence
from workcenter.service_layer.handlers import claim as claiming
from workcenter.service_layer.handlers.claim import Claim
from workcenter.service_layer.handlers.resource_ledger import BudgetCommands
from workcenter.service_layer.handlers.run import RunCommands, run_ref
from workcenter.service_layer.ports import Clock
from workcenter.service_layer.repository import Repository

BOOT_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
# Locks that claims with a client claim id share by the id's hash (ADR-0114).
CLAIM_ID_LOCKS = 64


@dataclass(frozen=True)
class Finished:
    """How a Run's finish ended it; ``replayed`` when this was the same finish again."""

    work_item_id: UUID
    action_id: UUID
    run_id: UUID
    outcome: str
    action_status: str
    replayed: bool


@dataclass(frozen=True)
class Admitted:
    """The ledger's answer to a Run's model request; ``replayed`` for a repeated one."""

    request_id: str
    allowed: bool
    code: str | None
    stops: bool
    replayed: bool


@dataclass(frozen=True)
class Settled:
    """A reservation as its settlement left it; ``replayed`` for a repeated settlement."""

    request_id: str
    status: str
    charged_tokens: int
    replayed: bool


class _OwnBoot:
    """The Run handler as a claim sees it, but claiming under a remote worker's boot id."""

    def __init__(self, runs: RunCommands, boot_id: str) -> None:
        self.runs = runs
        self.repo: Repository = runs.repo
        self.clock: Clock = runs.clock
        self.boot_id = boot_id

    def claim_candidates(self, page: int) -> AbstractContextManager[Iterator[Candidate]]:
        return self.runs.claim_candidates(page)


def boot_id(value: object) -> str:
    """A remote worker's boot id: 1 to 64 letters, digits, dots, dashes or underscores."""
    if not isinstance(value, str) or not BOOT_ID.match(value):
        raise InvalidInput("bootId must be 1 to 64 letters, digits, '.', '-' or '_'")
    return value


def _owned(action: act.ActionState, ref: act.RunRef) -> act.Run:
    """The Run this fence was issued for (live or not); StaleRun for a foreign fence."""
    run = action.run(ref.run_id)
    if run is None or run.owner_boot_id != ref.boot_id or run.lease_epoch != ref.lease_epoch:
        raise StaleRun(act.why_stale(action, ref, at=None))
    return run


class WorkerProtocol:
    """Claims under a worker's own boot id, Run commands by fence, retries recognised."""

    def __init__(self, runs: RunCommands, budget: BudgetCommands) -> None:
        self.runs = runs
        self.budget = budget
        self.repo = runs.repo
        self.clock = runs.clock
        # When the claims of this process next end lapsed leases though they find work.
        self._recovery = Cadence(self.clock)
        # Claims with a client claim id, serialised by its hash: bounded, never cleaned.
        self._claim_ids = tuple(threading.Lock() for _ in range(CLAIM_ID_LOCKS))

    # --- claims -------------------------------------------------------------------

    def claim(
        self,
        worker: str,
        boot: str,
        lease_seconds: float,
        client_claim_id: str | None = None,
    ) -> Claim | None:
        """Claim the oldest claimable Action for ``worker`` of process ``boot``, or None.

        With ``client_claim_id`` (ADR-0114), a claim repeated by the same worker while
        the Run its id got is live answers that Run (``replayed``) and writes nothing;
        the id of another worker's Run, or of a Run that ended, is ``ClaimIdUsed``."""
        worker = inputs.text(worker, "worker", bounds.WORKER, required=True)
        boot = boot_id(boot)
        lease = timedelta(seconds=inputs.lease_seconds(lease_seconds))
        if client_claim_id is not None:
            client_claim_id = inputs.token(
                inputs.text(client_claim_id, "clientClaimId", bounds.REQUEST_ID, required=True),
                "clientClaimId",
            )
        actor = actors.worker(worker, boot)
        # Refused now, not at the Run's first ledger command, which records this actor.
        if (problem := actors.actor_problem(actor)) is not None:
            raise InvalidInput(f"worker and bootId: {problem}")
        source = _OwnBoot(self.runs, boot)
        if client_claim_id is None:
            return claiming.claim_next(source, worker, lease, actor)
        # Two claims with one id take turns, so that the second finds the first's Run: in
        # this process (ADR-0114), then in every process of the store (ADR-0118, 0123).
        with (
            self._claim_ids[hash(client_claim_id) % len(self._claim_ids)],
            self.runs.claim_turn(client_claim_id) as known,
        ):
            first = self._claimed_before(client_claim_id, worker, boot, known)
            if first is not None:
                return first
            return claiming.claim_next(source, worker, lease, actor, client_claim_id)

    def _claimed_before(
        self, client_claim_id: str, worker: str, boot: str, known: tuple[UUID, UUID] | None
    ) -> Claim | None:
        """The live Run a claim with this id got (``known``: its Action and Run, as the
        work queue has them), for this worker; None when the id is new, or its Run was
        given back unanswered (ADR-0098: nobody read that claim)."""
        if known is None:
            return None
        action, item, _ = self.repo.run_states(known[0], with_ledger=False)
        run = action.run(known[1])
        if run is None or run.client_claim_id != client_claim_id:
            return None  # the view is ahead of nothing it knows: treat the id as new
        if run.worker != worker:
            raise ClaimIdUsed(
                f"clientClaimId {client_claim_id!r} was used by another worker's claim"
            )
        if run.owner_boot_id != boot:
            # Most often a retry without a bootId that reached another server process,
            # whose own boot id it then took (found by acceptance testing).
            raise ClaimIdUsed(
                f"clientClaimId {client_claim_id!r} was used by a claim of worker"
                f" {worker!r} with another bootId; a retry sends the bootId of the claim it"
                " retries (a claim without one takes the answering server process's)"
            )
        if run.deferred and run.end_reason == act.UNANSWERED_REASON:
            return None
        claim = claiming.claim_of(item, action, run, replayed=True)
        try:
            act.live_run(action, claim.ref, at=self.clock.now())
        except StaleRun:
            ended = f"ended ({run.status})" if run.status != "running" else "lost its lease"
            raise ClaimIdUsed(
                f"clientClaimId {client_claim_id!r} claimed Run {run.id}, which has {ended};"
                " a new claim needs a new id"
            ) from None
        return claim

    def recover_when_due(self, every: float) -> list[UUID]:
        """``recover_expired``, at most once per ``every`` seconds of the store's clock
        across this process's claims, whether they find work or not. Only a claim that
        found nothing recovered before, so under a steady backlog a dead remote worker's
        Run stayed running, its item blocked, for as long as the backlog lasted
        (ADR-0107). One read of the live Runs, sorted by expiry, when none lapsed."""
        if not self._recovery.due(timedelta(seconds=every)):
            return []
        return self.recover_expired()

    def recover_expired(self) -> list[UUID]:
        """End the Runs whose lease has expired, whoever owns them: a remote worker that
        stopped renewing is gone. A live lease is never judged by its boot id here. The
        system's doing, not a person's (ADR-0142)."""
        return self.runs.recover_by(actors.LEASES)

    # --- Run commands -------------------------------------------------------------

    def renew(self, ref: act.RunRef, lease_seconds: float) -> act.ActionState:
        """Extend the lease; StaleRun (nothing written) when the Run is no longer live."""
        ref = run_ref(ref)
        if not self.runs.renew_lease(ref, lease_seconds, None):
            action = self.repo.action(ref.action_id)
            raise StaleRun(act.why_stale(action, ref, at=self.clock.now()))
        return self.repo.action(ref.action_id)

    def finish(self, ref: act.RunRef, report: Mapping[str, Any]) -> Finished:
        """Finish the Run; the same finish again (same fence, same report) answers what
        the first recorded and writes nothing, another report for it is refused."""
        try:
            action = self.runs.finish_run(ref, report, None)
        except StaleRun:
            first = self.first_finish(ref, report)
            if first is None:
                raise
            return first
        run = action.run(ref.run_id)
        assert run is not None
        return Finished(
            action.work_item_id, action.id, run.id, run.status, action.status, replayed=False
        )

    def finished_before(
        self, stale: StaleRun, ref: act.RunRef, report: RunReport | Mapping[str, Any]
    ) -> act.ActionState:
        """The Action as it is now, if the Run was finished with this very report (its
        finish sent again, its answer lost: ``finish_run`` answers it, ADR-0140); else
        ``stale``, the refusal of the finish, raised again."""
        try:
            first = self.first_finish(ref, report)
        except CommandRefused:
            first = None  # another report's finish, or a fence never issued
        # Any other error (the store away) is the caller's to retry: said as the Run's end,
        # a retry took its own recorded finish for lost (found by acceptance testing).
        if first is None:
            raise stale
        return self.repo.action(ref.action_id)

    def first_finish(
        self, ref: act.RunRef, report: RunReport | Mapping[str, Any]
    ) -> Finished | None:
        """How the Run's finish with this very report ended it (``replayed``), when it
        was recorded: a finish sent again after its answer was lost. None when the Run
        was not finished, or before digests were recorded; ``CommandRefused`` when it
        was finished with another report; ``StaleRun`` for a fence it was never issued."""
        action = self.repo.action(ref.action_id)
        run = _owned(action, ref)
        parsed = RunReport.parse(report if isinstance(report, RunReport) else dict(report))
        for event in self.repo.events(action.id):
            if isinstance(event, act.RunFinished) and event.run_id == run.id:
                if event.report_digest is None:
                    return None  # finished before digests were recorded: unknowable
                if event.report_digest != report_digest(parsed):
                    raise CommandRefused(
                        f"Run {run.id} was already finished ({event.outcome}) with another report"
                    )
                return Finished(
                    action.work_item_id,
                    action.id,
                    run.id,
                    event.outcome,
                    event.action_status,
                    replayed=True,
                )
        return None

    def interrupt(
        self, ref: act.RunRef, reason: str, progress: Mapping[str, Any] | None
    ) -> act.ActionState:
        return self.runs.interrupt(ref, reason, progress, None)

    def defer(self, ref: act.RunRef) -> act.ActionState:
        return self.runs.defer(ref, None)

    def unanswered(self, claim: Claim) -> None:
        """Give back a Run whose claim nobody will read (its client left while it was
        made), its attempt too, rather than hold it until its lease runs out. A Run
        already ended meanwhile (recovered, or the item cancelled) is left as it is."""
        with suppress(WorkcenterError):
            self.runs.defer(claim, None, act.UNANSWERED_REASON)

    def pending_input(self, ref: act.RunRef) -> tuple[act.QueuedInput, ...]:
        """The input queued for the Run while its lease has not expired (LRF+): a remote
        worker is told its input only while it may still work on it (ADR-0063)."""
        return self.runs.pending_input(ref, unexpired=True)

    def consume_input(self, ref: act.RunRef, input_ids: Sequence[UUID]) -> act.ActionState:
        """The Run takes queued input. Input this Run consumed already is a retry's (the
        network sent the consume again, or at once): taken as consumed, nothing written
        for it; it was refused, and a worker that resends every verb gave its Run up."""
        ref = run_ref(ref)
        try:
            return self.runs.consume_input(ref, input_ids, None)
        except CommandRefused:
            action = self.repo.action(ref.action_id)
            mine = {i.id for i in action.inputs if i.consumed_by_run_id == ref.run_id}
            rest = [i for i in input_ids if i not in mine]
            if len(rest) == len(input_ids):
                raise
        if rest:
            return self.runs.consume_input(ref, rest, None)
        self.runs.pending_input(ref, unexpired=True)  # StaleRun unless still live
        return action

    # --- the ledger ---------------------------------------------------------------

    def reserve(self, ref: act.RunRef, request_id: str, request: Mapping[str, Any]) -> Admitted:
        """Admit one model request of the live Run. The same request id again for this
        Run answers the first admission and writes nothing, also when the two were sent
        at once and the first was written while the second was decided. The ledger's
        write checks the live-Run fence itself (``reserve_request(run=...)``)."""
        ref = run_ref(ref)
        request_id = inputs.text(request_id, "requestId", bounds.REQUEST_ID, required=True)
        estimate = rl.estimate_tokens(inputs.mapping(request, "request"))
        action = self.repo.action(ref.action_id)
        run = _owned(action, ref)
        replayed = self._reserved_before(action, ref, run, request_id, estimate)
        if replayed is not None:
            return replayed
        admission = self.budget.reserve_request(
            action.work_item_id,
            request=request,
            kind="action",
            request_id=request_id,
            actor=actors.worker(run.worker, run.owner_boot_id),
            run=ref,
        )
        if admission.code == "request_already_reserved":  # by the same request sent at once
            replayed = self._reserved_before(action, ref, run, request_id, estimate)
            if replayed is not None:
                return replayed
        return Admitted(
            request_id, admission.allowed, admission.code, admission.stops, replayed=False
        )

    def _reserved_before(
        self,
        action: act.ActionState,
        ref: act.RunRef,
        run: act.Run,
        request_id: str,
        estimate: int,
    ) -> Admitted | None:
        known = self.repo.ledger(action.work_item_id).reservations.get(request_id)
        if known is None:
            return None
        if known.run_id != run.id or known.estimated_tokens != estimate:
            raise CommandRefused(f"request {request_id} was reserved for another request")
        # An answer only to a Run that may still send (LRF+).
        act.live_run(action, ref, at=self.clock.now())
        if known.status != "reserved":
            # Settled: sent and answered (or given up) already. "Send it" would send it
            # again (found by acceptance testing, ADR-0136).
            return Admitted(request_id, False, "request_already_settled", False, replayed=True)
        return Admitted(request_id, True, None, False, replayed=True)

    def settle(
        self,
        ref: act.RunRef,
        request_id: str,
        usage: Mapping[str, Any] | None,
        complete: bool,
    ) -> Settled:
        """Settle a reservation of the Run the fence was issued for, live or not: it
        records what was spent and sends nothing, so a Run whose lease lapsed or whose
        item was cancelled still reports its usage (ADR-0133). The same settlement again
        answers the first and writes nothing; a different one for a settled request is
        refused, also when the two were sent at once."""
        ref = run_ref(ref)
        request_id = inputs.text(request_id, "requestId", bounds.REQUEST_ID, required=True)
        complete = inputs.flag(complete, "complete")
        normalised = None if usage is None else rl.normalize_usage(inputs.mapping(usage, "usage"))
        action = self.repo.action(ref.action_id)
        run = _owned(action, ref)
        known = self._reservation(action.work_item_id, run.id, request_id)  # NotFound
        reported = complete and normalised is not None and normalised.total_tokens > 0
        # An unknown cost is made reported by the complete usage sent later
        # (resource-ledger.md 2); any other settled request is settled once.
        if known.status == "reserved" or (known.status == "unknown" and reported):
            settled = self.budget.settle_request(
                action.work_item_id,
                request_id,
                usage=normalised,
                complete=complete,
                actor=actors.worker(run.worker, run.owner_boot_id),
            )
            known = self._reservation(action.work_item_id, run.id, request_id)
            if settled:
                return Settled(request_id, known.status, known.charged_tokens, replayed=False)
        # Settled before, by this settlement sent earlier or at once, or by another.
        same_usage = normalised is None or known.usage == normalised
        if known.status != ("reported" if reported else "unknown") or not same_usage:
            raise CommandRefused(f"request {request_id} was already settled otherwise")
        return Settled(request_id, known.status, known.charged_tokens, replayed=True)

    def _reservation(self, work_item_id: UUID, run_id: UUID, request_id: str) -> rl.Reservation:
        known = self.repo.ledger(work_item_id).reservations.get(request_id)
        if known is None or known.run_id != run_id:
            raise NotFound(f"Reservation of Run {run_id}", request_id)
        return known
