"""The ResourceLedger aggregate: admits every LLM request of a WorkItem against
its budget before the request is sent, and records what it really cost.

One ledger per WorkItem (its id derived from the WorkItem's). A request is
reserved at a pessimistic estimate before dispatch and settled afterwards;
nothing is refunded, and a request whose outcome is unknown stays charged.
Spent budgets stop the item durably; only a user's extend and resume undo that.

Reads top to bottom: values, state, events, evolve, decisions. What a request costs
(its estimate, a provider's usage) is ``usage``.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Annotated, Any, Literal
from uuid import UUID, uuid5

from pydantic import Field

from workcenter.domain.actor import BUDGET, Actor
from workcenter.domain.errors import CommandRefused, InvalidInput
from workcenter.domain.model import AggregateState, DomainEvent, Emitter, Immutable, no_start

# What a request costs has its own module; its names stay importable from here, where
# the ledger's callers have always found them.
from workcenter.domain.usage import UNKNOWN_REQUEST_TOKENS as UNKNOWN_REQUEST_TOKENS
from workcenter.domain.usage import Usage as Usage
from workcenter.domain.usage import estimate_tokens as estimate_tokens
from workcenter.domain.usage import normalize_usage as normalize_usage
from workcenter.domain.usage import sum_usage as sum_usage

MAX_SAFE_INTEGER = 2**53 - 1
LIMIT_NAMES: tuple[str, ...] = (
    "max_requests",
    "max_tokens",
    "max_run_requests",
    "max_action_attempts",
    "max_coordinator_failures",
)
StopCode = Literal[
    "work_item_requests_exhausted",
    "work_item_tokens_exhausted",
    "run_requests_exhausted",
    "action_attempts_exhausted",
    "coordinator_failures_exhausted",
]
RequestKind = Literal["coordinator", "action"]
ReservationStatus = Literal["reserved", "reported", "unknown"]


_Limit = Annotated[int, Field(strict=True, gt=0, le=2**53 - 1)]


class Limits(Immutable):
    max_requests: _Limit = 200
    max_tokens: _Limit = 2_000_000
    max_run_requests: _Limit = 40
    max_action_attempts: _Limit = 3
    max_coordinator_failures: _Limit = 3


# A pure function asked at every claim, save and detail build: hashing the name costs
# more than the cache's lookup.
@functools.lru_cache(maxsize=65_536)
def ledger_id_for(work_item_id: UUID) -> UUID:
    return uuid5(work_item_id, "resource-ledger")


# --- state -------------------------------------------------------------------------


class Reservation(Immutable):
    request_id: str
    kind: RequestKind
    run_id: UUID | None
    estimated_tokens: int
    charged_tokens: int
    usage: Usage | None = None
    status: ReservationStatus = "reserved"
    created_at: datetime


class StopReason(Immutable):
    code: StopCode
    at: datetime
    details: dict[str, str | int | None] = {}


class LedgerState(AggregateState):
    work_item_id: UUID
    limits: Limits
    attempts_extension: int
    reservations: dict[str, Reservation]
    stop_reason: StopReason | None
    coordinator_failures: int
    retry_after: datetime | None
    control_version: int

    @property
    def request_count(self) -> int:
        return len(self.reservations)

    @property
    def charged_tokens(self) -> int:
        return sum(r.charged_tokens for r in self.reservations.values())

    def run_requests(self, run_id: UUID) -> int:
        return sum(1 for r in self.reservations.values() if r.run_id == run_id)

    def effective_max_attempts(self, original_max_attempts: int) -> int:
        return min(original_max_attempts + self.attempts_extension, self.limits.max_action_attempts)

    def attempts_needed(self, attempts: int, original_max_attempts: int) -> int:
        """The least ``max_action_attempts`` addition after which an Action that made
        ``attempts`` may make one more (0: it may now). An addition raises the limit and
        the extension alike, so the effective maximum by as much."""
        return max(attempts - self.effective_max_attempts(original_max_attempts) + 1, 0)

    def resume_needs(self) -> dict[str, int]:
        """The least addition each budget still spent needs before a resume is taken, in
        the order the limits are listed (a resume is refused while one is spent); a
        token stop's refused request must fit (ADR-0091). The stopping Action's attempts
        are ``attempts_needed``'s: the ledger does not hold the Action."""
        limits = self.limits
        needs = {
            "max_requests": self.request_count - limits.max_requests + 1,
            "max_tokens": max(
                self.charged_tokens - limits.max_tokens + 1, self.refused_request_shortfall()
            ),
            "max_coordinator_failures": (
                self.coordinator_failures - limits.max_coordinator_failures + 1
            ),
        }
        return {name: need for name, need in needs.items() if need > 0}

    def spent(self) -> list[str]:
        """Every budget still exhausted (``resume_needs``'s), in the order of the limits."""
        return list(self.resume_needs())

    def refused_request_shortfall(self) -> int:
        """Tokens the limit still lacks for the request a token stop refused, else 0.

        A resume before that request fits would stop the item again at its next
        request (ADR-0091); a stop from an overrun names no request and has none."""
        reason = self.stop_reason
        if reason is None or reason.code != "work_item_tokens_exhausted":
            return 0
        asked = reason.details.get("estimated_next_tokens")
        if not isinstance(asked, int):
            return 0
        return max(self.charged_tokens + asked - self.limits.max_tokens, 0)


