"""The WorkItem aggregate: a goal with acceptance criteria and a delivery target.

It owns the contract (and its contract revision), its status, and the plan:
which Actions exist and, mirrored from their own streams in the same write,
their statuses. The mirror lets a command derive the item's status without
loading every Action.

Reads top to bottom: values, state, events, evolve, decisions.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any, ClassVar, Literal, TypeGuard, get_args
from uuid import UUID

from workcenter.domain import bounds, inputs
from workcenter.domain.actor import Actor
from workcenter.domain.errors import CommandRefused, InvalidInput
from workcenter.domain.model import AggregateState, DomainEvent, Emitter, Immutable, no_start

WorkItemStatus = Literal[
    "draft", "ready", "running", "waiting", "needs_attention", "done", "cancelled"
]
DeliveryTarget = Literal["response", "workspace_files", "pull_request", "merge"]
Mode = Literal["dynamic", "linear"]
STATUSES: tuple[str, ...] = get_args(WorkItemStatus)
DELIVERY_TARGETS: tuple[str, ...] = get_args(DeliveryTarget)
DEFAULT_STAGES: tuple[str, ...] = ("triage", "implement", "review", "deliver")
TERMINAL: frozenset[str] = frozenset({"done", "cancelled"})
ACTIVE: frozenset[str] = frozenset({"ready", "running", "waiting", "needs_attention"})


def is_delivery_target(value: str | None) -> TypeGuard[DeliveryTarget]:
    return value in DELIVERY_TARGETS


class PlanEntry(Immutable):
    action_id: UUID
    sequence: int
    type: str
    status: str


class AcceptanceResult(Immutable):
    criterion: str
    status: Literal["passed"]
    evidence_run_ids: tuple[UUID, ...]


class ResultOutput(Immutable):
    kind: str
    label: str
    ref: str
    status: str | None = None
    action_id: UUID
    run_id: UUID


class ResultResponse(Immutable):
    run_id: UUID
    summary: str
    evidence: tuple[str, ...] = ()


class FinalResult(Immutable):
    summary: str
    acceptance_results: tuple[AcceptanceResult, ...] = ()
    evidence_run_ids: tuple[UUID, ...] = ()
    residual_risks: tuple[str, ...] = ()
    outputs: tuple[ResultOutput, ...] = ()
    responses: tuple[ResultResponse, ...] = ()


# --- state -------------------------------------------------------------------


class WorkItemState(AggregateState):
    mode: Mode
    title: str
    goal: str
    acceptance_criteria: tuple[str, ...]
    delivery_target: DeliveryTarget | None
    contract_revision: int
    status: WorkItemStatus
    stages: tuple[str, ...]
    plan: tuple[PlanEntry, ...]
    current_action_id: UUID | None
    final_result: FinalResult | None
    created_at: datetime
    updated_at: datetime
    # Mirrors the ResourceLedger's stop (saved in the same write), so commands that
    # do not load the ledger still know the item admits no claim.
    stopped: str | None = None
    # Per stage (by position); empty in snapshots taken before stages had limits.
    stage_max_attempts: tuple[int, ...] = ()

    def max_attempts_for(self, stage: str) -> int | None:
        """The attempt limit of a linear stage's Actions (None: the default)."""
        if stage not in self.stages:
            return None
        index = self.stages.index(stage)
        limits = self.stage_max_attempts
        return limits[index] if index < len(limits) else None

    @property
    def next_sequence(self) -> int:
        return max((e.sequence for e in self.plan), default=0) + 1

    def entry(self, action_id: UUID) -> PlanEntry | None:
        return next((e for e in self.plan if e.action_id == action_id), None)

    def entries(self, *statuses: str) -> list[PlanEntry]:
        return [e for e in self.plan if e.status in statuses]


# --- events ------------------------------------------------------------------


class WorkItemEvent(DomainEvent):
    pass


