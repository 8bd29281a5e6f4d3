"""ResourceLedger commands of the service: admit, settle, extend, record failures."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any
from uuid import UUID

from workcenter.domain import action as act
from workcenter.domain import actor as actors
from workcenter.domain import bounds, inputs
from workcenter.domain import resource_ledger as rl
from workcenter.domain import work_item as wi
from workcenter.domain.actor import Actor
from workcenter.domain.errors import CommandRefused, InvalidInput, NotFound
from workcenter.domain.unit import Unit
from workcenter.service_layer.handlers.claim import Claim
from workcenter.service_layer.handlers.run import run_ref
from workcenter.service_layer.ports import Clock
from workcenter.service_layer.repository import Repository


class BudgetCommands:
    """Requests are by the user (the embedding caller) unless ``actor`` names the
    worker or Coordinator that makes them; Coordinator turns default to it."""

    def __init__(self, repository: Repository, clock: Clock) -> None:
        self.repo = repository
        self.clock = clock

    def _ledger_command(
        self,
        work_item_id: UUID,
        decide: Callable[[wi.WorkItemState, rl.LedgerState, datetime], Unit],
    ) -> Unit:
        def attempt() -> Unit:
            item = self.repo.work_item(work_item_id)
            return decide(item, self.repo.ledger(work_item_id), self.clock.now())

        return self.repo.execute(attempt)

    def reserve_request(
        self,
        work_item_id: UUID,
        *,
        request: Mapping[str, Any],
        kind: rl.RequestKind = "action",
        run_id: UUID | None = None,
        request_id: str | None = None,
        actor: Actor | str | None = None,
        run: Claim | act.RunRef | None = None,
    ) -> rl.Admission:
        """Admit one LLM request before it is sent, at its estimated cost.

        A denial is returned (and a stopping denial saved); the caller must not
        send the request. Only a stop writes the WorkItem too. With ``run`` (a
        Claim or its RunRef) the request is the Run's, and only a live Run may
        make it: the fence of ``finish_run`` (``StaleRun``, nothing written).
        """
        if kind not in ("action", "coordinator"):
            raise InvalidInput(f"kind must be action or coordinator, not {kind!r}")
        run_id = inputs.optional_id(run_id, "Run")
        ref = None if run is None else run_ref(run)
        if (ref is not None or run_id is not None) and (
            kind != "action" or (ref is not None and run_id not in (None, ref.run_id))
        ):
            raise InvalidInput("a Run's request is of kind action, with that Run's id")
        if ref is not None:
            run_id = ref.run_id
        elif run_id is not None and not self.repo.has_run(work_item_id, run_id):
            # Unfenced, unlike the Claim's form: any Run of the item's Actions, live or
            # ended; a made-up id, the item's own or another item's Run was once recorded
            # on the ledger as the request's Run. A Run, once claimed, is never removed.
            raise _not_the_items(run_id, work_item_id)
        if request_id is not None:
            request_id = inputs.text(request_id, "request_id", bounds.REQUEST_ID, required=True)
        default = actors.COORDINATOR if kind == "coordinator" else actors.USER
        by = actors.resolve(actor, default)
        made_here = request_id is None
        request_id = request_id or uuid.uuid4().hex
        estimate = _estimate(request)

        def reserve(ledger: rl.LedgerState, active: bool, at: datetime) -> rl.Admission:
            if made_here and request_id in ledger.reservations:
                # No one else knows the id this call made: the reservation is its own,
                # committed while its answer was lost, and decided again after it. Denied
                # as used, the request was never sent and stayed charged at its estimate
                # (found by acceptance testing, ADR-0136).
                return rl.Admission(allowed=True, request_id=request_id)
            if ref is not None and active:  # an ended item's denial writes nothing
                self._fence(work_item_id, ref, at)
            return rl.reserve(
                ledger,
                request_id=request_id,
                kind=kind,
                run_id=run_id,
                estimated_tokens=estimate,
                item_active=active,
                at=at,
                by=by,
            )

        return self._admit(work_item_id, reserve, by)

    def _fence(self, work_item_id: UUID, ref: act.RunRef, at: datetime) -> None:
        """``StaleRun`` unless the Run is live (LRF+, ADR-0049): it is read in the
        reservation's attempt, so a claim that took the Action over before this
        decision is seen. The Action is not written, so a claim committed between
        this read and the ledger's save lets that one request through, as a
        finish racing a claim cannot: the next request is refused."""
        action = self.repo.action(ref.action_id)
        if action.work_item_id != work_item_id:
            raise _not_the_items(ref.run_id, work_item_id)
        act.live_run(action, ref, at=at)

    def settle_request(
        self,
        work_item_id: UUID,
        request_id: str,
        *,
        usage: Mapping[str, Any] | rl.Usage | None,
        complete: bool = True,
        actor: Actor | str | None = None,
    ) -> bool:
        """Record what a request cost; False when there was nothing to settle."""
        request_id = inputs.text(request_id, "request_id", bounds.REQUEST_ID, required=True)
        complete = inputs.flag(complete, "complete")
        by = actors.resolve(actor, actors.USER)
        return self._settle(
            work_item_id,
            usage,
            lambda ledger, normalised, at: rl.settle(
                ledger, request_id=request_id, usage=normalised, complete=complete, at=at, by=by
            ),
            by,
        )

    def reserve_coordinator_request(
        self,
        work_item_id: UUID,
        *,
        turn_id: str,
        request: Mapping[str, Any],
        actor: Actor | str | None = None,
    ) -> rl.Admission:
        """Admit a Coordinator provider request of turn ``turn_id`` (a repeat is a hidden
        retry: a new request, the earlier ones of the turn settled unknown)."""
        turn_id = inputs.text(turn_id, "turn_id", bounds.REQUEST_ID, required=True)
        by = actors.resolve(actor, actors.COORDINATOR)
        estimate = _estimate(request)
        retry_id = uuid.uuid4().hex
        return self._admit(
            work_item_id,
            lambda ledger, active, at: rl.reserve_coordinator(
                ledger,
                turn_id=turn_id,
                retry_id=retry_id,
                estimated_tokens=estimate,
                item_active=active,
                at=at,
                by=by,
            ),
            by,
        )

    def settle_coordinator_turn(
        self,
        work_item_id: UUID,
        turn_id: str,
        *,
        usage: Mapping[str, Any] | rl.Usage | None,
        complete: bool = True,
        actor: Actor | str | None = None,
    ) -> bool:
        """Settle a Coordinator turn's requests; False when it had none to settle."""
        turn_id = inputs.text(turn_id, "turn_id", bounds.REQUEST_ID, required=True)
        complete = inputs.flag(complete, "complete")
        by = actors.resolve(actor, actors.COORDINATOR)
        return self._settle(
            work_item_id,
            usage,
            lambda ledger, normalised, at: rl.settle_coordinator(
                ledger, turn_id=turn_id, usage=normalised, complete=complete, at=at, by=by
            ),
            by,
        )

    def _admit(
        self,
        work_item_id: UUID,
        reserve: Callable[[rl.LedgerState, bool, datetime], rl.Admission],
        by: Actor,
    ) -> rl.Admission:
        """Reserve through ``reserve(ledger, item_active, at)``; a stopping denial is saved."""
        admission: list[rl.Admission] = []

        def decide(item: wi.WorkItemState, ledger: rl.LedgerState, at: datetime) -> Unit:
            answer = reserve(ledger, item.status not in wi.TERMINAL, at)
            admission[:] = [answer]
            unit = Unit(item, {}, at, ledger, by=by)
            unit.apply_ledger(answer.events)
            return unit

        self._ledger_command(work_item_id, decide)
        return admission[0]

    def _settle(
        self,
        work_item_id: UUID,
        usage: Mapping[str, Any] | rl.Usage | None,
        settle: Callable[[rl.LedgerState, rl.Usage | None, datetime], list[rl.LedgerEvent]],
        by: Actor,
    ) -> bool:
        if not isinstance(usage, rl.Usage) and usage is not None:
            usage = rl.normalize_usage(inputs.mapping(usage, "usage"))
        normalised = usage

        def decide(item: wi.WorkItemState, ledger: rl.LedgerState, at: datetime) -> Unit:
            unit = Unit(item, {}, at, ledger, by=by)
            unit.apply_ledger(settle(ledger, normalised, at))
            return unit

        return bool(self._ledger_command(work_item_id, decide).events)

    def extend_budget(
        self,
        work_item_id: UUID,
        *,
        expected_version: int,
        additions: Mapping[str, Any],
        actor: Actor | str | None = None,
    ) -> rl.LedgerState:
        """A user raises limits. Clears no stop: resume does, once nothing is spent."""
        expected_version = inputs.version(expected_version)
        by = actors.resolve(actor, actors.USER)

        def decide(item: wi.WorkItemState, ledger: rl.LedgerState, at: datetime) -> Unit:
            self.repo.check_expected(ledger, expected_version, rl.CONTROL_EVENTS)
            unit = Unit(item, {}, at, ledger, by=by)
            unit.apply_ledger(rl.extend(ledger, additions, at, by=by))
            return unit

        ledger = self._ledger_command(work_item_id, decide).ledger
        assert ledger is not None
        return ledger

    def record_coordinator_failure(
        self, work_item_id: UUID, *, turn_id: str, actor: Actor | str | None = None
    ) -> rl.LedgerState:
        turn_id = inputs.text(turn_id, "turn_id", bounds.REQUEST_ID, required=True)
        by = actors.resolve(actor, actors.COORDINATOR)

        def decide(item: wi.WorkItemState, ledger: rl.LedgerState, at: datetime) -> Unit:
            unit = Unit(item, {}, at, ledger, by=by)
            unit.apply_ledger(rl.record_coordinator_failure(ledger, turn_id=turn_id, at=at, by=by))
            return unit

        ledger = self._ledger_command(work_item_id, decide).ledger
        assert ledger is not None
        return ledger

    def can_coordinate_automatically(
        self, work_item_id: UUID, *, user_message: bool = False
    ) -> bool:
        user_message = inputs.flag(user_message, "user_message")
        try:
            item = self.repo.work_item(work_item_id)
        except NotFound:
            return False
        if item.status in wi.TERMINAL or item.stopped:
            return False
        retry_after = self.repo.ledger(work_item_id).retry_after
        return user_message or retry_after is None or self.clock.now() >= retry_after


def _not_the_items(run_id: UUID, work_item_id: UUID) -> CommandRefused:
    """A Run that is not one of the item's, named by its id or by its Claim: refused as
    ``retry``, ``add_input`` and ``complete`` refuse an Action or Run of another item
    (ADR-0106). A made-up id is refused alike: from the item, both are none of its own."""
    return CommandRefused(f"Run {run_id} is not a Run of WorkItem {work_item_id}")


def _estimate(request: object) -> int:
    """The request's estimate. Its size is not bounded here: a large request is
    what the budget is there to charge (a request that is no JSON is refused)."""
    mapping = inputs.mapping(request, "request")
    inputs.json_document(mapping, "the request")
    return rl.estimate_tokens(mapping)