# --- events ------------------------------------------------------------------------


class LedgerEvent(DomainEvent):
    pass


class LedgerOpened(LedgerEvent):
    work_item_id: UUID
    limits: Limits


class RequestReserved(LedgerEvent):
    request_id: str
    kind: RequestKind
    run_id: UUID | None
    estimated_tokens: int


class RequestSettled(LedgerEvent):
    request_id: str
    status: Literal["reported", "unknown"]
    charged_tokens: int
    usage: Usage | None


class ExecutionStopped(LedgerEvent):
    code: StopCode
    details: dict[str, str | int | None] = {}


class BudgetExtended(LedgerEvent):
    additions: dict[str, int]
    limits: Limits


class ExecutionResumed(LedgerEvent):
    pass


class CoordinatorFailureRecorded(LedgerEvent):
    turn_id: str
    failures: int
    retry_after: datetime


# Extend and resume conflict only with what the original's control revision tracked.
CONTROL_EVENTS: tuple[type[DomainEvent], ...] = (ExecutionStopped, BudgetExtended, ExecutionResumed)


# --- evolve ------------------------------------------------------------------------


def evolve(state: LedgerState | None, event: LedgerEvent) -> LedgerState:
    if state is None:
        if not isinstance(event, LedgerOpened):
            raise no_start(event)
        return LedgerState(
            id=event.originator_id,
            version=event.originator_version,
            work_item_id=event.work_item_id,
            limits=event.limits,
            attempts_extension=0,
            reservations={},
            stop_reason=None,
            coordinator_failures=0,
            retry_after=None,
            control_version=event.originator_version,
        )
    changes: dict[str, object] = {"version": event.originator_version}
    match event:
        case RequestReserved():
            reservation = Reservation(
                request_id=event.request_id,
                kind=event.kind,
                run_id=event.run_id,
                estimated_tokens=event.estimated_tokens,
                charged_tokens=event.estimated_tokens,
                created_at=event.timestamp,
            )
            changes["reservations"] = {**state.reservations, event.request_id: reservation}
        case RequestSettled():
            settled = state.reservations[event.request_id].model_copy(
                update={
                    "status": event.status,
                    "charged_tokens": event.charged_tokens,
                    "usage": event.usage,
                }
            )
            changes["reservations"] = {**state.reservations, event.request_id: settled}
        case ExecutionStopped():
            changes["stop_reason"] = StopReason(
                code=event.code, at=event.timestamp, details=event.details
            )
        case BudgetExtended():
            changes["limits"] = event.limits
            changes["attempts_extension"] = state.attempts_extension + event.additions.get(
                "max_action_attempts", 0
            )
        case ExecutionResumed():
            changes |= {"stop_reason": None, "retry_after": None}
        case CoordinatorFailureRecorded():
            changes |= {"coordinator_failures": event.failures, "retry_after": event.retry_after}
        case _:
            raise TypeError(f"unknown ledger event {event!r}")
    if isinstance(event, CONTROL_EVENTS):
        changes["control_version"] = event.originator_version
    return state.model_copy(update=changes)


