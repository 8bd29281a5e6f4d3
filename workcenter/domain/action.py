"""The Action aggregate: one typed unit of work and the Runs that execute it.

A Run is an entity of its Action. Workers are fenced by the Run's lease epoch
and boot id; the aggregate version is never used as a fencing token.

Reads top to bottom: state, events, evolve, decisions. A new generation and
invalidation are decided in ``action_generation``, input in ``action_input``.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any, ClassVar, Literal
from uuid import UUID, uuid5

from pydantic import Field

# The Action's spec and the Run entity live in their own modules; their names
# stay importable from here, where the rest of the code has always found them.
from workcenter.domain.action_spec import Brief as Brief
from workcenter.domain.action_spec import ContextEntry as ContextEntry
from workcenter.domain.action_spec import WorkspaceMode as WorkspaceMode
from workcenter.domain.action_spec import spec_hash as spec_hash
from workcenter.domain.actor import Actor
from workcenter.domain.errors import CommandRefused, StaleRun
from workcenter.domain.model import AggregateState, DomainEvent, Emitter, no_start
from workcenter.domain.run import DEFERRED_REASON as DEFERRED_REASON
from workcenter.domain.run import UNANSWERED_REASON as UNANSWERED_REASON
from workcenter.domain.run import QueuedInput as QueuedInput
from workcenter.domain.run import ReviewDecision as ReviewDecision
from workcenter.domain.run import Run as Run
from workcenter.domain.run import RunProgress as RunProgress
from workcenter.domain.run import RunRef as RunRef
from workcenter.domain.run import RunResult as RunResult
from workcenter.domain.run import RunStatus as RunStatus
from workcenter.domain.run import run_id_for as run_id_for

ActionStatus = Literal[
    "ready", "running", "waiting", "completed", "failed", "superseded", "cancelled", "closed"
]

OPEN_STATUSES: frozenset[str] = frozenset({"ready", "running", "waiting", "failed"})
DEFAULT_MAX_ATTEMPTS = 2


# --- state -------------------------------------------------------------------


class ActionState(AggregateState):
    work_item_id: UUID
    sequence: int
    type: str
    brief: Brief
    workspace_mode: WorkspaceMode
    max_attempts: int
    contract_revision: int
    context: tuple[ContextEntry, ...]
    status: ActionStatus
    attempt: int
    lease_epoch: int
    current_run_id: UUID | None
    generation: int
    spec_hash: str
    result_run_id: UUID | None
    close_reason: str | None
    runs: tuple[Run, ...]
    updated_at: datetime
    # Input sent while a Run of this generation was running; dropped with the generation.
    inputs: tuple[QueuedInput, ...] = ()
    source_action_ids: tuple[UUID, ...] = ()

    @property
    def current_run(self) -> Run | None:
        return self.run(self.current_run_id) if self.current_run_id else None

    def run(self, run_id: UUID) -> Run | None:
        for run in reversed(self.runs):
            if run.id == run_id:
                return run
        return None

    @property
    def result_run(self) -> Run | None:
        return self.run(self.result_run_id) if self.result_run_id else None

    @property
    def is_mutating(self) -> bool:
        return self.workspace_mode != "read"

    @property
    def counted_attempts(self) -> int:
        """Runs ever claimed for the Action, less the deferred ones that gave theirs back."""
        return sum(1 for run in self.runs if not run.deferred)

    @property
    def unconsumed_inputs(self) -> tuple[QueuedInput, ...]:
        return tuple(i for i in self.inputs if i.consumed_by_run_id is None)


def action_id_for(work_item_id: UUID, sequence: int) -> UUID:
    """Derived, so two decisions racing to plan the same sequence collide in the store."""
    return uuid5(work_item_id, f"action/{sequence}")


# --- events ------------------------------------------------------------------


class ActionEvent(DomainEvent):
    pass


class ActionPlanned(ActionEvent):
    work_item_id: UUID
    sequence: int
    type: str
    brief: Brief
    workspace_mode: WorkspaceMode
    max_attempts: int
    contract_revision: int
    context: tuple[ContextEntry, ...]
    spec_hash: str
    # Earlier Actions of the item this one builds on (coordinator.md 4.3): audit links,
    # never scheduling, and no part of the spec. Absent when empty, so events without
    # links serialise exactly as they did before the field existed.
    source_action_ids: tuple[UUID, ...] = Field(default=(), exclude_if=lambda ids: not ids)


class RunClaimed(ActionEvent):
    run_id: UUID
    ordinal: int
    worker: str
    boot_id: str
    lease_epoch: int
    expires_at: datetime
    attempt: int
    # The id the worker chose for its claim (ADR-0114). Absent when None, so a claim
    # without one serialises exactly as before the field existed, and older events load.
    client_claim_id: str | None = Field(default=None, exclude_if=lambda value: value is None)


class LeaseRenewed(ActionEvent):
    """v2 records the length of the renewed lease (ADR-0010); v1 only its new expiry."""

    class_version: ClassVar[int] = 2

    run_id: UUID
    expires_at: datetime
    lease_seconds: float

    @staticmethod
    def upcast_v1_v2(state: dict[str, Any]) -> None:
        # A renewal's lease starts at the renewal, so v1 events carry it implicitly.
        expires_at = datetime.fromisoformat(state["expires_at"])
        timestamp = datetime.fromisoformat(state["timestamp"])
        state["lease_seconds"] = (expires_at - timestamp).total_seconds()


class RunFinished(ActionEvent):
    """The Run reached a terminal outcome it reported itself."""

    run_id: UUID
    outcome: Literal["completed", "waiting", "retryable", "failed"]
    result: RunResult
    action_status: ActionStatus
    # The digest of the report as sent (None before ADR-0063): a retried finish is known by it.
    report_digest: str | None = None


class RunInterrupted(ActionEvent):
    """The Run ended without an outcome: interrupted by its worker, or recovered
    after its process or lease ended. v2 adds the final progress a worker that
    stopped gracefully recorded (ADR-0015); v1 events recorded none."""

    class_version: ClassVar[int] = 2

    run_id: UUID
    run_status: Literal["interrupted", "superseded", "cancelled"]
    reason: str
    retryable: bool
    action_status: ActionStatus
    progress: RunProgress | None

    @staticmethod
    def upcast_v1_v2(state: dict[str, Any]) -> None:
        state["progress"] = None


class RunDeferred(ActionEvent):
    """The Run could not start (its workspace was busy): ended, and its attempt given back."""

    run_id: UUID
    reason: str
    attempt: int


class InputQueued(ActionEvent):
    """User input for the running Action, queued until a Run consumes it."""

    input_id: UUID
    text: str
    run_id: UUID


class InputConsumed(ActionEvent):
    """A Run took queued input into its work."""

    run_id: UUID
    input_ids: tuple[UUID, ...]


class ActionReset(ActionEvent):
    """A new generation in place (guidance, retry, resume): ready, attempt 0."""

    reason: Literal["guided", "retried", "resumed", "input"]
    context: tuple[ContextEntry, ...]
    contract_revision: int
    generation: int
    spec_hash: str
    lease_epoch: int
    ended_run_id: UUID | None


class ActionInvalidated(ActionEvent):
    """Superseded or cancelled, with the lease epoch bumped so no earlier Run advances it."""

    status: Literal["superseded", "cancelled"]
    reason: str
    lease_epoch: int
    ended_run_id: UUID | None


class ActionClosed(ActionEvent):
    reason: str


def status_after(event: ActionEvent) -> ActionStatus | None:
    """The Action's status right after ``event``; None when the event leaves it unchanged."""
    match event:
        case ActionPlanned() | ActionReset() | RunDeferred():
            return "ready"
        case RunClaimed():
            return "running"
        case RunFinished() | RunInterrupted():
            return event.action_status
        case ActionInvalidated():
            return event.status
        case ActionClosed():
            return "closed"
    return None


