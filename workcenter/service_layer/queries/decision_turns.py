"""An item's Coordinator turns, found in its history: each turn's wake, its provider
attempts, the write that ended it and the events that write caused (ADR-0061).

Pure: it reads the item's events merged in write order, as ``(position, event)``,
from the store or from an exported bundle alike. A command's events are one write
at consecutive positions, stamped with the command's time and actor; a decision's
effects are the WorkItem, Action, ledger and mailbox events of that write just
before its ``CoordinatorTurnDecided``, and a reply refused after parsing is
rejected in the same write as the turn's failure, with the same error.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal
from uuid import UUID

import orjson

from workcenter.domain import conversation as conv
from workcenter.domain import resource_ledger as rl
from workcenter.domain.model import DomainEvent
from workcenter.service_layer.handlers.decision_verdict import FENCED

Positioned = tuple[int, DomainEvent]
VerdictKind = Literal[
    "applied",
    "parsed",
    "refused_parse",
    "refused_apply",
    "fenced",
    "failed",
    "interrupted",
    "retired",
    "thinking",
]

# Failures of a turn that are not a verdict on its reply (coordinator_step.py): the
# reply was never judged, so a replay has nothing to compare.
NOT_A_VERDICT = (
    "shutdown",
    "internal error",
    "the WorkItem changed since this turn's request was made",
)


@dataclass
class Attempt:
    """One provider turn (an LLM request) of a Coordinator turn."""

    provider_turn_id: UUID
    attempt: int
    prepared: int  # the index of its ProviderTurnPrepared in the item's events
    request_hash: str
    request_size: int
    dispatches: int = 0
    responded: int | None = None  # the index of its ProviderTurnResponded
    response: str | None = None
    response_hash: str | None = None
    rejected: int | None = None  # the index of its ProviderTurnRejected
    error: str | None = None
    unknown: bool = False
    # The verdict on this attempt's reply, if it was judged, and the index of the first
    # event of the write that recorded it (for a decision: its first effect).
    verdict: VerdictKind | None = None
    verdict_write: int | None = None

    @property
    def status(self) -> str:
        if self.unknown:
            return "unknown"
        if self.rejected is not None:
            return "rejected"
        if self.responded is not None:
            return "responded"
        return "dispatching" if self.dispatches else "prepared"


@dataclass
class TurnEvents:
    """One Coordinator turn as its history holds it; indexes point into the events."""

    turn_id: UUID
    begun: int
    event: conv.CoordinatorTurnBegun
    wake_kind: str
    attempts: list[Attempt] = field(default_factory=list)
    ended: int | None = None
    end: DomainEvent | None = None
    # The indexes of the effects of an applied decision.
    effects: range = range(0)
    verdict: VerdictKind = "thinking"
    reason: str = ""

    @property
    def judged(self) -> list[Attempt]:
        """The attempts whose replies were judged, in order."""
        return [a for a in self.attempts if a.verdict is not None]


def request_size(request: dict[str, Any]) -> int:
    """The stored request's size in bytes, as compact JSON."""
    return len(orjson.dumps(request))


