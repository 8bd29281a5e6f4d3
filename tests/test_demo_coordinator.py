"""The scripted Coordinator along the demo's walkthrough, in the pure domain: every reply
it gives is parsed and applied by the real decision rules, against states the
domain's own functions built (``domain_states.History``), with the request the real
``build_request`` makes. No store, no provider."""

from __future__ import annotations

import json
from typing import Any
from uuid import UUID

import pytest
from domain_states import History

from workcenter.adapters.demo import CRITERIA
from workcenter.adapters.providers import scripted_coordinator as scripted
from workcenter.adapters.providers.scripted import ScriptedProvider
from workcenter.domain import lifecycle, planning
from workcenter.domain import work_item as wi
from workcenter.domain.actor import USER
from workcenter.domain.coordinator_request import ConversationLine, build_request
from workcenter.domain.decisions import AUTOMATIC_TURN, USER_TURN, TurnAuthority
from workcenter.domain.errors import ProviderFailed
from workcenter.service_layer.ports import ProviderTurnRequest

ANSWER = "3.11 and 3.12"


def checks(*statuses: str) -> list[dict[str, str]]:
    return [
        {"criterion": c, "status": s, "evidence": f"{s} per the log"}
        for c, s in zip(CRITERIA, statuses, strict=True)
    ]


DIAGNOSED = {
    "outcome": "completed",
    "summary": "The package init imports a module removed in 2.0.",
    "evidence": ["pytest -k import: 1 failed (reproduced)"],
    "acceptanceChecks": checks("passed", "deferred", "deferred"),
}
BROKE_PLUGINS = {
    "outcome": "failed",
    "summary": "The fix broke the plugin loader.",
    "error": "plugins still import the old module name",
}
FIXED = {
    "outcome": "completed",
    "summary": "Replaced the removed import and added test_import.",
    "evidence": ["pytest: 48 passed"],
    "acceptanceChecks": checks("passed", "passed", "deferred"),
}
VERIFIED = {
    "outcome": "completed",
    "summary": "Suite green on 3.11 and 3.12.",
    "response": "The import came from a module removed in 2.0; fixed and tested.",
    "evidence": ["pytest on 3.11: 48 passed", "pytest on 3.12: 48 passed"],
    "acceptanceChecks": checks("passed", "passed", "passed"),
}


class Walk:
    """A WorkItem coordinated by the scripted Coordinator: each turn builds the real request,
    asks the policy, and parses and applies its reply, which must be accepted."""

    def __init__(
        self, delivery_target: str | None = "response", criteria: tuple[str, ...] = CRITERIA
    ) -> None:
        self.h = History(
            criteria=criteria, goal="The suite passes again", delivery_target=delivery_target
        )
        self.lines: list[ConversationLine] = []
        self.requests: list[ProviderTurnRequest] = []

    def wake(self, kind: str, **trigger: Any) -> dict[str, Any]:
        prompt = json.dumps(
            {"kind": kind, "source_key": f"dynamic:{kind}"} | trigger,
            sort_keys=True,
            separators=(",", ":"),
        )
        return self.turn(prompt, AUTOMATIC_TURN)

    def say(self, text: str) -> dict[str, Any]:
        self.lines.append(
            ConversationLine(role="user", text=text, status="completed", at=self.h.tick())
        )
        return self.turn(text, USER_TURN)

    def turn(self, prompt: str, authority: TurnAuthority) -> dict[str, Any]:
        h = self.h
        body = build_request(
            h.item,
            h.actions,
            planning.progress(h.item, h.actions),
            self.lines,
            prompt,
            None,
            ledger=h.ledger,
        )
        request = ProviderTurnRequest(
            turn_id=f"turn-{len(self.requests)}",
            attempt=1,
            messages=body.messages,
            reply_schema=body.reply_schema,
        )
        self.requests.append(request)
        text = scripted.respond(request)
        reply = h.parse(text, authority)
        h.take(h.apply(reply, authority))
        self.lines.append(
            ConversationLine(role="assistant", text=reply.reply, status="completed", at=h.at)
        )
        decided: dict[str, Any] = json.loads(text)["decision"]
        return decided

    def only(self, *statuses: str) -> list[Any]:
        return sorted(
            (a for a in self.h.actions.values() if a.status in statuses), key=lambda a: a.sequence
        )

    def run(self, report: dict[str, Any]) -> UUID:
        (action,) = self.only("ready")
        return self.h.finish(action.id, report)


