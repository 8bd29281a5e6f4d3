"""A user turn on a WorkItem that takes no plans (linear, or a draft) may only answer
(coordinator.md 1.2, 4.2): the model is offered nothing else, an answer lands in the
conversation, and nothing is charged as a Coordinator failure (issue 21, point 1)."""

from __future__ import annotations

import json
from typing import Any
from uuid import UUID

from conftest import create_dynamic, create_linear, refused
from domain_states import brief, decision

from workcenter.adapters.providers.scripted import ScriptedProvider
from workcenter.application import WorkCenter
from workcenter.domain import conversation as conv
from workcenter.domain.errors import CommandRefused


def say(kind: str, **fields: Any) -> str:
    return json.dumps(decision(kind, **fields))


def offered_kinds(provider: ScriptedProvider) -> list[str]:
    schema = provider.requests[-1].reply_schema
    decision_schema = schema["$defs"]["Decision"]
    return list(decision_schema["properties"]["kind"]["enum"])


def replies(wc: WorkCenter, item_id: UUID) -> list[conv.Message]:
    state = wc.conversation(item_id)
    assert state is not None
    return [m for m in state.messages if m.role == "assistant"]


def test_three_messages_on_a_linear_item_are_answered_and_cost_no_failure(
    wc: WorkCenter,
) -> None:
    item = create_linear(wc)
    provider = ScriptedProvider([])
    for n in range(3):
        wc.post_user_message(item.id, f"How is it going? ({n})")
        provider.then(say("answer", reply=f"Fine, thanks ({n})"))
        [step] = wc.coordinate_once(provider)
        assert step.status == "decided", step.error
        assert offered_kinds(provider) == ["answer"]
    assert provider.calls == 3  # one request per message, no corrective retry
    assert wc.ledger(item.id).coordinator_failures == 0
    after = wc.work_item(item.id)
    assert after.status == item.status and not after.stopped
    assert [m.text for m in replies(wc, item.id)] == [f"Fine, thanks ({n})" for n in range(3)]
    assert all(m.status == "completed" for m in replies(wc, item.id))


def test_a_message_on_a_draft_is_answered_and_the_draft_stays_a_draft(wc: WorkCenter) -> None:
    for item in (create_dynamic(wc, start=False), create_linear(wc, start=False)):
        provider = ScriptedProvider([say("answer", reply="It starts when you start it")])
        wc.post_user_message(item.id, "What will you do?")
        [step] = wc.coordinate_once(provider)
        assert step.status == "decided", step.error
        assert offered_kinds(provider) == ["answer"]
        assert provider.calls == 1
        assert wc.ledger(item.id).coordinator_failures == 0
        assert wc.work_item(item.id).status == "draft"
        assert replies(wc, item.id)[-1].text == "It starts when you start it"


def test_a_dynamic_started_item_is_still_offered_every_kind(wc: WorkCenter) -> None:
    item = create_dynamic(wc)
    provider = ScriptedProvider([say("create_actions", actions=[brief()])])
    wc.coordinate_once(provider)  # the automatic wake of the start
    assert "answer" not in offered_kinds(provider)
    wc.post_user_message(item.id, "And then?")
    provider.then(say("answer", reply="Then we wait"))
    wc.coordinate_once(provider)
    assert offered_kinds(provider) == [
        "answer",
        "create_actions",
        "guide_actions",
        "request_human",
        "complete",
    ]


def test_a_message_on_a_finished_linear_item_is_refused_and_writes_nothing(
    wc: WorkCenter,
) -> None:
    item = create_linear(wc)
    wc.cancel(item.id)
    with refused(wc, CommandRefused):
        wc.post_user_message(item.id, "Still there?")