class WorkItemCreated(WorkItemEvent):
    """v2 adds each linear stage's attempt limit (ADR-0015); v1 stages all had 2.
    v3 records whether the item was started as it was created (ADR-0046): such a create
    writes no ``WorkItemStarted``; before v3 it did, so a v2 event was not started."""

    class_version: ClassVar[int] = 3

    mode: Mode
    title: str
    goal: str
    acceptance_criteria: tuple[str, ...]
    delivery_target: DeliveryTarget | None
    stages: tuple[str, ...]
    stage_max_attempts: tuple[int, ...]
    started: bool

    @staticmethod
    def upcast_v1_v2(state: dict[str, Any]) -> None:
        state["stage_max_attempts"] = [2] * len(state["stages"])

    @staticmethod
    def upcast_v2_v3(state: dict[str, Any]) -> None:
        state["started"] = False


class TitleChanged(WorkItemEvent):
    title: str


class ContractRefined(WorkItemEvent):
    """Goal, criteria or delivery target changed: a new contract revision."""

    goal: str
    acceptance_criteria: tuple[str, ...]
    delivery_target: DeliveryTarget | None
    contract_revision: int
    changed_fields: tuple[str, ...]


class WorkItemStarted(WorkItemEvent):
    pass


class WorkItemCancelled(WorkItemEvent):
    reason: str = ""


class WorkItemResumed(WorkItemEvent):
    pass


class ActionAdded(WorkItemEvent):
    """v2: ``current`` says the item took the added Action as its current one and became
    ready, a status that follows from this event and needs no ``StatusChanged`` of its
    own (ADR-0046). Before v2 a ``StatusChanged`` always said so."""

    class_version: ClassVar[int] = 2

    action_id: UUID
    sequence: int
    type: str
    current: bool

    @staticmethod
    def upcast_v1_v2(state: dict[str, Any]) -> None:
        state["current"] = False


class ActionStatusRecorded(WorkItemEvent):
    """Mirrors an Action's status change, saved in the same write as the Action's event.
    v2: ``current`` says the item took that Action as its current one with the same
    status (ready or running), with no ``StatusChanged`` of its own (ADR-0046)."""

    class_version: ClassVar[int] = 2

    action_id: UUID
    status: str
    current: bool

    @staticmethod
    def upcast_v1_v2(state: dict[str, Any]) -> None:
        state["current"] = False


# The item statuses an Action's own status can carry over to its item (``current``).
CARRIED_STATUSES: frozenset[str] = frozenset({"ready", "running"})


class StatusChanged(WorkItemEvent):
    status: WorkItemStatus
    current_action_id: UUID | None


class WorkItemCompleted(WorkItemEvent):
    final_result: FinalResult


class BudgetStopRecorded(WorkItemEvent):
    """The item's ResourceLedger stopped execution (code as the ledger recorded it)."""

    code: str


class BudgetStopCleared(WorkItemEvent):
    pass


# --- evolve ------------------------------------------------------------------


def evolve(state: WorkItemState | None, event: WorkItemEvent) -> WorkItemState:
    if state is None:
        if not isinstance(event, WorkItemCreated):
            raise no_start(event)
        return WorkItemState(
            id=event.originator_id,
            version=event.originator_version,
            mode=event.mode,
            title=event.title,
            goal=event.goal,
            acceptance_criteria=event.acceptance_criteria,
            delivery_target=event.delivery_target,
            contract_revision=1,
            status="draft",
            stages=event.stages,
            stage_max_attempts=event.stage_max_attempts,
            plan=(),
            current_action_id=None,
            final_result=None,
            created_at=event.timestamp,
            updated_at=event.timestamp,
        )
    changes: dict[str, object] = {
        "version": event.originator_version,
        "updated_at": event.timestamp,
    }
    match event:
        case TitleChanged():
            changes["title"] = event.title
        case ContractRefined():
            changes |= {
                "goal": event.goal,
                "acceptance_criteria": event.acceptance_criteria,
                "delivery_target": event.delivery_target,
                "contract_revision": event.contract_revision,
            }
        case WorkItemStarted() | WorkItemResumed():
            pass  # the status follows in a StatusChanged of the same write
        case WorkItemCancelled():
            changes |= {"status": "cancelled", "current_action_id": None}
        case ActionAdded():
            entry = PlanEntry(
                action_id=event.action_id, sequence=event.sequence, type=event.type, status="ready"
            )
            changes["plan"] = (*state.plan, entry)
            if event.current:
                changes |= {"status": "ready", "current_action_id": event.action_id}
        case ActionStatusRecorded():
            changes["plan"] = tuple(
                e.model_copy(update={"status": event.status})
                if e.action_id == event.action_id
                else e
                for e in state.plan
            )
            if event.current:
                changes |= {"status": event.status, "current_action_id": event.action_id}
        case StatusChanged():
            changes |= {"status": event.status, "current_action_id": event.current_action_id}
        case BudgetStopRecorded():
            changes["stopped"] = event.code
        case BudgetStopCleared():
            changes["stopped"] = None
        case WorkItemCompleted():
            changes |= {
                "status": "done",
                "current_action_id": None,
                "final_result": event.final_result,
            }
        case _:
            raise TypeError(f"unknown WorkItem event {event!r}")
    return state.model_copy(update=changes)


