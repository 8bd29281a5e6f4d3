"""The Conversation aggregate: one per WorkItem, the Coordinator's side of it.

It holds the messages (user and assistant), the turns that link them, the
mailbox entries that wake the Coordinator, and the provider turns (the LLM
requests of a turn). Its stream id derives from the WorkItem's, and the stream
begins lazily with the first event a WorkItem needs (coordinator.md 1, 2, 3).

Claims on mailbox entries fence everything a turn does, like a Run's lease
epoch: a stale (owner, epoch) writes nothing. The coordinator revision counts
turn begins and ends; the fence a turn freezes at begin (the WorkItem version,
the Action fingerprint) is checked by the service before a decision applies.

Reads top to bottom: values, state, events, evolve; the decisions are in
``workcenter.domain.turns``.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any, Literal
from uuid import UUID, uuid5

from workcenter.domain import bounds
from workcenter.domain.actor import Actor
from workcenter.domain.model import AggregateState, DomainEvent, Immutable, no_start

MessageStatus = Literal["thinking", "completed", "failed"]
EntryStatus = Literal["pending", "claimed", "acked", "cancelled"]
ProviderTurnStatus = Literal["prepared", "dispatching", "responded", "rejected", "unknown"]
TurnStatus = Literal["thinking", "decided", "failed"]

TEXT_LIMIT = 8_000
ERROR_LIMIT = 8_000
CLIENT_ID_LIMIT = bounds.REQUEST_ID
MAX_ATTEMPTS = 2
DEFAULT_LEASE = timedelta(seconds=60)
MIN_LEASE = timedelta(seconds=5)
# The text a user sees when both decision attempts were invalid (9.5); the
# validator's detail goes to the audit only.
INVALID_TWICE = "the proposal did not pass validation; your message was kept; try again"
SPEAKER_ID = "coordinator"
SPEAKER_NAME = "Coordinator"


def conversation_id_for(work_item_id: UUID) -> UUID:
    return uuid5(work_item_id, "conversation")


# --- values ----------------------------------------------------------------------


class Speaker(Immutable):
    id: str
    name: str


COORDINATOR_SPEAKER = Speaker(id=SPEAKER_ID, name=SPEAKER_NAME)


class DecisionSummary(Immutable):
    """What a completed assistant message records of its decision (1.1)."""

    kind: str
    reason: str = ""
    affected_action_ids: tuple[UUID, ...] = ()
    question: str | None = None


class Message(Immutable):
    id: UUID
    turn_id: UUID
    role: Literal["user", "assistant"]
    status: MessageStatus
    text: str
    user_originated: bool = False
    automatic: bool = False
    trigger: dict[str, Any] | None = None
    speaker: Speaker | None = None
    decision: DecisionSummary | None = None
    error: str | None = None
    created_at: datetime
    finished_at: datetime | None = None


class Turn(Immutable):
    """A turn's identity, authority and the fence frozen at its begin (5.1)."""

    id: UUID
    entry_id: UUID
    status: TurnStatus
    user_originated: bool
    automatic: bool
    assistant_message_id: UUID
    user_text: str | None = None
    trigger: dict[str, Any] | None = None
    item_version: int
    fingerprint: str
    coordinator_revision: int
    # Any provider turn of this turn ever prepared (recovery reads it, 2.4).
    prepared_any: bool = False
    # The user whose message began the turn: its decisions are caused by them.
    requested_by: Actor | None = None


class Entry(Immutable):
    """A mailbox entry (2.1): one cause that wakes the Coordinator, once."""

    id: UUID
    sequence: int
    kind: str
    source_key: str
    status: EntryStatus
    trigger: dict[str, Any] = {}
    turn_id: UUID | None = None
    claim_owner: str | None = None
    claim_epoch: int = 0
    claimed_at: datetime | None = None
    lease_expires_at: datetime | None = None
    acked_at: datetime | None = None
    created_at: datetime

    def expired(self, at: datetime) -> bool:
        return (
            self.status == "claimed"
            and self.lease_expires_at is not None
            and self.lease_expires_at <= at
        )

    def available(self, at: datetime) -> bool:
        """Pending, or claimed under a lease that has run out."""
        return self.status == "pending" or self.expired(at)


class ClaimRef(Immutable):
    """The fencing token of a mailbox claim, like a Run's (owner boot id, lease epoch)."""

    work_item_id: UUID
    entry_id: UUID
    owner: str
    epoch: int
    turn_id: UUID | None = None


