"""An item's conversation for a browser: its messages and Coordinator turns (a pure function).

What leaves is what a person reads: the user's and the Coordinator's words (secrets
masked, home directories redacted, as for the user's own words elsewhere), each
message's state (thinking, completed, failed), the kind and reason of the decision
an answer carried, and per turn its status, what woke it and its provider attempts'
statuses. Never sent: provider request or response bodies and their hashes, mailbox
claims (owners, boot ids, epochs, leases), triggers and client message ids.

Bounded: the newest messages, at most ``MAX_MESSAGES`` of them and at most
``TEXT_BUDGET`` bytes of text together, so the DTO stays under the 512 KiB budget
(read-models.md 2.6) however long the conversation grew; ``omittedMessages`` counts
the older ones left out.
"""

from __future__ import annotations

from uuid import UUID

from workcenter.domain import conversation as conv
from workcenter.projections import dto_models as dtos
from workcenter.projections.sanitize import (
    UTF8_MAX,
    epoch_ms,
    ids,
    sanitize_failure,
    sanitize_personal,
    truncate_utf8,
    utf8_len,
)

MAX_MESSAGES = 100
TEXT_BUDGET = 384 * 1024
KIND_LIMIT = 64
REASON_LIMIT = 2_000
# A message's text and a decision's question, in bytes as sanitisers cut: every text the
# Conversation takes whole (ADR-0144), in this DTO and the CLI's conversation alike.
TEXT_BYTES = UTF8_MAX * conv.TEXT_LIMIT


def conversation_dto(state: conv.ConversationState | None) -> dtos.Conversation:
    """The messages (oldest first) and the turns they belong to; empty before the
    conversation's first event."""
    if state is None:
        return {
            "conversationVersion": 0,
            "coordinatorRevision": 0,
            "thinking": False,
            "pendingWakes": 0,
            "omittedMessages": 0,
            "messages": [],
            "turns": [],
        }
    shown: list[dtos.ConversationMessage] = []
    turn_ids: dict[UUID, None] = {}
    spent = 0
    for message in reversed(state.messages):
        entry = _message(message)
        spent += utf8_len(entry["text"]) + utf8_len(entry.get("error") or "")
        if len(shown) == MAX_MESSAGES or (shown and spent > TEXT_BUDGET):
            break
        shown.append(entry)
        turn_ids[message.turn_id] = None
    shown.reverse()
    return {
        "conversationVersion": state.version,
        "coordinatorRevision": state.coordinator_revision,
        "thinking": state.thinking_turn() is not None,
        "pendingWakes": len(state.open_entries()),
        "omittedMessages": len(state.messages) - len(shown),
        "messages": shown,
        "turns": [
            _turn(state, state.turns[turn_id])
            for turn_id in reversed(turn_ids)
            if turn_id in state.turns
        ],
    }


def _message(message: conv.Message) -> dtos.ConversationMessage:
    entry: dtos.ConversationMessage = {
        "id": str(message.id),
        "turnId": str(message.turn_id),
        "role": message.role,
        "status": message.status,
        "text": sanitize_personal(message.text, TEXT_BYTES),
        "automatic": message.automatic,
        "createdAt": epoch_ms(message.created_at),
    }
    if message.speaker is not None:
        entry["speaker"] = sanitize_personal(message.speaker.name, KIND_LIMIT)
    if message.finished_at is not None:
        entry["finishedAt"] = epoch_ms(message.finished_at)
    if message.error:
        entry["error"] = sanitize_failure(message.error, conv.ERROR_LIMIT)
    if message.decision is not None:
        entry["decision"] = _decision(message.decision)
    return entry


def _decision(decision: conv.DecisionSummary) -> dtos.ConversationDecision:
    summary: dtos.ConversationDecision = {
        "kind": truncate_utf8(decision.kind, KIND_LIMIT),
        "reason": sanitize_personal(decision.reason, REASON_LIMIT),
        "affectedActionIds": ids(decision.affected_action_ids),
    }
    if decision.question:
        summary["question"] = sanitize_personal(decision.question, TEXT_BYTES)
    return summary


def _turn(state: conv.ConversationState, turn: conv.Turn) -> dtos.ConversationTurn:
    entry = state.entry(turn.entry_id)
    return {
        "id": str(turn.id),
        "status": turn.status,
        "userOriginated": turn.user_originated,
        "automatic": turn.automatic,
        "wake": truncate_utf8(entry.kind, KIND_LIMIT) if entry is not None else None,
        "attempts": [{"attempt": p.attempt, "status": p.status} for p in state.attempts(turn.id)],
    }
