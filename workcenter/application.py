"""The service facade: every command and read of Workcenter, one line each.

``WorkCenter`` owns no logic of its own. The composition root
(``workcenter.bootstrap``) wires the parts: the repository and its unit of work,
the registry of read models, and the command handlers by area (WorkItem
commands, Run commands, budget commands, reads) that each method delegates to.
The operator's verbs over the whole store are one part, ``maintenance``. The
ledger's Coordinator side is not here: the Coordinator drives it under its turn
fence (ADR-0039).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from datetime import datetime
from types import EllipsisType
from typing import Any, Self
from uuid import UUID

import workcenter.bootstrap as bootstrap
from workcenter.bootstrap import EventStore
from workcenter.domain import action as act
from workcenter.domain import conversation as conv
from workcenter.domain import resource_ledger as rl
from workcenter.domain import work_item as wi
from workcenter.domain.actor import Actor
from workcenter.domain.errors import InvalidInput, StaleRun
from workcenter.domain.goal_progress import GoalProgress
from workcenter.domain.model import DomainEvent
from workcenter.domain.outcome import RunReport
from workcenter.projections.audit import DEFAULT_LIMIT, AuditRow
from workcenter.projections.detail import Detail, DetailView
from workcenter.projections.inline import InlineProjections
from workcenter.projections.work_queue import WorkQueue, WorkQueueView
from workcenter.service_layer.handlers.claim import Claim
from workcenter.service_layer.handlers.coordinator import PostedMessage
from workcenter.service_layer.handlers.coordinator_rules import DecisionRules
from workcenter.service_layer.handlers.coordinator_step import Coordinator, StepResult
from workcenter.service_layer.handlers.worker_protocol import WorkerProtocol
from workcenter.service_layer.maintenance import Maintenance
from workcenter.service_layer.ports import Clock, CoordinatorProvider, SystemClock
from workcenter.service_layer.queries.browser import WebReads
from workcenter.service_layer.queries.changes import ChangeFeed
from workcenter.service_layer.repository import SNAPSHOT_INTERVAL, WriteContention

__all__ = [
    "SNAPSHOT_INTERVAL",
    "Actor",
    "Claim",
    "Clock",
    "EventStore",
    "SystemClock",
    "WorkCenter",
    "WriteContention",
]


class WorkCenter:
    """The embeddable service: every command and read of Workcenter."""

    def __init__(
        self,
        store: EventStore,
        *,
        clock: Clock | None = None,
        boot_id: str | None = None,
        inline_projections: bool | None = None,
        coordinator_rules: DecisionRules | None = None,
    ):
        parts = bootstrap.compose(
            store,
            clock=clock,
            boot_id=boot_id,
            inline_projections=inline_projections,
            coordinator_rules=coordinator_rules,
        )
        self.store = parts.store
        self.clock = parts.clock
        self.boot_id = parts.boot_id
        self._read_models = parts.read_models
        self._repository = parts.repository
        self._items = parts.work_items
        self._runs = parts.runs
        self._budget = parts.budget
        self._coordinator = parts.coordinator
        self._reads = parts.reads
        # The parts a caller reaches as a whole rather than verb by verb:
        # a browser's reads beside the detail DTO (summaries, progress, budget, timeline);
        self.web_reads: WebReads = parts.web_reads
        # the event sequence as a change feed (positions, types, owners; no payloads);
        self.changes: ChangeFeed = parts.changes
        # the operator's verbs over the whole store (verify the history, take its
        # anchor, replay the decisions, the read models' status and rebuild);
        self.maintenance: Maintenance = parts.maintenance
        # a remote worker's verbs: claims under its own boot id, Run commands and model
        # requests by fence, a repeated finish or settlement recognised (ADR-0063).
        self.worker_protocol: WorkerProtocol = parts.worker_protocol

    @classmethod
    def open(
        cls,
        db: str | os.PathLike[str] | None = None,
        *,
        clock: Clock | None = None,
        boot_id: str | None = None,
        inline_projections: bool | None = None,
        sqlite_synchronous: str | None = None,
        create: bool = True,
        coordinator_rules: DecisionRules | None = None,
    ) -> Self:
        """Open the store at ``db``, ``$WORKCENTER_DB`` or ./workcenter.db (creating it
        unless ``create`` is false): a SQLite file, or a ``postgresql://`` URL whose
        ``?schema=`` (else ``$WORKCENTER_SCHEMA``, else ``workcenter``) holds it
        (ADR-0032). ``StoreUnavailable`` if it cannot be opened, or is another
        application's file; a refused file is left as it was; ``StoreKeyRefused`` if
        ``$WORKCENTER_CIPHER_KEY`` does not open it (ADR-0033).

        ``sqlite_synchronous`` (FULL or NORMAL, else ``$WORKCENTER_SQLITE_SYNCHRONOUS``,
        else NORMAL) is what a commit waits for (ADR-0018)."""
        bootstrap.check_open(db, clock, boot_id, inline_projections, create, coordinator_rules)
        return bootstrap.open_store(
            db,
            sqlite_synchronous,
            create,
            lambda store: cls(
                store,
                clock=clock,
                boot_id=boot_id,
                inline_projections=inline_projections,
                coordinator_rules=coordinator_rules,
            ),
        )

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # --- the parts' views, for the CLI, the runner and tests ------------------

    @property
    def inline_projections(self) -> bool:
        return self._read_models.inline

    @inline_projections.setter
    def inline_projections(self, inline: bool) -> None:
        self._read_models.inline = inline

    @property
    def projections(self) -> InlineProjections:
        return self._read_models.projections

    @property
    def work_queue(self) -> WorkQueueView:
        return self._read_models.view(WorkQueue.name)

    @property
    def details(self) -> DetailView:
        return self._read_models.view(Detail.name)

    # --- loading --------------------------------------------------------------

    def work_item(self, work_item_id: UUID, version: int | None = None) -> wi.WorkItemState:
        return self._repository.work_item(work_item_id, version)

    def action(self, action_id: UUID, version: int | None = None) -> act.ActionState:
        return self._repository.action(action_id, version)

    def ledger(self, work_item_id: UUID, version: int | None = None) -> rl.LedgerState:
        """The WorkItem's ResourceLedger."""
        return self._repository.ledger(work_item_id, version)

    def actions(self, item: wi.WorkItemState, *statuses: str) -> dict[UUID, act.ActionState]:
        """The item's Actions (only those whose mirrored status is in ``statuses``, if given)."""
        if not isinstance(item, wi.WorkItemState):
            raise InvalidInput(
                f"actions takes a WorkItem's state (wc.work_item(id)), not {type(item).__name__}"
            )
        return self._repository.actions(item, *statuses)

    def event_count(self) -> int:
        return self._repository.event_count()

    # --- WorkItem commands ----------------------------------------------------

    def create_work_item(
        self,
        *,
        title: str,
        goal: str,
        acceptance_criteria: list[str] | tuple[str, ...] = (),
        delivery_target: str | None = None,
        mode: wi.Mode = "dynamic",
        stages: Sequence[str | Mapping[str, Any]] | None = None,
        start: bool = False,
        limits: Mapping[str, int] | None = None,
        actor: Actor | str | None = None,
        request_id: str | None = None,
    ) -> wi.WorkItemState:
        """Create a WorkItem and its ResourceLedger (default limits, or ``limits``).

        A linear item's ``stages`` are names or ``{"type", "maxAttempts"}`` objects. Texts
        and lists are bounded (docs/limits.md): input past a bound is refused. With a
        ``request_id`` the create may be sent again after a lost answer: the same input
        answers the WorkItem it made, as it is now; other input is ``RequestIdUsed``."""
        return self._items.create_work_item(
            title=title,
            goal=goal,
            acceptance_criteria=acceptance_criteria,
            delivery_target=delivery_target,
            mode=mode,
            stages=stages,
            start=start,
            limits=limits,
            actor=actor,
            request_id=request_id,
        )

    def update_contract(
        self,
        work_item_id: UUID,
        *,
        expected_version: int,
        title: str | None = None,
        goal: str | None = None,
        acceptance_criteria: list[str] | tuple[str, ...] | None = None,
        delivery_target: str | EllipsisType | None = ...,
        actor: Actor | str | None = None,
    ) -> wi.WorkItemState:
        """Edit the contract; a title, goal, criteria or target edit conflicts with any
        other contract edit after ``expected_version``."""
        return self._items.update_contract(
            work_item_id,
            expected_version=expected_version,
            title=title,
            goal=goal,
            acceptance_criteria=acceptance_criteria,
            delivery_target=delivery_target,
            actor=actor,
        )

    def start(
        self,
        work_item_id: UUID,
        *,
        expected_version: int | None = None,
        actor: Actor | str | None = None,
    ) -> wi.WorkItemState:
        return self._items.start(work_item_id, expected_version=expected_version, actor=actor)

    def cancel(
        self,
        work_item_id: UUID,
        *,
        reason: str = "",
        expected_version: int | None = None,
        actor: Actor | str | None = None,
    ) -> wi.WorkItemState:
        """Cancel the item; with ``expected_version``, refused when its contract or
        lifecycle changed after that version (a caller acting on what it saw)."""
        return self._items.cancel(
            work_item_id, reason=reason, expected_version=expected_version, actor=actor
        )

    def resume(
        self,
        work_item_id: UUID,
        *,
        expected_version: int,
        expected_ledger_version: int,
        actor: Actor | str | None = None,
    ) -> wi.WorkItemState:
        """Resume a cancelled item, or one its budget stopped (after extending it).

        ``expected_ledger_version`` is the ledger version the user saw: a stop, extend
        or resume recorded after it refuses the resume (the execution-control check)."""
        return self._items.resume(
            work_item_id,
            expected_version=expected_version,
            expected_ledger_version=expected_ledger_version,
            actor=actor,
        )

    def retry(
        self,
        work_item_id: UUID,
        action_id: UUID,
        *,
        expected_version: int,
        expected_generation: int | None = None,
        answer: str = "",
        actor: Actor | str | None = None,
    ) -> wi.WorkItemState:
        return self._items.retry(
            work_item_id,
            action_id,
            expected_version=expected_version,
            expected_generation=expected_generation,
            answer=answer,
            actor=actor,
        )

    def guide(
        self,
        work_item_id: UUID,
        action_id: UUID,
        *,
        expected_version: int,
        expected_generation: int | None = None,
        guidance: str,
        actor: Actor | str | None = None,
    ) -> wi.WorkItemState:
        return self._items.guide(
            work_item_id,
            action_id,
            expected_version=expected_version,
            expected_generation=expected_generation,
            guidance=guidance,
            actor=actor,
        )

    def add_input(
        self,
        work_item_id: UUID,
        action_id: UUID,
        *,
        expected_version: int,
        expected_generation: int,
        text: str,
        expected_run_id: UUID | None = None,
        actor: Actor | str | None = None,
    ) -> act.ActionState:
        """Send input to a ready Action (a new generation) or to the Run of a running one
        (queued for it; refused if that Run, its generation or its lease is stale)."""
        return self._items.add_input(
            work_item_id,
            action_id,
            expected_version=expected_version,
            expected_generation=expected_generation,
            text=text,
            expected_run_id=expected_run_id,
            actor=actor,
        )

    def plan_actions(
        self,
        work_item_id: UUID,
        *,
        expected_version: int,
        actions: Sequence[Mapping[str, Any]],
        close_actions: list[Mapping[str, Any]] = (),  # type: ignore[assignment]
        supersede_action_ids: list[UUID] = (),  # type: ignore[assignment]
        goal_refs: Mapping[str, Any] | None = None,
        rationale: str = "",
        actor: Actor | str | None = None,
    ) -> wi.WorkItemState:
        """A plan made outside a Coordinator turn (the Coordinator's unless ``actor`` says
        otherwise)."""
        return self._items.plan_actions(
            work_item_id,
            expected_version=expected_version,
            actions=actions,
            close_actions=close_actions,
            supersede_action_ids=supersede_action_ids,
            goal_refs=goal_refs,
            rationale=rationale,
            actor=actor,
        )

    def complete(
        self,
        work_item_id: UUID,
        *,
        expected_version: int,
        completion: Mapping[str, Any],
        actor: Actor | str | None = None,
    ) -> wi.WorkItemState:
        """A completion made outside a Coordinator turn (the Coordinator's unless ``actor``
        says otherwise)."""
        return self._items.complete(
            work_item_id, expected_version=expected_version, completion=completion, actor=actor
        )

    # --- Run commands ---------------------------------------------------------

    def claim_next(
        self, worker: str, *, lease_seconds: float = 60.0, actor: Actor | str | None = None
    ) -> Claim | None:
        """Claim the oldest claimable Action, or return None when there is none.

        Candidates come from the work-queue read model; each is re-checked on its
        aggregates, and a stale candidate or a lost race moves on to the next.
        ``lease_seconds`` is from 1 s to 24 h (86,400 s). The claim is by the worker
        ``worker@boot`` unless ``actor`` says otherwise.
        """
        return self._runs.claim_next(worker, lease_seconds, actor)

    def renew_lease(
        self,
        claim: Claim | act.RunRef,
        *,
        lease_seconds: float = 60.0,
        actor: Actor | str | None = None,
    ) -> bool:
        """Extend the lease by ``lease_seconds`` (1 s to 24 h) from now; False when the
        Run is no longer live (stop working on it)."""
        return self._runs.renew_lease(claim, lease_seconds, actor)

    def finish_run(
        self,
        claim: Claim | act.RunRef,
        report: RunReport | Mapping[str, Any],
        *,
        actor: Actor | str | None = None,
    ) -> act.ActionState:
        """Record the Run's outcome: completed, waiting, retryable or failed.

        By the claim's worker unless ``actor`` says otherwise. The same finish sent again
        (its answer lost) answers the Action as it is now and writes nothing; any other
        finish of an ended Run is ``StaleRun``."""
        try:
            return self._runs.finish_run(claim, report, actor)
        except StaleRun as stale:
            ref = claim.ref if isinstance(claim, Claim) else claim
            return self.worker_protocol.finished_before(stale, ref, report)

    def interrupt(
        self,
        claim: Claim | act.RunRef,
        *,
        reason: str = "",
        progress: act.RunProgress | Mapping[str, Any] | None = None,
        actor: Actor | str | None = None,
    ) -> act.ActionState:
        """Give the Run up gracefully; ``progress`` ({summary, response, stats,
        checkpoint}) is its final response, execution stats and last 16 tool events,
        recorded as the lease is released. By the
        claim's worker unless ``actor`` says otherwise."""
        return self._runs.interrupt(claim, reason, progress, actor)

    def defer(
        self, claim: Claim | act.RunRef, *, actor: Actor | str | None = None
    ) -> act.ActionState:
        """The workspace is busy: end the Run as deferred and give its attempt back.

        By the claim's worker unless ``actor`` says otherwise."""
        return self._runs.defer(claim, actor)

    def pending_input(self, claim: Claim | act.RunRef) -> tuple[act.QueuedInput, ...]:
        return self._runs.pending_input(claim)

    def consume_input(
        self,
        claim: Claim | act.RunRef,
        input_ids: Sequence[UUID],
        *,
        actor: Actor | str | None = None,
    ) -> act.ActionState:
        return self._runs.consume_input(claim, input_ids, actor)

    def recover(self, *, actor: Actor | str | None = None) -> list[UUID]:
        """End every Run whose lease expired (ADR-0048): a live Run of any process, of
        any worker name or boot id, is never ended here. Recovery is the operator's
        unless ``actor`` says otherwise.
        """
        return self._runs.recover(actor)

    # --- budget commands ------------------------------------------------------

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

        A denial is returned (and a stopping denial saved); the caller must not send
        the request. Only a stop writes the WorkItem too. Requests are by the user (the
        embedding caller) unless ``actor`` names the worker or Coordinator that makes
        them; Coordinator requests default to it. A Run's request given its ``run`` (the
        Claim) is admitted only while the Run is live, as ``finish_run`` is (``StaleRun``
        otherwise, nothing written; ADR-0049); by its ``run_id`` alone, unfenced, of a
        Run of the item. A Run that is not the item's, by either form, is
        ``CommandRefused``, as an Action of another item is (ADR-0106)."""
        return self._budget.reserve_request(
            work_item_id,
            request=request,
            kind=kind,
            run_id=run_id,
            request_id=request_id,
            actor=actor,
            run=run,
        )

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
        return self._budget.settle_request(
            work_item_id, request_id, usage=usage, complete=complete, actor=actor
        )

    def extend_budget(
        self,
        work_item_id: UUID,
        *,
        expected_version: int,
        additions: Mapping[str, Any],
        actor: Actor | str | None = None,
    ) -> rl.LedgerState:
        """A user raises limits. Clears no stop: resume does, once nothing is spent."""
        return self._budget.extend_budget(
            work_item_id, expected_version=expected_version, additions=additions, actor=actor
        )

    # --- the Coordinator ------------------------------------------------------

    def post_user_message(
        self,
        work_item_id: UUID,
        text: str,
        *,
        client_message_id: str | None = None,
        expected_version: int | None = None,
        actor: Actor | str | None = None,
    ) -> PostedMessage:
        """Begin a user turn, answered by the next Coordinator step; a known client id
        returns its first turn and writes nothing (coordinator.md 9.2)."""
        return self._coordinator.post_user_message(
            work_item_id,
            text,
            client_message_id=client_message_id,
            expected_version=expected_version,
            actor=actor,
        )

    def conversation(self, work_item_id: UUID) -> conv.ConversationState | None:
        """The item's messages, turns, mailbox and provider turns (None: none yet)."""
        return self._coordinator.conversation(work_item_id)

    def coordinate_once(
        self,
        provider: CoordinatorProvider,
        *,
        lease_seconds: float = 60.0,
        limit: int = 100,
        steps: int | None = None,
    ) -> list[StepResult]:
        """Recover, then run one Coordinator step through ``provider`` per due wake, of
        the ``limit`` oldest (``steps``: only the first that many that run)."""
        return Coordinator(self._coordinator, provider, lease_seconds).run_due(limit, steps)

    def recover_coordinator(self, *, at_open: bool = True) -> int:
        """Coordinator crash recovery (expired claims, unknown dispatches, orphaned turns)."""
        return self._coordinator.recover(at_open=at_open)

    # --- reads ----------------------------------------------------------------

    def goal_progress(self, work_item_id: UUID) -> GoalProgress:
        return self._reads.goal_progress(work_item_id)

    def list_work_items(
        self, status: str | None = None, *, limit: int | None = None, newest: bool = False
    ) -> list[dict[str, Any]]:
        """The WorkItems (in ``status`` only, if given), oldest first (``newest``: newest
        first): every one, or the first ``limit``."""
        return self._reads.list_work_items(status, limit, newest)

    def detail(self, work_item_id: UUID, *, caught_up: bool = False) -> dict[str, Any]:
        """The item's detail DTO from the detail read model (as of the item's latest event):
        with inline projections on it reflects every command committed before the read
        (caught up first after a crash); off, as fresh as the runner made it (ADR-0019),
        unless ``caught_up``: then this process brings the view up to the newest event
        first, as a runner would (a command's answer shows what the command did,
        ADR-0122)."""
        return self._reads.detail(work_item_id, caught_up=caught_up)

    def history(self, work_item_id: UUID) -> list[DomainEvent]:
        """The WorkItem's events in order (its Action events are in ``action_history``)."""
        return self._reads.history(work_item_id)

    def action_history(self, action_id: UUID) -> list[DomainEvent]:
        return self._reads.action_history(action_id)

    def audit(
        self,
        work_item_id: UUID,
        *,
        limit: int | None = DEFAULT_LIMIT,
        action_id: UUID | None = None,
        run_id: UUID | None = None,
        type: str | None = None,
        until: int | None = None,
    ) -> list[AuditRow]:
        """The item's events (its Actions' and ledger's too) read from the event store,
        in position order: the newest ``limit`` that match the filters (up to position
        ``until``, if given), each with the actor its command recorded."""
        return self._reads.audit(
            work_item_id, limit=limit, action_id=action_id, run_id=run_id, type=type, until=until
        )

    def state_at(
        self, work_item_id: UUID, *, version: int | None = None, at: datetime | None = None
    ) -> tuple[int, wi.WorkItemState, dict[UUID, act.ActionState]]:
        """(position, item, its Actions) as they were at WorkItem ``version`` or at time ``at``.

        Each Action is loaded at its latest version written at or before the position.
        """
        return self._reads.state_at(work_item_id, version, at)