def fold(state: WorkItemState | None, events: Iterable[WorkItemEvent]) -> WorkItemState | None:
    for event in events:
        state = evolve(state, event)
    return state


# --- derived status ----------------------------------------------------------


def derived_status(state: WorkItemState) -> tuple[WorkItemStatus, UUID | None]:
    """The status of a concurrent (dynamic) item from its Actions' statuses.

    Running, else ready, else the first blocker, else running with no Action:
    the Coordinator's turn.
    """
    plan = sorted(state.plan, key=lambda e: (e.sequence, e.action_id))
    for wanted, status in (("running", "running"), ("ready", "ready")):
        for entry in plan:
            if entry.status == wanted:
                return status, entry.action_id  # type: ignore[return-value]
    for entry in plan:
        if entry.status == "waiting":
            return "waiting", entry.action_id
        if entry.status == "failed":
            return "needs_attention", entry.action_id
    return "running", None


# --- decisions ---------------------------------------------------------------


class Contract(Immutable):
    """Validated contract fields, as a user or a triage patch states them."""

    title: str
    goal: str
    acceptance_criteria: tuple[str, ...]
    delivery_target: DeliveryTarget | None


def validate_contract(
    *,
    title: object,
    goal: object,
    acceptance_criteria: object,
    delivery_target: object,
) -> Contract:
    """The contract as stated, stripped; a text or list past its bound is refused, not cut."""
    if not isinstance(delivery_target, str | None) or (
        delivery_target is not None and delivery_target not in DELIVERY_TARGETS
    ):
        raise InvalidInput(
            f"delivery_target must be one of {', '.join(DELIVERY_TARGETS)} or null, "
            f"not {delivery_target!r}"
        )
    return Contract(
        title=inputs.text(title, "title", bounds.TITLE, required=True),
        goal=inputs.text(goal, "goal", bounds.GOAL, required=True),
        acceptance_criteria=inputs.texts(
            acceptance_criteria,
            "acceptance_criteria",
            limit=bounds.CRITERION,
            count=bounds.CRITERIA,
        ),
        delivery_target=delivery_target,
    )


def create(
    *,
    work_item_id: UUID,
    mode: Mode,
    contract: Contract,
    stages: tuple[str, ...],
    stage_max_attempts: tuple[int, ...],
    at: datetime,
    by: Actor,
    started: bool = False,
) -> list[WorkItemEvent]:
    emit: Emitter[WorkItemEvent] = Emitter(work_item_id, 0, at, by)
    emit(
        WorkItemCreated,
        mode=mode,
        title=contract.title,
        goal=contract.goal,
        acceptance_criteria=contract.acceptance_criteria,
        delivery_target=contract.delivery_target,
        stages=stages,
        stage_max_attempts=stage_max_attempts,
        started=started,
    )
    return emit.events


def refuse_if_terminal(state: WorkItemState, verb: str) -> None:
    if state.status in TERMINAL:
        raise CommandRefused(f"Cannot {verb} a WorkItem that is {state.status}")
