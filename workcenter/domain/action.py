"""The Action aggregate: one typed unit of work and the Runs that execute it.

A Run is an entity of its Action. Workers are fenced by the Run's lease epoch
and boot id; the aggregate version is never used as a fencing token.

Reads top to bottom: value types, state, events, evolve, decisions.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any, ClassVar, Literal
from uuid import UUID, uuid5

import orjson

from workcenter.domain.actor import Actor
from workcenter.domain.errors import CommandRefused, StaleRun
from workcenter.domain.evidence import AcceptanceCheck, EvidenceItem
from workcenter.domain.model import AggregateState, DomainEvent, Emitter, Immutable

ActionStatus = Literal[
    "ready", "running", "waiting", "completed", "failed", "superseded", "cancelled", "closed"
]
RunStatus = Literal[
    "running",
    "completed",
    "waiting",
    "retryable",
    "failed",
    "interrupted",
    "cancelled",
    "superseded",
]
WorkspaceMode = Literal["shared", "read", "isolated-write", "integrate"]
ReviewDecision = Literal["approved", "changes_requested"]

OPEN_STATUSES: frozenset[str] = frozenset({"ready", "running", "waiting", "failed"})
DEFAULT_MAX_ATTEMPTS = 2


# --- values ------------------------------------------------------------------


class Brief(Immutable):
    objective: str
    approach: str = ""
    expected_outcome: str = ""


class ContextEntry(Immutable):
    """What an Action knows beyond its brief: earlier results, guidance, user input."""

    kind: Literal["prior_result", "guidance", "input"]
    text: str = ""
    action_type: str | None = None
    run_id: UUID | None = None
    evidence: tuple[EvidenceItem, ...] = ()
    review_decision: ReviewDecision | None = None
    waiting_reason: str | None = None


class RunResult(Immutable):
    """What a finished Run reported, after normalisation (lifecycle.md 3.4)."""

    summary: str = ""
    response: str = ""
    evidence: tuple[EvidenceItem, ...] = ()
    outputs: tuple[EvidenceItem, ...] = ()
    checks: tuple[AcceptanceCheck, ...] = ()
    waiting_reason: str | None = None
    error: str | None = None
    failure_kind: str | None = None
    failure_code: str | None = None
    review_decision: ReviewDecision | None = None


class Run(Immutable):
    """One execution attempt. Identity fields never change; once it leaves
    ``running`` nothing about it changes."""

    id: UUID
    ordinal: int
    worker: str
    owner_boot_id: str
    lease_epoch: int
    started_at: datetime
    expires_at: datetime
    generation: int
    spec_hash: str
    attempt: int
    contract_revision: int
    status: RunStatus = "running"
    ended_at: datetime | None = None
    end_reason: str | None = None
    result: RunResult | None = None


class RunRef(Immutable):
    """What a worker holds for a claimed Run: enough to be fenced."""

    action_id: UUID
    run_id: UUID
    boot_id: str
    lease_epoch: int


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


def action_id_for(work_item_id: UUID, sequence: int) -> UUID:
    """Derived, so two decisions racing to plan the same sequence collide in the store."""
    return uuid5(work_item_id, f"action/{sequence}")


def run_id_for(action_id: UUID, ordinal: int) -> UUID:
    return uuid5(action_id, f"run/{ordinal}")


def spec_hash(
    *,
    type: str,
    brief: Brief,
    workspace_mode: str,
    max_attempts: int,
    context: tuple[ContextEntry, ...],
    contract_revision: int,
) -> str:
    """SHA-256 of the canonical JSON of what the Action is asked to do."""
    spec = {
        "type": type,
        "brief": brief.model_dump(mode="json"),
        "workspace_mode": workspace_mode,
        "max_attempts": max_attempts,
        "context": [entry.model_dump(mode="json") for entry in context],
        "contract_revision": contract_revision,
    }
    return hashlib.sha256(orjson.dumps(spec, option=orjson.OPT_SORT_KEYS)).hexdigest()


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


class RunClaimed(ActionEvent):
    run_id: UUID
    ordinal: int
    worker: str
    boot_id: str
    lease_epoch: int
    expires_at: datetime
    attempt: int


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


class RunInterrupted(ActionEvent):
    """The Run ended without an outcome: interrupted by its worker, or recovered
    after its process or lease ended."""

    run_id: UUID
    run_status: Literal["interrupted", "superseded", "cancelled"]
    reason: str
    retryable: bool
    action_status: ActionStatus


class ActionReset(ActionEvent):
    """A new generation in place (guidance, retry, resume): ready, attempt 0."""

    reason: Literal["guided", "retried", "resumed"]
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
        case ActionPlanned() | ActionReset():
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
            raise TypeError(f"an Action stream must start with ActionPlanned, not {event!r}")
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
                ),
            }
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
) -> list[ActionEvent]:
    emit = Emitter[ActionEvent](action_id_for(work_item_id, sequence), 0, at, by)
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
) -> list[ActionEvent]:
    if state.status != "ready" or state.current_run_id is not None:
        raise CommandRefused(f"Action {state.id} is {state.status}, not ready to claim")
    emit = Emitter[ActionEvent].after(state, at, by)
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
        raise StaleRun()
    return run


def renew(
    state: ActionState, ref: RunRef, *, lease: timedelta, at: datetime, by: Actor
) -> list[ActionEvent]:
    live_run(state, ref, at=at)
    emit = Emitter[ActionEvent].after(state, at, by)
    emit(
        LeaseRenewed, run_id=ref.run_id, expires_at=at + lease, lease_seconds=lease.total_seconds()
    )
    return emit.events


def auto_retry(state: ActionState) -> bool:
    """Whether an interrupted Run's Action goes back to ``ready`` (deliver never does)."""
    return state.type != "deliver" and state.attempt < state.max_attempts