class ProviderTurn(Immutable):
    """One LLM request of a turn (3.1); the body lives in its Prepared event, the
    state keeps its hash (a resumed turn rebuilds the body and compares)."""

    id: UUID
    turn_id: UUID
    attempt: int
    status: ProviderTurnStatus
    request_hash: str
    response: str | None = None
    response_hash: str | None = None
    error: str | None = None
    claim_owner: str
    claim_epoch: int
    dispatches: int = 0
    created_at: datetime


# --- state -----------------------------------------------------------------------


class ConversationState(AggregateState):
    work_item_id: UUID
    messages: tuple[Message, ...] = ()
    turns: dict[UUID, Turn] = {}
    entries: tuple[Entry, ...] = ()
    provider_turns: tuple[ProviderTurn, ...] = ()
    coordinator_revision: int = 0
    client_message_ids: dict[str, UUID] = {}
    source_keys: dict[str, UUID] = {}

    def entry(self, entry_id: UUID) -> Entry | None:
        return next((e for e in self.entries if e.id == entry_id), None)

    def entry_of_turn(self, turn_id: UUID) -> Entry | None:
        return next((e for e in self.entries if e.turn_id == turn_id), None)

    def thinking_turn(self) -> Turn | None:
        return next((t for t in self.turns.values() if t.status == "thinking"), None)

    def message(self, message_id: UUID) -> Message | None:
        return next((m for m in self.messages if m.id == message_id), None)

    def attempts(self, turn_id: UUID) -> list[ProviderTurn]:
        return sorted((p for p in self.provider_turns if p.turn_id == turn_id), key=_attempt)

    def provider_turn(self, provider_turn_id: UUID) -> ProviderTurn | None:
        return next((p for p in self.provider_turns if p.id == provider_turn_id), None)

    @property
    def dispatching(self) -> frozenset[str]:
        """The provider turns being sent, by the id their requests are reserved under:
        those requests are in flight (resource-ledger.md 2), not unknown."""
        return frozenset(str(p.id) for p in self.provider_turns if p.status == "dispatching")

    def open_entries(self) -> list[Entry]:
        return [e for e in self.entries if e.status in ("pending", "claimed")]

    def next_available(self, at: datetime) -> Entry | None:
        """Strict order per item: the lowest-sequence open entry, if it can be claimed."""
        first = min(self.open_entries(), key=lambda e: e.sequence, default=None)
        return first if first is not None and first.available(at) else None

    def is_active(self, claim: ClaimRef, at: datetime) -> bool:
        """The claim is the entry's current one, its lease unexpired (2.2)."""
        entry = self.entry(claim.entry_id)
        return (
            entry is not None
            and entry.status == "claimed"
            and entry.claim_owner == claim.owner
            and entry.claim_epoch == claim.epoch
            and entry.lease_expires_at is not None
            and entry.lease_expires_at > at
            and (claim.turn_id is None or entry.turn_id == claim.turn_id)
        )

    def resumable(self, turn: Turn) -> bool:
        """A thinking turn whose entry is open and that has a provider turn to go on from."""
        entry = self.entry(turn.entry_id)
        return (
            turn.status == "thinking"
            and entry is not None
            and entry.status in ("pending", "claimed")
            and any(
                p.status in ("prepared", "dispatching", "responded") for p in self.attempts(turn.id)
            )
        )


def _attempt(provider_turn: ProviderTurn) -> int:
    return provider_turn.attempt


# --- events ----------------------------------------------------------------------


class ConversationEvent(DomainEvent):
    pass


class ConversationOpened(ConversationEvent):
    work_item_id: UUID


class MailboxEntryEnqueued(ConversationEvent):
    entry_id: UUID
    sequence: int
    kind: str
    source_key: str
    trigger: dict[str, Any] = {}
    turn_id: UUID | None = None


class MailboxEntryClaimed(ConversationEvent):
    """Also moves the turn's prepared and responded provider turns to the new claim (9.5)."""

    entry_id: UUID
    owner: str
    epoch: int
    lease_expires_at: datetime


class MailboxLeaseRenewed(ConversationEvent):
    entry_id: UUID
    epoch: int
    lease_expires_at: datetime


class MailboxEntryReleased(ConversationEvent):
    """Back to pending, epoch kept; ``detach_turn`` when its failed turn will be
    retried as a new one."""

    entry_id: UUID
    reason: str
    detach_turn: bool = False


class MailboxEntryAcked(ConversationEvent):
    entry_id: UUID


class MailboxEntryCancelled(ConversationEvent):
    entry_id: UUID


class CoordinatorTurnBegun(ConversationEvent):
    turn_id: UUID
    entry_id: UUID
    user_originated: bool
    automatic: bool
    user_message_id: UUID | None = None
    user_text: str | None = None
    client_message_id: str | None = None
    assistant_message_id: UUID
    trigger: dict[str, Any] | None = None
    item_version: int
    fingerprint: str
    coordinator_revision: int


