"""The Coordinator end to end: the domain's decision rules and the scripted provider
driven by the turn machinery through a WorkItem's life (issue 9, "what it must show")."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import pytest
from conftest import CRITERIA, claim, completion, create_dynamic, report
from domain_states import brief, decision
from pydantic import BaseModel

from workcenter.adapters import presenters
from workcenter.adapters.providers.scripted import Reply, ScriptedProvider, transient
from workcenter.application import WorkCenter
from workcenter.domain import conversation as conv
from workcenter.domain.coordinator_request import CORRECTION_HEADING
from workcenter.service_layer.ports import ProviderTurnReply


def say(kind: str, **fields: Any) -> str:
    return json.dumps(decision(kind, **fields))


def last_reply(wc: WorkCenter, item_id: Any) -> conv.Message:
    state = wc.conversation(item_id)
    assert state is not None
    return [m for m in state.messages if m.role == "assistant"][-1]


def test_plan_run_and_complete_through_the_coordinator(wc: WorkCenter) -> None:
    item = create_dynamic(wc)
    provider = ScriptedProvider([say("create_actions", actions=[brief()])])
    [planned] = wc.coordinate_once(provider)
    assert planned.status == "decided"
    action_id = wc.work_item(item.id).plan[0].action_id
    assert last_reply(wc, item.id).decision is not None
    assert last_reply(wc, item.id).decision.affected_action_ids == (action_id,)  # type: ignore[union-attr]
    running = claim(wc)
    finished = wc.finish_run(running, report())
    provider.then(say("complete", completion=completion(finished.result_run_id)))
    [done] = wc.coordinate_once(provider)  # woken by the settled Run
    assert done.status == "decided", done.error
    assert wc.work_item(item.id).status == "done"
    reservations = wc.ledger(item.id).reservations.values()
    assert [r.kind for r in reservations] == ["coordinator", "coordinator"]


def test_complete_with_an_unmet_criterion_is_refused_and_counted(wc: WorkCenter) -> None:
    item = create_dynamic(wc)
    provider = ScriptedProvider([say("create_actions", actions=[brief()])])
    wc.coordinate_once(provider)
    running = claim(wc)
    half = report(
        acceptanceChecks=[
            {"criterion": CRITERIA[0], "status": "passed", "evidence": "ok"},
            {"criterion": CRITERIA[1], "status": "failed", "evidence": "not yet"},
        ]
    )
    finished = wc.finish_run(running, half)
    provider.then(say("complete", completion=completion(finished.result_run_id)))
    [result] = wc.coordinate_once(provider)
    assert result.status == "failed"
    assert wc.work_item(item.id).status != "done"
    assert last_reply(wc, item.id).status == "failed"
    assert wc.ledger(item.id).coordinator_failures == 1


def test_an_automatic_turn_that_patches_the_contract_changes_nothing(wc: WorkCenter) -> None:
    item = create_dynamic(wc)
    patched = say("create_actions", actions=[brief()], contractPatch={"goal": "Something else"})
    provider = ScriptedProvider([patched, patched])
    [result] = wc.coordinate_once(provider)
    assert result.status == "failed" and result.attempts == 2
    after = wc.work_item(item.id)
    assert (after.goal, after.contract_revision, after.plan) == (item.goal, 1, ())
    assert last_reply(wc, item.id).error == conv.INVALID_TWICE
    assert len(provider.requests) == 2
    assert CORRECTION_HEADING not in provider.requests[0].messages[-1]["content"]
    assert CORRECTION_HEADING in provider.requests[1].messages[-1]["content"]


def test_a_user_turn_may_refine_the_contract(wc: WorkCenter) -> None:
    item = create_dynamic(wc)
    wc.post_user_message(item.id, "The goal is now to ship the docs")
    provider = ScriptedProvider(
        [
            say(
                "request_human",
                question="Which docs?",
                contractPatch={"goal": "Ship the docs"},
            )
        ]
    )
    results = wc.coordinate_once(provider)
    assert [r.status for r in results] == ["decided"]
    after = wc.work_item(item.id)
    assert (after.goal, after.contract_revision, after.status) == ("Ship the docs", 2, "waiting")
    refined = next(e for e in wc.history(item.id) if type(e).__name__ == "ContractRefined")
    assert refined.actor.kind == "coordinator"
    assert refined.actor.caused_by is not None and refined.actor.caused_by.kind == "user"


def test_rate_limits_are_retried_and_charged_then_the_turn_fails_transiently(
    wc: WorkCenter,
) -> None:
    item = create_dynamic(wc)
    provider = ScriptedProvider([transient(attempts=3)])
    [result] = wc.coordinate_once(provider)
    assert result.status == "failed"
    reservations = list(wc.ledger(item.id).reservations.values())
    assert len(reservations) == 3 and all(r.status == "unknown" for r in reservations)
    state = wc.conversation(item.id)
    assert state is not None
    assert [e.status for e in state.entries] == ["pending"]  # retried after the backoff


class SdkUsage(BaseModel):
    """A provider SDK's usage object (the OpenAI client's ``CompletionUsage``)."""

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


@pytest.mark.parametrize(
    "usage",
    [
        SdkUsage(prompt_tokens=90_000, completion_tokens=10_000, total_tokens=100_000),
        MappingProxyType({"input_tokens": 90_000, "output_tokens": 10_000}),
    ],
    ids=["sdk-object", "mapping"],
)
def test_usage_as_an_sdk_object_or_any_mapping_is_charged(wc: WorkCenter, usage: object) -> None:
    """ADR-0136: only a dict was read; an SDK's usage object was dropped and the request
    charged at its estimate, 17,205 tokens for 100,000 spent (found by acceptance
    testing). A Run's metered provider read both already."""
    item = create_dynamic(wc)

    @dataclass
    class SdkReply:
        text: str
        usage: object

    class SdkProvider:
        """A provider that hands the SDK's reply over as it came."""

        def answer(self, request: Any, before_request: Callable[[], None]) -> SdkReply:
            before_request()
            return SdkReply(say("create_actions", actions=[brief()]), usage)

    [result] = wc.coordinate_once(SdkProvider())
    assert result.status == "decided"
    [reservation] = wc.ledger(item.id).reservations.values()
    assert (reservation.status, reservation.charged_tokens) == ("reported", 100_000)