def turns(events: Sequence[Positioned]) -> list[TurnEvents]:
    """The Coordinator turns of an item's merged events, in the order they began."""
    found: dict[UUID, TurnEvents] = {}
    attempts: dict[UUID, Attempt] = {}
    kinds: dict[UUID, str] = {}
    for index, (_, event) in enumerate(events):
        if not isinstance(event, conv.ConversationEvent):
            continue
        match event:
            case conv.MailboxEntryEnqueued():
                kinds[event.entry_id] = event.kind
            case conv.CoordinatorTurnBegun():
                found[event.turn_id] = TurnEvents(
                    event.turn_id, index, event, kinds.get(event.entry_id, "unknown")
                )
            case conv.ProviderTurnPrepared():
                attempt = Attempt(
                    event.provider_turn_id,
                    event.attempt,
                    index,
                    event.request_hash,
                    request_size(event.request),
                )
                attempts[event.provider_turn_id] = attempt
                if event.turn_id in found:
                    found[event.turn_id].attempts.append(attempt)
            case conv.ProviderTurnDispatched():
                if event.provider_turn_id in attempts:
                    attempts[event.provider_turn_id].dispatches += 1
            case conv.ProviderTurnResponded():
                if event.provider_turn_id in attempts:
                    attempt = attempts[event.provider_turn_id]
                    attempt.responded, attempt.response = index, event.response
                    attempt.response_hash = event.response_hash
            case conv.ProviderTurnRejected():
                if event.provider_turn_id in attempts:
                    attempt = attempts[event.provider_turn_id]
                    attempt.rejected, attempt.error = index, event.error
            case conv.ProviderTurnUnknown():
                if event.provider_turn_id in attempts:
                    attempts[event.provider_turn_id].unknown = True
            case (
                conv.CoordinatorTurnDecided()
                | conv.CoordinatorTurnFailed()
                | conv.CoordinatorTurnInterrupted()
                | conv.CoordinatorTurnRetired()
            ):
                turn = found.get(event.turn_id)
                if turn is not None:
                    turn.ended, turn.end = index, event
                    _judge(turn, events)
    for turn in found.values():
        for attempt in turn.attempts:
            if attempt.rejected is not None and attempt.verdict is None:
                # Rejected in a write of its own, not with the turn's failure.
                attempt.verdict, attempt.verdict_write = "refused_parse", attempt.rejected
                turn.reason = turn.reason or (attempt.error or "")
    return sorted(found.values(), key=lambda t: t.begun)


def _same_write(events: Sequence[Positioned], first: int, last: int) -> bool:
    """Whether the events from index ``first`` to ``last`` were written by one command:
    consecutive positions, one time, one actor."""
    end = events[last][1]
    for index in range(first, last):
        position, event = events[index]
        if events[index + 1][0] != position + 1:
            return False
        if event.timestamp != end.timestamp or event.actor != end.actor:
            return False
    return True


def _is_effect(event: DomainEvent) -> bool:
    """An event a decision's write may cause: not the turn's own bookkeeping, not the
    settlement of a request (the write before it)."""
    if isinstance(event, conv.ConversationEvent):
        return isinstance(event, conv.MailboxEntryEnqueued)
    return not isinstance(event, rl.RequestSettled | rl.RequestReserved)


def _judge(turn: TurnEvents, events: Sequence[Positioned]) -> None:
    """The turn's verdict from the event that ended it, and its judged attempt's."""
    assert turn.ended is not None
    end = turn.end
    if isinstance(end, conv.CoordinatorTurnDecided):
        first = turn.ended
        while (
            first > turn.begun
            and _is_effect(events[first - 1][1])
            and _same_write(events, first - 1, turn.ended)
        ):
            first -= 1
        turn.verdict, turn.effects = "applied", range(first, turn.ended)
        answered = next((a for a in reversed(turn.attempts) if a.responded is not None), None)
        if answered is not None:
            answered.verdict, answered.verdict_write = "applied", first
        return
    if isinstance(end, conv.CoordinatorTurnInterrupted):
        turn.verdict, turn.reason = "interrupted", end.error
        return
    if isinstance(end, conv.CoordinatorTurnRetired):
        turn.verdict = "retired"
        return
    assert isinstance(end, conv.CoordinatorTurnFailed)
    turn.reason = end.error
    turn.verdict = "failed"
    for attempt in turn.attempts:
        if (
            attempt.rejected is None
            or attempt.error != end.error
            or not _same_write(events, attempt.rejected, turn.ended)
        ):
            continue
        # Rejected by the turn's failure: the reply had passed parsing.
        if end.error.startswith(NOT_A_VERDICT):
            attempt.verdict = "failed"  # never judged: a replay has nothing to compare
            continue
        attempt.verdict_write = attempt.rejected
        attempt.verdict = "fenced" if end.error.startswith(FENCED) else "refused_apply"
        turn.verdict = attempt.verdict
    if turn.verdict == "failed" and end.error == conv.INVALID_TWICE:
        turn.verdict = "refused_parse"
