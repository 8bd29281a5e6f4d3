"""The Coordinator through the OpenAI-compatible adapter, end to end, against the stub
chat-completions server of ``test_providers`` on 127.0.0.1 (issue 9: a valid
structured decision, a malformed one with its one corrective retry, a rate limit
handled as transient, and the usage reported to the ledger)."""

from __future__ import annotations

import json
from typing import Any

import test_providers
from conftest import create_dynamic
from domain_states import brief, decision
from test_providers import Stub, provider

from workcenter.adapters.providers.openai_compatible import ERROR_EXCERPT
from workcenter.application import WorkCenter
from workcenter.domain.coordinator_request import CORRECTION_HEADING
from workcenter.domain.decisions import AUTOMATIC_TURN, reply_schema

PLAN = json.dumps(decision("create_actions", actions=[brief()]))
stub = test_providers.stub  # the stub server fixture
USAGE = {"prompt_tokens": 1200, "completion_tokens": 80, "total_tokens": 1280}


def _reservations(wc: WorkCenter, item_id: Any) -> list[Any]:
    return list(wc.ledger(item_id).reservations.values())


def test_a_valid_structured_decision_applies_and_its_usage_settles(
    wc: WorkCenter, stub: Stub
) -> None:
    item = create_dynamic(wc)
    stub.reply(PLAN, usage=USAGE)
    [result] = wc.coordinate_once(provider(stub))
    assert (result.status, result.attempts) == ("decided", 1), result.error
    assert len(wc.work_item(item.id).plan) == 1
    [sent] = stub.bodies
    # the start woke an automatic turn: it is offered only the kinds it may take
    assert sent["response_format"]["json_schema"]["schema"] == reply_schema(
        AUTOMATIC_TURN.allowed_kinds
    )
    [reservation] = _reservations(wc, item.id)
    assert (reservation.kind, reservation.status, reservation.charged_tokens) == (
        "coordinator",
        "reported",
        1280,
    )


def test_a_malformed_reply_gets_one_corrective_retry(wc: WorkCenter, stub: Stub) -> None:
    item = create_dynamic(wc)
    stub.reply("I think we should plan something, but here is no JSON.", usage=USAGE)
    stub.reply(PLAN, usage=USAGE)
    [result] = wc.coordinate_once(provider(stub))
    assert (result.status, result.attempts) == ("decided", 2), result.error
    first, second = (body["messages"][-1]["content"] for body in stub.bodies)
    assert CORRECTION_HEADING not in first and CORRECTION_HEADING in second
    assert len(wc.work_item(item.id).plan) == 1
    # Each attempt is its own provider turn: reserved, then settled with what it used.
    assert [(r.status, r.charged_tokens) for r in _reservations(wc, item.id)] == [
        ("reported", 1280),
        ("reported", 1280),
    ]


def test_a_rate_limit_is_transient_charged_and_retried_later(wc: WorkCenter, stub: Stub) -> None:
    item = create_dynamic(wc)
    stub.fail(429, "slow down")
    stub.fail(429, "slow down")
    [result] = wc.coordinate_once(provider(stub, max_retries=1))
    assert result.status == "failed"
    assert len(stub.received) == 2  # the client's own retry went out, and was charged
    reservations = _reservations(wc, item.id)
    assert len(reservations) == 2 and all(r.status == "unknown" for r in reservations)
    assert wc.ledger(item.id).coordinator_failures == 1
    state = wc.conversation(item.id)
    assert state is not None
    assert [e.status for e in state.entries] == ["pending"]  # woken again after the backoff
    assert wc.work_item(item.id).plan == ()


def test_a_provider_that_echoes_the_api_key_does_not_get_it_stored(
    wc: WorkCenter, stub: Stub
) -> None:
    """A server that names the key it was sent in its error ("Incorrect API key provided:
    ...", as some OpenAI-compatible servers and proxies do) had the whole key stored in
    the turn's failure, in events no one can edit, and shown by every read: a key of a
    shape the views' masks do not know went out whole (found by acceptance testing,
    ADR-0137). The adapter masks its own key in whatever the server said."""
    key = "AIzaSyD-FAKEKEYFAKEKEY1234567890abcdef"
    item = create_dynamic(wc)
    stub.fail(401, f"Incorrect API key provided: {key}. You can find your key at ...")
    [result] = wc.coordinate_once(provider(stub, api_key=key, max_retries=0))
    assert result.status == "failed" and result.error is not None
    assert key not in result.error and "Incorrect API key provided: ***" in result.error
    rows = wc.store.recorder.select_notifications(start=1, limit=10_000)
    stored = [repr(wc.store.mapper.to_domain_event(row)) for row in rows]
    assert any("Incorrect API key provided: ***" in event for event in stored)
    assert not any(key in event for event in stored)
    assert key not in json.dumps(wc.detail(item.id))


def test_a_key_the_excerpt_cuts_is_masked_too(wc: WorkCenter, stub: Stub) -> None:
    """The server's words are cut to an excerpt before they are kept: a key that crossed
    the cut kept its first part whole (found by review, ADR-0137)."""
    key = "sk-proxy-" + "K" * 42
    create_dynamic(wc)
    lead = "x" * (ERROR_EXCERPT - 40)
    stub.fail(401, f"{lead} {key} and more words after it")
    [result] = wc.coordinate_once(provider(stub, api_key=key, max_retries=0))
    assert result.error is not None and key[:12] not in result.error, result.error
    rows = wc.store.recorder.select_notifications(start=1, limit=10_000)
    assert not any(key[:12] in repr(wc.store.mapper.to_domain_event(row)) for row in rows)