class CoordinatorSpeakerAssigned(ConversationEvent):
    turn_id: UUID
    speaker: Speaker


class CoordinatorTurnDecided(ConversationEvent):
    turn_id: UUID
    reply: str
    decision: DecisionSummary
    coordinator_revision: int


class CoordinatorTurnFailed(ConversationEvent):
    turn_id: UUID
    error: str
    retry_scheduled: bool
    counted: bool
    coordinator_revision: int


class CoordinatorTurnInterrupted(ConversationEvent):
    """An orphaned turn found by recovery when the store was opened (2.4); counted."""

    turn_id: UUID
    error: str
    coordinator_revision: int


class CoordinatorTurnRetired(ConversationEvent):
    """An explicit resume retired a thinking turn: pre-stop decisions never apply (6.4)."""

    turn_id: UUID
    coordinator_revision: int


class ProviderTurnPrepared(ConversationEvent):
    provider_turn_id: UUID
    turn_id: UUID
    attempt: int
    request_hash: str
    request: dict[str, Any]
    owner: str
    epoch: int


class ProviderTurnDispatched(ConversationEvent):
    provider_turn_id: UUID
    request_id: str


class ProviderTurnResponded(ConversationEvent):
    provider_turn_id: UUID
    response: str
    response_hash: str


class ProviderTurnRejected(ConversationEvent):
    provider_turn_id: UUID
    error: str


class ProviderTurnUnknown(ConversationEvent):
    provider_turn_id: UUID


TURN_ENDS: tuple[type[ConversationEvent], ...] = (
    CoordinatorTurnDecided,
    CoordinatorTurnFailed,
    CoordinatorTurnInterrupted,
    CoordinatorTurnRetired,
)


# --- evolve ----------------------------------------------------------------------


def evolve(state: ConversationState | None, event: ConversationEvent) -> ConversationState:
    if state is None:
        if not isinstance(event, ConversationOpened):
            raise no_start(event)
        return ConversationState(
            id=event.originator_id,
            version=event.originator_version,
            work_item_id=event.work_item_id,
        )
    changes: dict[str, object] = {"version": event.originator_version}
    match event:
        case MailboxEntryEnqueued():
            entry = Entry(
                id=event.entry_id,
                sequence=event.sequence,
                kind=event.kind,
                source_key=event.source_key,
                status="pending",
                trigger=event.trigger,
                turn_id=event.turn_id,
                created_at=event.timestamp,
            )
            changes["entries"] = (*state.entries, entry)
            changes["source_keys"] = {**state.source_keys, event.source_key: event.entry_id}
        case MailboxEntryClaimed():
            changes |= _claimed(state, event)
        case MailboxLeaseRenewed():
            changes["entries"] = _entry(
                state, event.entry_id, lease_expires_at=event.lease_expires_at
            )
        case MailboxEntryReleased():
            update: dict[str, object] = {"status": "pending", "lease_expires_at": None}
            if event.detach_turn:
                update["turn_id"] = None
            changes["entries"] = _entry(state, event.entry_id, **update)
        case MailboxEntryAcked():
            changes["entries"] = _entry(
                state, event.entry_id, status="acked", acked_at=event.timestamp
            )
        case MailboxEntryCancelled():
            changes["entries"] = _entry(state, event.entry_id, status="cancelled")
        case CoordinatorTurnBegun():
            changes |= _begun(state, event)
        case CoordinatorSpeakerAssigned():
            turn = state.turns[event.turn_id]
            changes["messages"] = _message(state, turn.assistant_message_id, speaker=event.speaker)
        case CoordinatorTurnDecided():
            changes |= _ended(
                state,
                event.turn_id,
                "decided",
                event,
                text=event.reply,
                decision=event.decision,
                status="completed",
            )
        case CoordinatorTurnFailed() | CoordinatorTurnInterrupted():
            changes |= _ended(state, event.turn_id, "failed", event, error=event.error)
        case CoordinatorTurnRetired():
            changes |= _ended(
                state, event.turn_id, "failed", event, error="retired by an explicit resume"
            )
        case ProviderTurnPrepared():
            provider_turn = ProviderTurn(
                id=event.provider_turn_id,
                turn_id=event.turn_id,
                attempt=event.attempt,
                status="prepared",
                request_hash=event.request_hash,
                claim_owner=event.owner,
                claim_epoch=event.epoch,
                created_at=event.timestamp,
            )
            changes["provider_turns"] = (*state.provider_turns, provider_turn)
            turn = state.turns[event.turn_id].model_copy(update={"prepared_any": True})
            changes["turns"] = {**state.turns, turn.id: turn}
        case ProviderTurnDispatched():
            current = state.provider_turn(event.provider_turn_id)
            assert current is not None
            changes["provider_turns"] = _provider_turn(
                state,
                event.provider_turn_id,
                status="dispatching",
                dispatches=current.dispatches + 1,
            )
        case ProviderTurnResponded():
            changes["provider_turns"] = _provider_turn(
                state,
                event.provider_turn_id,
                status="responded",
                response=event.response,
                response_hash=event.response_hash,
            )
        case ProviderTurnRejected():
            changes["provider_turns"] = _provider_turn(
                state, event.provider_turn_id, status="rejected", error=event.error
            )
        case ProviderTurnUnknown():
            changes["provider_turns"] = _provider_turn(
                state, event.provider_turn_id, status="unknown"
            )
        case _:
            raise TypeError(f"unknown Conversation event {event!r}")
    return state.model_copy(update=changes)