# --- evolve ------------------------------------------------------------------


def _update_run(runs: tuple[Run, ...], run_id: UUID | None, **changes: object) -> tuple[Run, ...]:
    if run_id is None:
        return runs
    return tuple(r.model_copy(update=changes) if r.id == run_id else r for r in runs)


def evolve(state: ActionState | None, event: ActionEvent) -> ActionState:
    """Apply one event. Pure: the same events always give the same state."""
    if state is None:
        if not isinstance(event, ActionPlanned):
            raise no_start(event)
        return ActionState(
            id=event.originator_id,
            version=event.originator_version,
            work_item_id=event.work_item_id,
            sequence=event.sequence,
            type=event.type,
            brief=event.brief,
            workspace_mode=event.workspace_mode,
            max_attempts=event.max_attempts,
            contract_revision=event.contract_revision,
            context=event.context,
            status="ready",
            attempt=0,
            lease_epoch=0,
            current_run_id=None,
            generation=1,
            spec_hash=event.spec_hash,
            result_run_id=None,
            close_reason=None,
            runs=(),
            updated_at=event.timestamp,
            source_action_ids=event.source_action_ids,
        )
    changes: dict[str, object] = {
        "version": event.originator_version,
        "updated_at": event.timestamp,
    }
    match event:
        case RunClaimed():
            run = Run(
                id=event.run_id,
                ordinal=event.ordinal,
                worker=event.worker,
                owner_boot_id=event.boot_id,
                lease_epoch=event.lease_epoch,
                started_at=event.timestamp,
                expires_at=event.expires_at,
                generation=state.generation,
                spec_hash=state.spec_hash,
                attempt=event.attempt,
                contract_revision=state.contract_revision,
                client_claim_id=event.client_claim_id,
            )
            changes |= {
                "status": "running",
                "attempt": event.attempt,
                "lease_epoch": event.lease_epoch,
                "current_run_id": event.run_id,
                "runs": (*state.runs, run),
            }
        case LeaseRenewed():
            changes["runs"] = _update_run(state.runs, event.run_id, expires_at=event.expires_at)
            # A renewal is bookkeeping: it must not reorder the claim queue.
            changes.pop("updated_at")
        case RunFinished():
            changes |= {
                "status": event.action_status,
                "current_run_id": None,
                "runs": _update_run(
                    state.runs,
                    event.run_id,
                    status=event.outcome,
                    ended_at=event.timestamp,
                    result=event.result,
                ),
            }
            if event.outcome == "completed":
                changes["result_run_id"] = event.run_id
        case RunInterrupted():
            changes |= {
                "status": event.action_status,
                "current_run_id": None,
                "runs": _update_run(
                    state.runs,
                    event.run_id,
                    status=event.run_status,
                    ended_at=event.timestamp,
                    end_reason=event.reason,
                    progress=event.progress,
                ),
            }
        case RunDeferred():
            changes |= {
                "status": "ready",
                "attempt": event.attempt,
                "current_run_id": None,
                "runs": _update_run(
                    state.runs,
                    event.run_id,
                    status="interrupted",
                    ended_at=event.timestamp,
                    end_reason=event.reason,
                    deferred=True,
                ),
            }
        case InputQueued():
            queued = QueuedInput(id=event.input_id, text=event.text, queued_for_run_id=event.run_id)
            changes["inputs"] = (*state.inputs, queued)
        case InputConsumed():
            consumed = set(event.input_ids)
            changes["inputs"] = tuple(
                i.model_copy(update={"consumed_by_run_id": event.run_id}) if i.id in consumed else i
                for i in state.inputs
            )
        case ActionReset():
            changes |= {
                "status": "ready",
                "attempt": 0,
                "current_run_id": None,
                "result_run_id": None,
                "context": event.context,
                "contract_revision": event.contract_revision,
                "generation": event.generation,
                "spec_hash": event.spec_hash,
                "lease_epoch": event.lease_epoch,
                "inputs": (),
                "runs": _update_run(
                    state.runs,
                    event.ended_run_id,
                    status="superseded",
                    ended_at=event.timestamp,
                    end_reason=event.reason,
                ),
            }
        case ActionInvalidated():
            changes |= {
                "status": event.status,
                "current_run_id": None,
                "lease_epoch": event.lease_epoch,
                "inputs": (),
                "runs": _update_run(
                    state.runs,
                    event.ended_run_id,
                    status=event.status,
                    ended_at=event.timestamp,
                    end_reason=event.reason,
                ),
            }
        case ActionClosed():
            changes |= {"status": "closed", "close_reason": event.reason}
        case _:
            raise TypeError(f"unknown Action event {event!r}")
    return state.model_copy(update=changes)