def test_usage_reported_by_the_provider_settles_the_request(wc: WorkCenter) -> None:
    item = create_dynamic(wc)
    usage = {"input_tokens": 1200, "output_tokens": 80}
    reply = Reply(say("create_actions", actions=[brief()]), usage=usage)
    wc.coordinate_once(ScriptedProvider([reply]))
    [reservation] = wc.ledger(item.id).reservations.values()
    assert (reservation.status, reservation.charged_tokens) == ("reported", 1280)


def test_a_coordinator_request_being_sent_is_in_flight_not_unknown(wc: WorkCenter) -> None:
    """ADR-0136 (resource-ledger.md 2: a Coordinator request is in flight while its
    provider turn is dispatching): every read said such a request was unknown, so an
    alert on unknown requests fired on every turn (found by acceptance testing). Once
    the turn is answered the request is reported; were it lost, it would be unknown."""
    item = create_dynamic(wc)
    seen: list[tuple[int, int]] = []

    def usage_counts() -> list[tuple[int, int]]:
        detail = wc.detail(item.id)["executionControl"]["usage"]
        read = wc.web_reads.budget(item.id)["executionControl"]["usage"]
        shown = presenters.budget_json(wc, item.id)["usage"]
        return [
            (detail["inFlightRequests"], detail["unknownRequests"]),
            (read["inFlightRequests"], read["unknownRequests"]),
            (shown["in_flight_requests"], shown["unknown_requests"]),
        ]

    class Watching:
        """Answers once it has looked at every read while its request is out."""

        def answer(self, request: Any, before_request: Callable[[], None]) -> ProviderTurnReply:
            before_request()
            seen.extend(usage_counts())
            return ProviderTurnReply(say("create_actions", actions=[brief()]), {"input_tokens": 9})

    [result] = wc.coordinate_once(Watching())
    assert result.status == "decided"
    assert seen == [(1, 0)] * 3
    assert usage_counts() == [(0, 0)] * 3
