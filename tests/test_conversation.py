"""The Conversation aggregate's rules in the pure domain (coordinator.md 1, 2, 3.1,
3.2, 7): every refusal is raised before an event exists."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from uuid import uuid4

import pytest

from workcenter.domain import conversation as conv
from workcenter.domain import turns
from workcenter.domain.actor import Actor, user
from workcenter.domain.errors import CommandRefused, InvalidInput

T0 = datetime(2026, 1, 1, 12, tzinfo=UTC)
ITEM = uuid4()
OWNER = "coordinator@boot-1"
LEASE = timedelta(seconds=60)
BY = Actor(kind="coordinator", id=OWNER)


def decider(state: conv.ConversationState | None = None, at: datetime = T0) -> turns.Decider:
    return turns.Decider(state, ITEM, at, BY)


def user_turn() -> tuple[conv.ConversationState, conv.ClaimRef]:
    """A user turn begun and claimed."""
    d = turns.Decider(None, ITEM, T0, user("alice"))
    d.begin_user_turn(text="Hello", client_message_id="c1", item_version=3, fingerprint="f")
    assert d.state is not None
    entry = d.state.entries[0]
    claiming = decider(d.state)
    claim = claiming.claim(entry, OWNER, LEASE)
    assert claiming.state is not None
    return claiming.state, claim


def unchanged(d: turns.Decider, before: int) -> None:
    assert d.events == [] and (d.state is None or d.state.version == before)


def test_a_user_turn_appends_two_messages_an_entry_and_bumps_the_revision() -> None:
    state, claim = user_turn()
    user_message, thinking = state.messages
    assert (user_message.role, user_message.status, user_message.text) == (
        "user",
        "completed",
        "Hello",
    )
    assert (thinking.role, thinking.status, thinking.user_originated) == (
        "assistant",
        "thinking",
        True,
    )
    assert state.coordinator_revision == 1
    assert state.client_message_ids == {"c1": claim.turn_id}
    [entry] = state.entries
    assert (entry.kind, entry.source_key, entry.status) == (
        "message",
        f"client:message:{ITEM}:c1",
        "claimed",
    )
    turn = state.turns[claim.turn_id]  # type: ignore[index]
    assert turn.requested_by == user("alice") and (turn.item_version, turn.fingerprint) == (3, "f")


def test_one_thinking_turn_at_a_time_and_text_is_required() -> None:
    state, _ = user_turn()
    d = decider(state)
    with pytest.raises(CommandRefused, match="in progress"):
        d.begin_user_turn(text="Again", client_message_id=None, item_version=3, fingerprint="f")
    with pytest.raises(InvalidInput):
        decider().begin_user_turn(text="", client_message_id=None, item_version=1, fingerprint="f")
    unchanged(d, state.version)


def test_a_known_source_key_wakes_once() -> None:
    d = decider()
    first = d.enqueue("work_item_started", "dynamic:start:x:1", {})
    again = d.enqueue("work_item_started", "dynamic:start:x:1", {"other": 1})
    assert first == again and len(d.events) == 2  # opened + one entry
    assert d.enqueue("custom", None, {}) != first  # no key: a fresh one


def test_claims_fence_every_step_and_epochs_only_grow() -> None:
    state, claim = user_turn()
    later = T0 + timedelta(seconds=61)
    stale = decider(state, later)
    assert stale.renew(claim, LEASE) is False
    with pytest.raises(CommandRefused, match="no longer active"):
        stale.prepare(claim, attempt=1, request={}, request_hash="h")
    unchanged(stale, state.version)
    taken = stale.claim(state.entries[0], "coordinator@boot-2", LEASE)
    assert taken.epoch == claim.epoch + 1
    assert stale.release(claim, "stale") is False
    with pytest.raises(CommandRefused):
        decider(stale.state, later).claim(stale.state.entries[0], OWNER, LEASE)  # type: ignore[union-attr]


def test_provider_turns_move_only_along_their_states() -> None:
    state, claim = user_turn()
    d = decider(state)
    prepared = d.prepare(claim, attempt=1, request={"messages": []}, request_hash="h1")
    assert d.prepare(claim, attempt=1, request={}, request_hash="h1") == prepared  # idempotent
    with pytest.raises(CommandRefused, match="changed"):
        d.prepare(claim, attempt=1, request={}, request_hash="other")
    with pytest.raises(CommandRefused, match="at most"):
        d.prepare(claim, attempt=3, request={}, request_hash="h3")
    with pytest.raises(CommandRefused):
        d.respond(claim, prepared.id, "text", "hash")  # not dispatching
    with pytest.raises(CommandRefused):
        d.reject(claim, prepared.id, "why")  # not responded
    with pytest.raises(CommandRefused):
        d.mark_unknown(prepared)  # not dispatching
    d.dispatch(claim, prepared.id, "r1")
    d.dispatch(claim, prepared.id, "r2")  # a transport retry keeps dispatching
    d.respond(claim, prepared.id, "text", "hash")
    with pytest.raises(CommandRefused):
        d.dispatch(claim, prepared.id, "r3")  # responded is never re-sent
    d.reject(claim, prepared.id, "invalid")
    assert d.state is not None
    [turn] = d.state.provider_turns
    assert (turn.status, turn.dispatches, turn.error) == ("rejected", 2, "invalid")
    assert d.state.messages[-1].speaker == conv.COORDINATOR_SPEAKER


def test_a_turn_ends_once_and_its_entry_is_acked_or_released() -> None:
    state, claim = user_turn()
    d = decider(state)
    d.decide(claim, "Hi", conv.DecisionSummary(kind="answer"))
    assert d.state is not None
    assert (d.state.messages[-1].status, d.state.entries[0].status) == ("completed", "acked")
    assert d.state.coordinator_revision == 2
    with pytest.raises(CommandRefused):
        d.fail(claim, "late", counted=True, retry=False)


def test_a_failed_automatic_turn_releases_its_entry_for_a_new_turn() -> None:
    d = decider()
    entry_id = d.enqueue("action_settled", "k", {"run_id": "r"})
    assert d.state is not None
    claim = d.claim(d.state.entry(entry_id), OWNER, LEASE)  # type: ignore[arg-type]
    turn_claim = d.begin_automatic_turn(claim, item_version=1, fingerprint="f")
    with pytest.raises(CommandRefused, match="already has a turn"):
        d.begin_automatic_turn(claim, item_version=1, fingerprint="f")
    d.fail(turn_claim, "provider down", counted=True, retry=True)
    entry = d.state.entry(entry_id)
    assert entry is not None and (entry.status, entry.turn_id) == ("pending", None)
    assert d.state.messages[-1].trigger == {
        "kind": "action_settled",
        "source_key": "k",
        "run_id": "r",
    }


def test_a_resume_retires_thinking_turns_and_cancels_their_entries() -> None:
    state, _ = user_turn()
    d = decider(state)
    d.retire_thinking()
    assert d.state is not None
    assert d.state.thinking_turn() is None
    assert d.state.entries[0].status == "cancelled"
    assert d.state.messages[-1].status == "failed"