def fold(state: ActionState | None, events: Iterable[ActionEvent]) -> ActionState | None:
    for event in events:
        state = evolve(state, event)
    return state


# --- decisions ---------------------------------------------------------------


def plan(
    *,
    work_item_id: UUID,
    sequence: int,
    type: str,
    brief: Brief,
    workspace_mode: WorkspaceMode,
    max_attempts: int,
    contract_revision: int,
    context: tuple[ContextEntry, ...],
    at: datetime,
    by: Actor,
    source_action_ids: tuple[UUID, ...] = (),
) -> list[ActionEvent]:
    emit: Emitter[ActionEvent] = Emitter(action_id_for(work_item_id, sequence), 0, at, by)
    emit(
        ActionPlanned,
        work_item_id=work_item_id,
        sequence=sequence,
        type=type,
        brief=brief,
        workspace_mode=workspace_mode,
        max_attempts=max_attempts,
        contract_revision=contract_revision,
        context=context,
        spec_hash=spec_hash(
            type=type,
            brief=brief,
            workspace_mode=workspace_mode,
            max_attempts=max_attempts,
            context=context,
            contract_revision=contract_revision,
        ),
        source_action_ids=source_action_ids,
    )
    return emit.events


def claim(
    state: ActionState,
    *,
    worker: str,
    boot_id: str,
    lease: timedelta,
    at: datetime,
    by: Actor,
    client_claim_id: str | None = None,
) -> list[ActionEvent]:
    if state.status != "ready" or state.current_run_id is not None:
        raise CommandRefused(f"Action {state.id} is {state.status}, not ready to claim")
    emit: Emitter[ActionEvent] = Emitter.after(state, at, by)
    ordinal = len(state.runs) + 1
    emit(
        RunClaimed,
        run_id=run_id_for(state.id, ordinal),
        ordinal=ordinal,
        worker=worker,
        boot_id=boot_id,
        lease_epoch=state.lease_epoch + 1,
        expires_at=at + lease,
        attempt=state.attempt + 1,
        client_claim_id=client_claim_id,
    )
    return emit.events