def fold(state: LedgerState | None, events: Iterable[LedgerEvent]) -> LedgerState | None:
    for event in events:
        state = evolve(state, event)
    return state


# --- decisions ---------------------------------------------------------------------


class Admission(Immutable):
    """The answer to a reservation: allowed, or denied with a code (a denial is returned,
    not raised, so a stopping denial's events can still be saved)."""

    allowed: bool
    request_id: str
    code: str | None = None
    events: tuple[LedgerEvent, ...] = ()

    @property
    def stops(self) -> bool:
        return any(isinstance(e, ExecutionStopped) for e in self.events)


def open_ledger(
    work_item_id: UUID, at: datetime, limits: Limits | None = None, *, by: Actor
) -> list[LedgerEvent]:
    emit: Emitter[LedgerEvent] = Emitter(ledger_id_for(work_item_id), 0, at, by)
    emit(LedgerOpened, work_item_id=work_item_id, limits=limits or Limits())
    return emit.events


def stop(
    state: LedgerState, code: StopCode, at: datetime, by: Actor, **details: str | int | None
) -> list[LedgerEvent]:
    """Record a stop unless one is recorded already: the first reason wins.

    A stop is the budget's decision, caused by whoever ran into it (``by``)."""
    if state.stop_reason is not None:
        return []
    emit: Emitter[LedgerEvent] = Emitter.after(state, at, BUDGET.because_of(by))
    emit(ExecutionStopped, code=code, details=details)
    return emit.events


def reserve(
    state: LedgerState,
    *,
    request_id: str,
    kind: RequestKind,
    run_id: UUID | None,
    estimated_tokens: int,
    item_active: bool,
    at: datetime,
    by: Actor,
) -> Admission:
    """Admit one request, or deny it; the first matching rule decides (ledger.md 3)."""

    def denied(code: str, events: list[LedgerEvent] | None = None) -> Admission:
        return Admission(
            allowed=False, request_id=request_id, code=code, events=tuple(events or ())
        )

    if request_id in state.reservations:
        return denied("request_already_reserved")
    if state.stop_reason is not None:
        return denied(state.stop_reason.code)
    if not item_active:
        return denied("work_item_inactive")
    details: dict[str, str | int | None] = {
        "run_id": str(run_id) if run_id else None,
        "estimated_next_tokens": estimated_tokens,
    }
    limits = state.limits
    code: StopCode | None = None
    if run_id is not None and state.run_requests(run_id) >= limits.max_run_requests:
        code = "run_requests_exhausted"
    elif state.request_count >= limits.max_requests:
        code = "work_item_requests_exhausted"
    elif state.charged_tokens + estimated_tokens > limits.max_tokens:
        code = "work_item_tokens_exhausted"
    if code is not None:
        return denied(code, stop(state, code, at, by, **details))
    emit: Emitter[LedgerEvent] = Emitter.after(state, at, by)
    emit(
        RequestReserved,
        request_id=request_id,
        kind=kind,
        run_id=run_id,
        estimated_tokens=estimated_tokens,
    )
    return Admission(allowed=True, request_id=request_id, events=tuple(emit.events))