def _entry(state: ConversationState, entry_id: UUID, **update: object) -> tuple[Entry, ...]:
    return tuple(e.model_copy(update=update) if e.id == entry_id else e for e in state.entries)


def _message(state: ConversationState, message_id: UUID, **update: object) -> tuple[Message, ...]:
    return tuple(m.model_copy(update=update) if m.id == message_id else m for m in state.messages)


def _provider_turn(
    state: ConversationState, provider_turn_id: UUID, **update: object
) -> tuple[ProviderTurn, ...]:
    return tuple(
        p.model_copy(update=update) if p.id == provider_turn_id else p for p in state.provider_turns
    )


def _claimed(state: ConversationState, event: MailboxEntryClaimed) -> dict[str, object]:
    entries = _entry(
        state,
        event.entry_id,
        status="claimed",
        claim_owner=event.owner,
        claim_epoch=event.epoch,
        claimed_at=event.timestamp,
        lease_expires_at=event.lease_expires_at,
    )
    entry = state.entry(event.entry_id)
    turn_id = entry.turn_id if entry is not None else None
    moved = tuple(
        p.model_copy(update={"claim_owner": event.owner, "claim_epoch": event.epoch})
        if p.turn_id == turn_id and p.status in ("prepared", "responded")
        else p
        for p in state.provider_turns
    )
    return {"entries": entries, "provider_turns": moved}


def _begun(state: ConversationState, event: CoordinatorTurnBegun) -> dict[str, object]:
    messages = list(state.messages)
    if event.user_message_id is not None:
        messages.append(
            Message(
                id=event.user_message_id,
                turn_id=event.turn_id,
                role="user",
                status="completed",
                text=event.user_text or "",
                created_at=event.timestamp,
                finished_at=event.timestamp,
            )
        )
    messages.append(
        Message(
            id=event.assistant_message_id,
            turn_id=event.turn_id,
            role="assistant",
            status="thinking",
            text="",
            user_originated=event.user_originated,
            automatic=event.automatic,
            trigger=event.trigger,
            created_at=event.timestamp,
        )
    )
    turn = Turn(
        id=event.turn_id,
        entry_id=event.entry_id,
        status="thinking",
        user_originated=event.user_originated,
        automatic=event.automatic,
        assistant_message_id=event.assistant_message_id,
        user_text=event.user_text,
        trigger=event.trigger,
        item_version=event.item_version,
        fingerprint=event.fingerprint,
        coordinator_revision=event.coordinator_revision,
        requested_by=event.actor if event.user_originated else None,
    )
    changes: dict[str, object] = {
        "messages": tuple(messages),
        "turns": {**state.turns, turn.id: turn},
        "coordinator_revision": event.coordinator_revision,
        "entries": _entry(state, event.entry_id, turn_id=event.turn_id),
    }
    if event.client_message_id is not None:
        changes["client_message_ids"] = {
            **state.client_message_ids,
            event.client_message_id: event.turn_id,
        }
    return changes


def _ended(
    state: ConversationState,
    turn_id: UUID,
    turn_status: TurnStatus,
    event: CoordinatorTurnDecided
    | CoordinatorTurnFailed
    | CoordinatorTurnInterrupted
    | CoordinatorTurnRetired,
    **message: object,
) -> dict[str, object]:
    turn = state.turns[turn_id]
    message.setdefault("status", "failed")
    return {
        "turns": {**state.turns, turn_id: turn.model_copy(update={"status": turn_status})},
        "messages": _message(
            state, turn.assistant_message_id, finished_at=event.timestamp, **message
        ),
        "coordinator_revision": event.coordinator_revision,
    }


def fold(
    state: ConversationState | None, events: Iterable[ConversationEvent]
) -> ConversationState | None:
    for event in events:
        state = evolve(state, event)
    return state