def live_run(state: ActionState, ref: RunRef, *, at: datetime | None) -> Run:
    """The live-run fence (LRF); with ``at`` also the lease expiry (LRF+)."""
    run = state.current_run
    if (
        run is None
        or state.status != "running"
        or run.id != ref.run_id
        or run.status != "running"
        or run.owner_boot_id != ref.boot_id
        or run.lease_epoch != ref.lease_epoch
        or state.lease_epoch != ref.lease_epoch
        or run.generation != state.generation
        or run.spec_hash != state.spec_hash
        or (at is not None and run.expires_at <= at)
    ):
        raise StaleRun(why_stale(state, ref, at=at))
    return run


def why_stale(state: ActionState, ref: RunRef, *, at: datetime | None) -> str:
    """Why the Run ``ref`` names fails the live-run fence, in words a worker can act on:
    a Run another fence holds, one that ended (and how), one its Action moved past, or a
    lease that lapsed."""
    run = state.run(ref.run_id)
    if run is None:
        return f"Run {ref.run_id} is not a Run of Action {state.id}"
    if run.owner_boot_id != ref.boot_id or run.lease_epoch != ref.lease_epoch:
        return (
            f"Run {run.id} is held by boot id {run.owner_boot_id!r} at lease epoch"
            f" {run.lease_epoch}, not by this fence (boot id {ref.boot_id!r}, lease epoch"
            f" {ref.lease_epoch})"
        )
    if run.status != "running":
        why = f": {run.end_reason}" if run.end_reason else ""
        return f"Run {run.id} has ended ({run.status}{why})"
    if (
        state.current_run_id != run.id
        or state.status != "running"
        or state.lease_epoch != run.lease_epoch
        or run.generation != state.generation
        or run.spec_hash != state.spec_hash
    ):
        return (
            f"Run {run.id} is no longer its Action's Run: Action {state.id} is {state.status}"
            f" at generation {state.generation}"
        )
    if at is not None and run.expires_at <= at:
        return f"Run {run.id}'s lease expired at {run.expires_at.isoformat()}"
    return f"Run {run.id} is stale"