def settle(
    state: LedgerState,
    *,
    request_id: str,
    usage: Usage | None,
    complete: bool,
    at: datetime,
    by: Actor,
) -> list[LedgerEvent]:
    """Record what a request cost; an empty list means there was nothing to settle."""
    reservation = state.reservations.get(request_id)
    if reservation is None or reservation.status == "reported":
        return []
    if reservation.status == "unknown" and usage is None:
        return []
    emit: Emitter[LedgerEvent] = Emitter.after(state, at, by)
    total = usage.total_tokens if usage else 0
    if complete and total > 0:
        emit(
            RequestSettled,
            request_id=request_id,
            status="reported",
            charged_tokens=total,
            usage=usage,
        )
    else:
        emit(
            RequestSettled,
            request_id=request_id,
            status="unknown",
            charged_tokens=max(reservation.estimated_tokens, total),
            usage=usage if usage is not None else reservation.usage,
        )
    settled = evolve(state, emit.events[-1])
    if settled.charged_tokens > settled.limits.max_tokens:
        return emit.events + stop(settled, "work_item_tokens_exhausted", at, by)
    return emit.events


def can_attempt(
    state: LedgerState,
    *,
    action_id: UUID,
    attempts: int,
    original_max_attempts: int,
    at: datetime,
    by: Actor,
) -> list[LedgerEvent] | None:
    """None when the Action may start another Run; else the stop to record."""
    effective = state.effective_max_attempts(original_max_attempts)
    if attempts < effective:
        return None
    return stop(
        state,
        "action_attempts_exhausted",
        at,
        by,
        action_id=str(action_id),
        attempts=attempts,
        original_max_attempts=original_max_attempts,
        effective_max_attempts=effective,
    )


def backoff(failures: int) -> timedelta:
    """1, 2, 4 ... 256 seconds; the spec's 300 s cap is never reached."""
    return timedelta(milliseconds=min(1000 * 2 ** min(failures - 1, 8), 300_000))


def record_coordinator_failure(
    state: LedgerState, *, turn_id: str, at: datetime, by: Actor
) -> list[LedgerEvent]:
    failures = state.coordinator_failures + 1
    emit: Emitter[LedgerEvent] = Emitter.after(state, at, by)
    emit(
        CoordinatorFailureRecorded,
        turn_id=turn_id,
        failures=failures,
        retry_after=at + backoff(failures),
    )
    if failures >= state.limits.max_coordinator_failures:
        after = evolve(state, emit.events[-1])
        return emit.events + stop(
            after, "coordinator_failures_exhausted", at, by, turn_id=turn_id, failures=failures
        )
    return emit.events


def validate_additions(state: LedgerState, additions: Mapping[str, Any]) -> dict[str, int]:
    if not isinstance(additions, Mapping) or not additions:
        raise InvalidInput("additions must be a non-empty mapping of limit names to integers")
    clean: dict[str, int] = {}
    for name, value in additions.items():
        if name not in LIMIT_NAMES:
            raise InvalidInput(f"{name!r} is not a limit; use one of {', '.join(LIMIT_NAMES)}")
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise InvalidInput(f"the addition to {name} must be a positive integer, not {value!r}")
        if getattr(state.limits, name) + value > MAX_SAFE_INTEGER:
            raise InvalidInput(f"{name} would exceed {MAX_SAFE_INTEGER}")
        clean[name] = value
    return clean


def extend(
    state: LedgerState, additions: Mapping[str, Any], at: datetime, *, by: Actor
) -> list[LedgerEvent]:
    """Raise limits, by a person only. Clears no stop: only resume does."""
    _by_a_person(by, "extends a budget")
    clean = validate_additions(state, additions)
    limits = state.limits.model_copy(
        update={name: getattr(state.limits, name) + value for name, value in clean.items()}
    )
    emit: Emitter[LedgerEvent] = Emitter.after(state, at, by)
    emit(BudgetExtended, additions=clean, limits=limits)
    return emit.events


