"""The Conversation's decisions: what each Coordinator command appends to it.

A ``Decider`` emits one command's Conversation events (opening the stream
first if the WorkItem has none yet) and keeps the state after them, so later
steps of the same command see it. Every turn step needs the active mailbox
claim (coordinator.md 2.2); a refusal is raised before the event exists.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any
from uuid import UUID, uuid4

from workcenter.domain import conversation as conv
from workcenter.domain import inputs
from workcenter.domain.actor import Actor
from workcenter.domain.errors import CommandRefused, InvalidInput
from workcenter.domain.model import DomainEvent, Emitter


class Decider:
    """Emits a command's Conversation events, opening the stream first if needed, and
    keeps the state after them so later steps of the command see it."""

    def __init__(
        self,
        state: conv.ConversationState | None,
        work_item_id: UUID,
        at: datetime,
        by: Actor,
        sink: list[DomainEvent] | None = None,
    ) -> None:
        self.state = state
        self.work_item_id = work_item_id
        self.at = at
        self.by = by
        self.events: list[conv.ConversationEvent] = []
        # A Unit's event list: the events join the command's other events as emitted.
        self._sink = sink

    def emit(
        self, event_class: type[conv.ConversationEvent], by: Actor | None = None, **fields: Any
    ) -> conv.ConversationEvent:
        if self.state is None:
            opened: Emitter[conv.ConversationEvent] = Emitter(
                conv.conversation_id_for(self.work_item_id), 0, self.at, by or self.by
            )
            self._apply(opened(conv.ConversationOpened, work_item_id=self.work_item_id))
        assert self.state is not None
        emit: Emitter[conv.ConversationEvent] = Emitter.after(self.state, self.at, by or self.by)
        event = emit(event_class, **fields)
        self._apply(event)
        return event

    def _apply(self, event: conv.ConversationEvent) -> None:
        self.state = conv.evolve(self.state, event)
        self.events.append(event)
        if self._sink is not None:
            self._sink.append(event)

    @property
    def revision(self) -> int:
        return self.state.coordinator_revision if self.state else 0

    @property
    def next_sequence(self) -> int:
        entries = self.state.entries if self.state else ()
        return max((e.sequence for e in entries), default=0) + 1

    # --- the mailbox ----------------------------------------------------------

    def enqueue(
        self,
        kind: str,
        source_key: str | None,
        trigger: dict[str, Any],
        turn_id: UUID | None = None,
    ) -> UUID:
        """A known source key returns the existing entry and writes nothing (2.1)."""
        key = source_key or f"coordinator:entry:{uuid4()}"
        known = self.state.source_keys.get(key) if self.state else None
        if known is not None:
            return known
        entry_id = uuid4()
        self.emit(
            conv.MailboxEntryEnqueued,
            entry_id=entry_id,
            sequence=self.next_sequence,
            kind=kind,
            source_key=key,
            trigger=trigger,
            turn_id=turn_id,
        )
        return entry_id

    def claim(self, entry: conv.Entry, owner: str, lease: timedelta) -> conv.ClaimRef:
        """Claim a pending or expired entry: epoch + 1, a new lease."""
        if not entry.available(self.at):
            raise CommandRefused(f"mailbox entry {entry.id} is {entry.status}")
        epoch = entry.claim_epoch + 1
        self.emit(
            conv.MailboxEntryClaimed,
            entry_id=entry.id,
            owner=owner,
            epoch=epoch,
            lease_expires_at=self.at + max(lease, conv.MIN_LEASE),
        )
        return conv.ClaimRef(
            work_item_id=self.work_item_id,
            entry_id=entry.id,
            owner=owner,
            epoch=epoch,
            turn_id=entry.turn_id,
        )

    def renew(self, claim: conv.ClaimRef, lease: timedelta) -> bool:
        state = self._require()
        if not state.is_active(claim, self.at):
            return False
        self.emit(
            conv.MailboxLeaseRenewed,
            entry_id=claim.entry_id,
            epoch=claim.epoch,
            lease_expires_at=self.at + max(lease, conv.MIN_LEASE),
        )
        return True

    def release(self, claim: conv.ClaimRef, reason: str) -> bool:
        state = self._require()
        entry = state.entry(claim.entry_id)
        if entry is None or entry.status != "claimed" or not _holds(entry, claim):
            return False
        self.emit(conv.MailboxEntryReleased, entry_id=entry.id, reason=reason)
        return True

    def expire_claims(self) -> None:
        """Recovery (2.4, 1): claims whose lease ran out go back to pending."""
        for entry in self._require().entries:
            if entry.expired(self.at):
                self.emit(conv.MailboxEntryReleased, entry_id=entry.id, reason="lease expired")

    # --- turns ------------------------------------------------------------------

    def begin_user_turn(
        self,
        *,
        text: str,
        client_message_id: str | None,
        item_version: int,
        fingerprint: str,
    ) -> UUID:
        """Append the user message and the thinking placeholder, enqueue the turn's
        ``message`` entry, bump the coordinator revision (1.2)."""
        if self.state is not None and self.state.thinking_turn() is not None:
            raise CommandRefused("a Coordinator turn is in progress; wait for it to end")
        if not inputs.visible(text):
            raise InvalidInput(
                "a message needs text" + (" (this one shows nothing)" if text else "")
            )
        turn_id = uuid4()
        key = (
            f"client:message:{self.work_item_id}:{client_message_id}"
            if client_message_id
            else f"coordinator:turn:{turn_id}"
        )
        entry_id = self.enqueue("message", key, {"kind": "message"})
        self.emit(
            conv.CoordinatorTurnBegun,
            turn_id=turn_id,
            entry_id=entry_id,
            user_originated=True,
            automatic=False,
            user_message_id=uuid4(),
            user_text=text,
            client_message_id=client_message_id,
            assistant_message_id=uuid4(),
            item_version=item_version,
            fingerprint=fingerprint,
            coordinator_revision=self.revision + 1,
        )
        return turn_id

    def begin_automatic_turn(
        self, claim: conv.ClaimRef, *, item_version: int, fingerprint: str
    ) -> conv.ClaimRef:
        """An automatic turn on the claimed entry (2.3); the caller checked the gate."""
        state = self._require()
        entry = state.entry(claim.entry_id)
        if entry is None or not state.is_active(claim, self.at):
            raise CommandRefused("the mailbox claim is no longer active")
        if entry.turn_id is not None:
            raise CommandRefused(f"mailbox entry {entry.id} already has a turn")
        if state.thinking_turn() is not None:
            raise CommandRefused("a Coordinator turn is in progress")
        turn_id = uuid4()
        self.emit(
            conv.CoordinatorTurnBegun,
            turn_id=turn_id,
            entry_id=entry.id,
            user_originated=False,
            automatic=True,
            assistant_message_id=uuid4(),
            trigger={"kind": entry.kind, "source_key": entry.source_key, **entry.trigger},
            item_version=item_version,
            fingerprint=fingerprint,
            coordinator_revision=self.revision + 1,
        )
        return claim.model_copy(update={"turn_id": turn_id})

    def decide(self, claim: conv.ClaimRef, reply: str, decision: conv.DecisionSummary) -> None:
        """The turn's decision applied: its message completes and its entry is acked."""
        turn = self.active_turn(claim)
        self.emit(
            conv.CoordinatorTurnDecided,
            turn_id=turn.id,
            reply=reply[: conv.TEXT_LIMIT],
            decision=decision,
            coordinator_revision=self.revision + 1,
        )
        self.emit(conv.MailboxEntryAcked, entry_id=claim.entry_id)

    def fail(self, claim: conv.ClaimRef, error: str, *, counted: bool, retry: bool) -> None:
        """fail_turn (6.1): the message fails; the entry is released for a new turn
        (``retry``) or acked. The caller recorded the ledger failure first, and rejected
        any responded provider turn."""
        turn = self.active_turn(claim)
        if any(p.status == "responded" for p in self._require().attempts(turn.id)):
            raise CommandRefused("a responded provider turn must be rejected first")
        self.emit(
            conv.CoordinatorTurnFailed,
            turn_id=turn.id,
            error=error[: conv.ERROR_LIMIT],
            retry_scheduled=retry,
            counted=counted,
            coordinator_revision=self.revision + 1,
        )
        if retry:
            self.emit(
                conv.MailboxEntryReleased,
                entry_id=claim.entry_id,
                reason="turn failed; retried as a new turn",
                detach_turn=True,
            )
        else:
            self.emit(conv.MailboxEntryAcked, entry_id=claim.entry_id)

    def interrupt_orphan(self, turn: conv.Turn, error: str) -> None:
        """Recovery at store open (2.4, 3): a thinking turn that cannot be resumed."""
        entry = self._require().entry(turn.entry_id)
        self.emit(
            conv.CoordinatorTurnInterrupted,
            turn_id=turn.id,
            error=error,
            coordinator_revision=self.revision + 1,
        )
        if entry is None or entry.status not in ("pending", "claimed"):
            return
        if turn.automatic and not turn.prepared_any:
            self.emit(
                conv.MailboxEntryReleased,
                entry_id=entry.id,
                reason="orphaned turn interrupted",
                detach_turn=True,
            )
        else:
            self.emit(conv.MailboxEntryAcked, entry_id=entry.id)

    def retire_thinking(self) -> list[conv.ProviderTurn]:
        """An explicit resume (6.4): every thinking turn fails, its open entry cancelled.
        Its dispatches have no active claim from then on: unknown (2.4), returned for
        their reservations to be settled unknown. Left dispatching, no recovery reached
        them once the entry was cancelled (found by acceptance testing); a late reply's
        usage still settles them (3.3)."""
        if self.state is None:
            return []
        unknown: list[conv.ProviderTurn] = []
        for turn in [t for t in self.state.turns.values() if t.status == "thinking"]:
            dispatched = [p for p in self.state.attempts(turn.id) if p.status == "dispatching"]
            self.emit(
                conv.CoordinatorTurnRetired, turn_id=turn.id, coordinator_revision=self.revision + 1
            )
            entry = self._require().entry(turn.entry_id)
            if entry is not None and entry.status in ("pending", "claimed"):
                self.emit(conv.MailboxEntryCancelled, entry_id=entry.id)
            for provider_turn in dispatched:
                self.mark_unknown(provider_turn)
            unknown.extend(dispatched)
        return unknown

    # --- provider turns -----------------------------------------------------------

    def prepare(
        self, claim: conv.ClaimRef, *, attempt: int, request: dict[str, Any], request_hash: str
    ) -> conv.ProviderTurn:
        """A new provider turn, or the existing (turn, attempt) with the same hash (3.2)."""
        turn = self.active_turn(claim)
        if not 1 <= attempt <= conv.MAX_ATTEMPTS:
            raise CommandRefused(f"a turn has at most {conv.MAX_ATTEMPTS} attempts")
        existing = next(
            (p for p in self._require().attempts(turn.id) if p.attempt == attempt), None
        )
        if existing is not None:
            if existing.request_hash != request_hash:
                raise CommandRefused("the request of this attempt changed since it was prepared")
            if (existing.claim_owner, existing.claim_epoch) != (claim.owner, claim.epoch):
                raise CommandRefused("the provider turn belongs to another claim")
            return existing
        message = self._require().message(turn.assistant_message_id)
        if message is not None and message.speaker is None:
            self.emit(
                conv.CoordinatorSpeakerAssigned, turn_id=turn.id, speaker=conv.COORDINATOR_SPEAKER
            )
        provider_turn_id = uuid4()
        self.emit(
            conv.ProviderTurnPrepared,
            provider_turn_id=provider_turn_id,
            turn_id=turn.id,
            attempt=attempt,
            request_hash=request_hash,
            request=request,
            owner=claim.owner,
            epoch=claim.epoch,
        )
        created = self._require().provider_turn(provider_turn_id)
        assert created is not None
        return created

    def dispatch(self, claim: conv.ClaimRef, provider_turn_id: UUID, request_id: str) -> None:
        provider_turn = self._owned(claim, provider_turn_id, "prepared", "dispatching")
        self.emit(
            conv.ProviderTurnDispatched, provider_turn_id=provider_turn.id, request_id=request_id
        )

    def respond(
        self, claim: conv.ClaimRef, provider_turn_id: UUID, response: str, response_hash: str
    ) -> None:
        provider_turn = self._owned(claim, provider_turn_id, "dispatching")
        self.emit(
            conv.ProviderTurnResponded,
            provider_turn_id=provider_turn.id,
            response=response,
            response_hash=response_hash,
        )

    def reject(self, claim: conv.ClaimRef, provider_turn_id: UUID, error: str) -> None:
        provider_turn = self._owned(claim, provider_turn_id, "responded")
        self.emit(
            conv.ProviderTurnRejected,
            provider_turn_id=provider_turn.id,
            error=error[: conv.ERROR_LIMIT],
        )

    def mark_unknown(self, provider_turn: conv.ProviderTurn) -> None:
        """Recovery (2.4, 2): a dispatch whose claim is gone may or may not have been sent."""
        if provider_turn.status != "dispatching":
            raise CommandRefused(f"provider turn {provider_turn.id} is {provider_turn.status}")
        self.emit(conv.ProviderTurnUnknown, provider_turn_id=provider_turn.id)

    # --- checks -------------------------------------------------------------------

    def _require(self) -> conv.ConversationState:
        if self.state is None:
            raise CommandRefused(f"WorkItem {self.work_item_id} has no conversation")
        return self.state

    def active_turn(self, claim: conv.ClaimRef) -> conv.Turn:
        """The thinking turn the claim fences; TurnFenceLost-like refusals otherwise."""
        state = self._require()
        if claim.turn_id is None or not state.is_active(claim, self.at):
            raise CommandRefused("the mailbox claim is no longer active")
        turn = state.turns.get(claim.turn_id)
        if turn is None or turn.status != "thinking":
            raise CommandRefused(f"turn {claim.turn_id} is not thinking")
        return turn

    def _owned(
        self, claim: conv.ClaimRef, provider_turn_id: UUID, *statuses: str
    ) -> conv.ProviderTurn:
        self.active_turn(claim)
        provider_turn = self._require().provider_turn(provider_turn_id)
        if provider_turn is None or provider_turn.turn_id != claim.turn_id:
            raise CommandRefused(f"provider turn {provider_turn_id} is not of this turn")
        if (provider_turn.claim_owner, provider_turn.claim_epoch) != (claim.owner, claim.epoch):
            raise CommandRefused("the provider turn belongs to another claim")
        if provider_turn.status not in statuses:
            raise CommandRefused(f"provider turn {provider_turn.id} is {provider_turn.status}")
        return provider_turn


def _holds(entry: conv.Entry, claim: conv.ClaimRef) -> bool:
    return entry.claim_owner == claim.owner and entry.claim_epoch == claim.epoch