def renew(
    state: ActionState, ref: RunRef, *, lease: timedelta, at: datetime, by: Actor
) -> list[ActionEvent]:
    live_run(state, ref, at=at)
    emit: Emitter[ActionEvent] = Emitter.after(state, at, by)
    emit(
        LeaseRenewed, run_id=ref.run_id, expires_at=at + lease, lease_seconds=lease.total_seconds()
    )
    return emit.events


def runs_once(action_type: str) -> bool:
    """Whether an Action of this type is never run twice by itself: a deliver Action
    (ADR-0007), whose interrupted Run fails it. A stopped worker lets its Run finish
    instead (ADR-0112)."""
    return action_type == "deliver"


def auto_retry(state: ActionState) -> bool:
    """Whether an interrupted Run's Action goes back to ``ready`` (deliver never does)."""
    return not runs_once(state.type) and state.attempt < state.max_attempts


def finish(
    state: ActionState,
    run: Run,
    *,
    outcome: Literal["completed", "waiting", "retryable", "failed"],
    result: RunResult,
    at: datetime,
    by: Actor,
    report_digest: str | None = None,
) -> list[ActionEvent]:
    action_status: ActionStatus
    if outcome == "retryable":
        action_status = "ready" if state.attempt < state.max_attempts else "failed"
    else:
        action_status = outcome
    emit: Emitter[ActionEvent] = Emitter.after(state, at, by)
    emit(
        RunFinished,
        run_id=run.id,
        outcome=outcome,
        result=result,
        action_status=action_status,
        report_digest=report_digest,
    )
    return emit.events


def interrupt(
    state: ActionState,
    run: Run,
    *,
    reason: str,
    at: datetime,
    by: Actor,
    run_status: Literal["interrupted", "superseded", "cancelled"] = "interrupted",
    progress: RunProgress | None = None,
) -> list[ActionEvent]:
    retryable = auto_retry(state)
    emit: Emitter[ActionEvent] = Emitter.after(state, at, by)
    emit(
        RunInterrupted,
        run_id=run.id,
        run_status=run_status,
        reason=reason,
        retryable=retryable,
        action_status="ready" if retryable else "failed",
        progress=progress,
    )
    return emit.events


def close(state: ActionState, *, reason: str, at: datetime, by: Actor) -> list[ActionEvent]:
    if state.status not in ("waiting", "failed"):
        raise CommandRefused(f"Action {state.id} is {state.status}; only waiting or failed close")
    emit: Emitter[ActionEvent] = Emitter.after(state, at, by)
    emit(ActionClosed, reason=reason)
    return emit.events