def test_the_walkthrough_plans_guides_asks_once_and_completes_on_proof() -> None:
    walk = Walk()
    h = walk.h

    first = walk.wake("work_item_started", contract_revision=1)
    assert first["kind"] == "create_actions"
    (diagnose,) = walk.only("ready")
    assert (diagnose.type, diagnose.workspace_mode) == ("diagnose", "read")

    walk.run(DIAGNOSED)
    assert walk.wake("action_settled")["kind"] == "create_actions"
    (implement,) = walk.only("ready")
    assert (implement.type, implement.workspace_mode) == ("implement", "shared")

    walk.run(BROKE_PLUGINS)
    guided = walk.wake("action_settled")
    assert guided["kind"] == "guide_actions"
    implement = h.actions[implement.id]
    assert (implement.status, implement.generation) == ("ready", 2)
    assert "plugins still import the old module name" in implement.context[-1].text

    walk.run(FIXED)
    asked = walk.wake("action_settled")
    assert (asked["kind"], asked["question"]) == ("request_human", scripted.MATRIX_QUESTION)
    assert h.item.status == "waiting" and not walk.only("ready")

    planned = walk.say(ANSWER)
    assert planned["kind"] == "create_actions"
    (verify,) = walk.only("ready")
    assert verify.type == "test" and ANSWER in verify.brief.objective

    walk.run({"outcome": "retryable", "error": "network lost"})
    verified = walk.run(VERIFIED)
    done = walk.wake("action_settled")
    assert done["kind"] == "complete"
    assert h.item.status == "done"
    assert h.item.final_result is not None
    results = done["completion"]["acceptanceResults"]
    assert [r["criterion"] for r in results] == list(CRITERIA)
    assert {str(verified)} <= set(done["completion"]["evidenceRunIds"])
    asks = [line for line in walk.lines if scripted.MATRIX_QUESTION in line.text]
    assert len(asks) == 1, "the human is asked once"


def test_no_complete_while_a_criterion_is_unproven_and_no_blind_repeat() -> None:
    walk = Walk()
    walk.wake("work_item_started", contract_revision=1)
    walk.run(DIAGNOSED)
    walk.wake("action_settled")
    walk.run(FIXED)
    walk.wake("action_settled")
    walk.say(ANSWER)
    walk.run(VERIFIED | {"acceptanceChecks": checks("passed", "passed", "failed")})

    again = walk.wake("action_settled")
    assert again["kind"] == "request_human", "an unproven criterion is never completed"
    assert CRITERIA[2] in again["question"]
    assert walk.h.item.status == "waiting"

    repeat = walk.say("Yes, run it again")
    assert repeat["kind"] == "create_actions"
    (brief,) = repeat["actions"]
    assert ANSWER in brief["objective"], "the matrix answer still holds"
    assert len(brief["rationale"]) >= 20 and brief["goalRefs"]["criteria"] == [CRITERIA[2]]


def test_a_user_message_while_work_is_in_flight_gets_an_answer() -> None:
    walk = Walk()
    walk.wake("work_item_started", contract_revision=1)
    before = dict(walk.h.actions)
    reply = walk.say("How is it going?")
    assert reply["kind"] == "answer"
    assert walk.h.actions == before