def finish(
    state: ActionState,
    run: Run,
    *,
    outcome: Literal["completed", "waiting", "retryable", "failed"],
    result: RunResult,
    at: datetime,
    by: Actor,
) -> list[ActionEvent]:
    action_status: ActionStatus
    if outcome == "retryable":
        action_status = "ready" if state.attempt < state.max_attempts else "failed"
    else:
        action_status = outcome
    emit = Emitter[ActionEvent].after(state, at, by)
    emit(RunFinished, run_id=run.id, outcome=outcome, result=result, action_status=action_status)
    return emit.events


def interrupt(
    state: ActionState,
    run: Run,
    *,
    reason: str,
    at: datetime,
    by: Actor,
    run_status: Literal["interrupted", "superseded", "cancelled"] = "interrupted",
) -> list[ActionEvent]:
    retryable = auto_retry(state)
    emit = Emitter[ActionEvent].after(state, at, by)
    emit(
        RunInterrupted,
        run_id=run.id,
        run_status=run_status,
        reason=reason,
        retryable=retryable,
        action_status="ready" if retryable else "failed",
    )
    return emit.events


def reset(
    state: ActionState,
    *,
    reason: Literal["guided", "retried", "resumed"],
    add_context: tuple[ContextEntry, ...],
    contract_revision: int,
    at: datetime,
    by: Actor,
    keep_inputs: bool = False,
) -> list[ActionEvent]:
    """A new generation: earlier Runs stop being current; user input entries are
    dropped unless ``keep_inputs`` (resume keeps accepted inputs)."""
    kept = state.context if keep_inputs else tuple(e for e in state.context if e.kind != "input")
    context = kept + add_context
    running = state.current_run_id if state.status == "running" else None
    emit = Emitter[ActionEvent].after(state, at, by)
    emit(
        ActionReset,
        reason=reason,
        context=context,
        contract_revision=contract_revision,
        generation=state.generation + 1,
        spec_hash=spec_hash(
            type=state.type,
            brief=state.brief,
            workspace_mode=state.workspace_mode,
            max_attempts=state.max_attempts,
            context=context,
            contract_revision=contract_revision,
        ),
        lease_epoch=state.lease_epoch + 1 if running else state.lease_epoch,
        ended_run_id=running,
    )
    return emit.events


def invalidate(
    state: ActionState,
    *,
    status: Literal["superseded", "cancelled"],
    reason: str,
    at: datetime,
    by: Actor,
) -> list[ActionEvent]:
    """Invalidate(X): only open Actions are touched; others yield no event."""
    if state.status not in OPEN_STATUSES:
        return []
    emit = Emitter[ActionEvent].after(state, at, by)
    emit(
        ActionInvalidated,
        status=status,
        reason=reason,
        lease_epoch=state.lease_epoch + 1,
        ended_run_id=state.current_run_id if state.status == "running" else None,
    )
    return emit.events


def supersede_cancelled(
    state: ActionState, *, reason: str, at: datetime, by: Actor
) -> list[ActionEvent]:
    """Dynamic resume: a cancelled Action becomes superseded history."""
    if state.status != "cancelled":
        return []
    emit = Emitter[ActionEvent].after(state, at, by)
    emit(
        ActionInvalidated,
        status="superseded",
        reason=reason,
        lease_epoch=state.lease_epoch + 1,
        ended_run_id=None,
    )
    return emit.events


def close(state: ActionState, *, reason: str, at: datetime, by: Actor) -> list[ActionEvent]:
    if state.status not in ("waiting", "failed"):
        raise CommandRefused(f"Action {state.id} is {state.status}; only waiting or failed close")
    emit = Emitter[ActionEvent].after(state, at, by)
    emit(ActionClosed, reason=reason)
    return emit.events