def resume(
    state: LedgerState, *, stopping_action_can_attempt: bool, at: datetime, by: Actor
) -> list[LedgerEvent]:
    """Clear the stop, by a person only; refused while a budget is still spent, or
    while the request a token stop refused would be refused again."""
    _by_a_person(by, "resumes work its budget stopped")
    spent = state.spent()
    if spent:
        # Every limit at once: naming one at a time took a person two rounds to learn
        # that a token stop had also used up the Coordinator's failures.
        names = " and ".join(spent) + (" is" if len(spent) == 1 else " are")
        shortfall = state.refused_request_shortfall()
        needs = (
            f" (the request its stop refused needs {shortfall} more "
            f"token{'s' if shortfall > 1 else ''})"
            if shortfall
            else ""
        )
        raise CommandRefused(f"{names} exhausted: extend the budget first, then resume{needs}")
    if not stopping_action_can_attempt:
        raise CommandRefused("The stopping Action has no attempt left: extend max_action_attempts")
    emit: Emitter[LedgerEvent] = Emitter.after(state, at, by)
    emit(ExecutionResumed)
    return emit.events


def _by_a_person(by: Actor, does: str) -> None:
    """resource-ledger.md 3: extend and resume are a user's commands, with no model or
    tool path: the budget bounds what the agents spend, so neither the Coordinator nor a
    worker may raise or lift it. An operator is a person too (ADR-0081)."""
    if by.kind not in ("user", "operator"):
        raise CommandRefused(f"only a user or an operator {does}, not the {by.kind}")


# --- Coordinator turns -------------------------------------------------------------


def turn_request_ids(state: LedgerState, turn_id: str) -> list[str]:
    """A provider turn's reservations in the order they were made: its id, then retries."""
    prefix = f"{turn_id}:retry:"
    return [rid for rid in state.reservations if rid == turn_id or rid.startswith(prefix)]


def turn_of_request(request_id: str) -> str:
    """The provider turn a Coordinator request was made for: its id before ``:retry:``
    (an Action's request names no turn, and its id is returned whole)."""
    return request_id.split(":retry:", 1)[0]


def _settle_unknown(
    state: LedgerState, request_ids: list[str], at: datetime, by: Actor
) -> list[LedgerEvent]:
    events: list[LedgerEvent] = []
    for request_id in request_ids:
        settled = settle(state, request_id=request_id, usage=None, complete=False, at=at, by=by)
        state = fold(state, settled) or state
        events += settled
    return events


def reserve_coordinator(
    state: LedgerState,
    *,
    turn_id: str,
    retry_id: str,
    estimated_tokens: int,
    item_active: bool,
    at: datetime,
    by: Actor,
) -> Admission:
    """Dispatch of a Coordinator provider turn: the first request reserves the turn's
    id; a hidden retry reserves ``<turn>:retry:<retry_id>`` and the earlier requests
    of the turn end unknown, charged at least their estimate (a retry is a second
    request, never a free one)."""
    earlier = turn_request_ids(state, turn_id)
    request_id = f"{turn_id}:retry:{retry_id}" if earlier else turn_id
    settled = _settle_unknown(state, earlier, at, by)
    after = fold(state, settled) or state
    admission = reserve(
        after,
        request_id=request_id,
        kind="coordinator",
        run_id=None,
        estimated_tokens=estimated_tokens,
        item_active=item_active,
        at=at,
        by=by,
    )
    return admission.model_copy(update={"events": (*settled, *admission.events)})


def settle_coordinator(
    state: LedgerState,
    *,
    turn_id: str,
    usage: Usage | None,
    complete: bool,
    at: datetime,
    by: Actor,
) -> list[LedgerEvent]:
    """Settle a turn: every request but the newest ends unknown, the newest gets ``usage``."""
    ids = turn_request_ids(state, turn_id)
    if not ids:
        return []
    events = _settle_unknown(state, ids[:-1], at, by)
    after = fold(state, events) or state
    return events + settle(after, request_id=ids[-1], usage=usage, complete=complete, at=at, by=by)
