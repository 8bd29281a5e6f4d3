"""The scripted Coordinator decides from the snapshot in its request, like a model."""

from __future__ import annotations

from typing import Any

from workcenter.adapters.providers.scripted_coordinator import PLAN, decide, read
from workcenter.coordinating import PreparedRequest
from workcenter.domain.coordinator_request import (
    CORRECTION_HEADING,
    PROMPT_HEADING,
    SNAPSHOT_HEADING,
)


def snapshot(*actions: dict[str, Any], target: str | None = "response") -> dict[str, Any]:
    return {
        "workItem": {
            "deliveryTarget": target,
            "acceptanceCriteria": [{"criterion": "c", "status": "unmet", "evidenceRunIds": []}],
        },
        "goalProgress": {"delivery": {"status": "unmet", "evidenceRunIds": []}},
        "actions": list(actions),
    }


def action(status: str, type: str = "test", **result: Any) -> dict[str, Any]:
    return {"id": f"{type}-id", "type": type, "status": status, "result": result or None}


def kind(decision: dict[str, Any]) -> str:
    return str(decision["decision"]["kind"])


def test_the_request_is_read_back_into_snapshot_and_user_text() -> None:
    content = (
        f'{SNAPSHOT_HEADING}\n{{"actions":[]}}\n\n{PROMPT_HEADING}\nline one\n\nline two'
        f"\n\n{CORRECTION_HEADING}\nfix it"
    )
    request = PreparedRequest("t", 2, ({"role": "user", "content": content},), {})
    assert read(request) == ({"actions": []}, "line one\n\nline two")
    trigger = f'{SNAPSHOT_HEADING}\n{{}}\n\n{PROMPT_HEADING}\n{{"kind":"x","source_key":"k"}}'
    assert read(PreparedRequest("t", 1, ({"role": "user", "content": trigger},), {}))[1] is None


def test_each_rule_of_the_script() -> None:
    planned = decide(snapshot(), None)
    assert kind(planned) == "create_actions" and len(planned["decision"]["actions"]) == len(PLAN)
    assert kind(decide(snapshot(target=None), None)) == "request_human"
    asked = decide(snapshot(action("waiting", waitingReason="Which one?")), None)
    assert (kind(asked), asked["decision"]["question"]) == ("request_human", "Which one?")
    guided = decide(snapshot(action("waiting")), "The second")
    assert guided["decision"]["guidance"] == [{"actionId": "test-id", "instruction": "The second"}]
    assert kind(decide(snapshot(action("failed", error="boom")), None)) == "request_human"
    assert kind(decide(snapshot(action("ready")), "How is it going?")) == "answer"
    rest = decide(snapshot(action("completed", type="diagnose")), None)
    assert [a["type"] for a in rest["decision"]["actions"]] == ["implement", "test"]