def test_after_a_resume_it_asks_and_a_user_message_lets_it_plan_again() -> None:
    walk = Walk()
    h = walk.h
    walk.wake("work_item_started", contract_revision=1)
    walk.run(DIAGNOSED)
    walk.wake("action_settled")
    h.take(lifecycle.cancel(h.item, h.actions, h.tick(), "budget", by=USER))
    h.take(lifecycle.resume(h.item, h.actions, h.ledger, h.tick(), by=USER))
    assert not walk.only("ready", "running", "waiting", "failed")

    asked = walk.wake("work_item_resumed", ledger_control=h.ledger.control_version)
    assert asked["kind"] == "request_human" and "implement" in asked["question"]
    # Cancelled, not stopped by its budget (the question said "The budget stopped...").
    assert asked["question"].startswith("This WorkItem was stopped (cancelled, or by its budget)")
    again = walk.say("Yes, the budget is raised: carry on")
    assert again["kind"] == "create_actions"
    (implement,) = walk.only("ready")
    assert implement.type == "implement"


def test_a_waiting_run_is_relayed_to_the_human_and_the_answer_passed_back() -> None:
    walk = Walk()
    walk.wake("work_item_started", contract_revision=1)
    walk.run({"outcome": "waiting", "waitingReason": "May I run the slow tests?"})
    relayed = walk.wake("action_settled")
    assert relayed["question"] == "May I run the slow tests?"
    passed = walk.say("Yes")
    assert passed["kind"] == "guide_actions"
    (action,) = walk.only("ready")
    assert action.context[-1].text == "The human answers: Yes"


def test_a_second_attempt_honours_the_correction_and_serves_a_scripted_provider() -> None:
    walk = Walk()
    h = walk.h
    trigger = json.dumps({"kind": "work_item_started"})
    progress = planning.progress(h.item, h.actions)
    body = build_request(h.item, h.actions, progress, [], trigger, "reply was not JSON")
    turn = scripted.read_request(body.messages)
    assert turn.trigger == {"kind": "work_item_started"} and turn.automatic
    assert turn.snapshot["workItem"]["id"] == str(h.item.id)
    assert turn.correction == "reply was not JSON"

    provider = ScriptedProvider(respond=scripted.respond)
    request = ProviderTurnRequest("t", 2, body.messages, body.reply_schema)
    decision = h.parse(provider.answer(request, lambda: None).text, AUTOMATIC_TURN).decision
    assert decision.kind == "request_human", "the same reply would be refused again"
    assert "reply was not JSON" in (decision.question or "")
    first = build_request(h.item, h.actions, progress, [], trigger, None)
    assert scripted.read_request(first.messages).correction is None
    planned = scripted.respond(ProviderTurnRequest("t", 1, first.messages, {}))
    assert json.loads(planned)["decision"]["kind"] == "create_actions"


@pytest.mark.parametrize(
    "content",
    [
        "",
        "no snapshot here",
        "WorkItem snapshot (JSON):\n[1]\n\nThis turn:\nhi",
        'WorkItem snapshot (JSON):\n{"workItem": {}}\n\nThis turn:\nhi',
    ],
)
def test_a_request_without_a_snapshot_is_a_permanent_provider_failure(content: str) -> None:
    with pytest.raises(ProviderFailed, match="no WorkItem snapshot") as info:
        scripted.read_request([{"role": "user", "content": content}])
    assert not info.value.transient


def test_an_item_without_delivery_evidence_is_not_completed() -> None:
    walk = Walk(delivery_target="workspace_files")
    walk.wake("work_item_started", contract_revision=1)
    walk.run(DIAGNOSED)
    walk.wake("action_settled")
    walk.run(FIXED)
    walk.wake("action_settled")
    walk.say(ANSWER)
    walk.run(VERIFIED)
    progress = planning.progress(walk.h.item, walk.h.actions)
    assert not progress.remaining_criteria and progress.delivery.status == "unmet"
    asked = walk.wake("action_settled")
    assert asked["kind"] == "request_human" and "workspace_files" in asked["question"]
    assert walk.h.item.status not in wi.TERMINAL
