"""The scripted Coordinator on any item, not only the demo's: its playbook serves the
item's own criteria, it asks for what it cannot know (criteria, a delivery target), and
a second attempt asks the human instead of repeating a refused reply (ADR-0039)."""

from __future__ import annotations

from pathlib import Path

from conftest import FakeClock, create_dynamic
from domain_states import WORKER
from test_demo_coordinator import Walk

from workcenter.adapters.providers import scripted_coordinator as scripted
from workcenter.application import WorkCenter
from workcenter.domain import runs
from workcenter.domain.coordinator_request import (
    CORRECTION_HEADING,
    PROMPT_HEADING,
    SNAPSHOT_HEADING,
)

CRITERIA = ("Tests pass", "Docs updated")


def checks(*statuses: str) -> list[dict[str, str]]:
    return [
        {"criterion": c, "status": s, "evidence": f"{s} per the log"}
        for c, s in zip(CRITERIA, statuses, strict=True)
    ]


def completed(*statuses: str) -> dict[str, object]:
    return {
        "outcome": "completed",
        "summary": "Done.",
        "evidence": ["pytest: 12 passed"],
        "acceptanceChecks": checks(*statuses),
    }


def test_the_request_is_read_back_into_snapshot_prompt_and_correction() -> None:
    snapshot = '{"workItem": {}, "goalProgress": {}}'
    content = (
        f"{SNAPSHOT_HEADING}\n{snapshot}\n\n{PROMPT_HEADING}\nline one\n\nline two"
        f"\n\n{CORRECTION_HEADING}\nfix it"
    )
    turn = scripted.read_request([{"role": "user", "content": content}])
    assert (turn.prompt, turn.correction, turn.automatic) == (
        "line one\n\nline two",
        "fix it",
        False,
    )
    wake = f'{SNAPSHOT_HEADING}\n{snapshot}\n\n{PROMPT_HEADING}\n{{"kind":"action_settled"}}'
    turn = scripted.read_request([{"role": "user", "content": wake}])
    assert turn.automatic and turn.correction is None


def test_the_playbook_serves_the_items_own_criteria_one_stage_at_a_time() -> None:
    walk = Walk(criteria=CRITERIA)
    first = walk.wake("work_item_started", contract_revision=1)
    (diagnose,) = first["actions"]
    assert diagnose["type"] == "diagnose" and diagnose["goalRefs"]["criteria"] == list(CRITERIA)

    walk.run(completed("passed", "deferred"))
    (implement,) = walk.wake("action_settled")["actions"]
    assert implement["type"] == "implement"
    assert implement["goalRefs"]["criteria"] == [CRITERIA[1]], "only what is still unproven"

    walk.run(completed("passed", "passed"))
    done = walk.wake("action_settled")
    assert done["kind"] == "complete", "every criterion proven: no verification needed"
    assert [r["criterion"] for r in done["completion"]["acceptanceResults"]] == list(CRITERIA)
    assert walk.h.item.status == "done"


def test_an_item_without_criteria_is_asked_for_them() -> None:
    walk = Walk(criteria=())
    asked = walk.wake("work_item_started", contract_revision=1)
    assert (asked["kind"], asked["question"]) == ("request_human", scripted.CRITERIA_QUESTION)
    assert not walk.h.actions


def test_a_stage_that_changes_files_waits_for_a_delivery_target_the_user_names() -> None:
    walk = Walk(criteria=CRITERIA, delivery_target=None)
    (diagnose,) = walk.wake("work_item_started", contract_revision=1)["actions"]
    assert diagnose["workspaceMode"] == "read", "reading needs no target"
    walk.run(completed("passed", "deferred"))
    asked = walk.wake("action_settled")
    assert (asked["kind"], asked["question"]) == ("request_human", scripted.DELIVERY_QUESTION)

    unclear = walk.say("somewhere safe")
    assert unclear["question"] == scripted.DELIVERY_QUESTION and unclear["contractPatch"] is None
    assert walk.h.item.delivery_target is None

    named = walk.say("Workspace_files.")
    assert named["kind"] == "request_human" and "implement" in named["question"]
    assert walk.h.item.delivery_target == "workspace_files"
    planned = walk.say("Yes")
    assert [a["type"] for a in planned["actions"]] == ["implement"]


def test_criteria_proven_without_a_delivery_target_asks_in_words() -> None:
    # It read "yet the delivery (None) is not": the missing target as Python wrote it.
    walk = Walk(criteria=CRITERIA, delivery_target=None)
    walk.wake("work_item_started", contract_revision=1)
    walk.run(completed("passed", "passed"))
    asked = walk.wake("action_settled")
    assert asked["kind"] == "request_human"
    assert asked["question"] == (
        "Every criterion shown is proven, yet the delivery (no target named) is not. "
        "How should I go on?"
    )


def test_a_refused_first_reply_makes_the_second_attempt_ask_the_human(
    db_path: Path, clock: FakeClock
) -> None:
    with WorkCenter.open(db_path, clock=clock) as wc:
        item = create_dynamic(wc)
        provider = scripted.scripted_coordinator().then("not JSON at all")
        (step,) = wc.coordinate_once(provider)
        assert (step.status, step.attempts) == ("decided", 2)
        conversation = wc.conversation(item.id)
        assert conversation is not None
        attempts = conversation.attempts(step.turn_id)  # type: ignore[arg-type]
        assert [a.status for a in attempts] == ["rejected", "responded"]
        reply = conversation.messages[-1]
        assert reply.decision is not None and reply.decision.kind == "request_human"
        assert "My previous reply was refused" in (reply.decision.question or "")
        assert wc.work_item(item.id).status == "waiting" and not wc.work_item(item.id).plan


def test_on_a_linear_item_it_answers_since_that_is_all_it_may_do(wc: WorkCenter) -> None:
    from conftest import create_linear

    item = create_linear(wc)
    wc.post_user_message(item.id, "What is the plan?")
    [step] = wc.coordinate_once(scripted.scripted_coordinator())
    assert step.status == "decided", step.error
    state = wc.conversation(item.id)
    assert state is not None
    reply = state.messages[-1]
    assert reply.decision is not None and reply.decision.kind == "answer"
    assert wc.ledger(item.id).coordinator_failures == 0


def test_an_action_whose_runs_ended_without_a_report_goes_to_the_human_with_why() -> None:
    """Its Runs interrupted (the executor raised) until no attempt was left, the Action
    failed with no report. The Coordinator said "no error reported" and guided it, which
    stopped the item at its next claim; it now names the Run's end reason and, with no
    attempt left, asks the human (found by acceptance testing)."""
    walk = Walk(criteria=CRITERIA)
    assert walk.wake("work_item_started", contract_revision=1)["kind"] == "create_actions"
    h = walk.h
    while (action := walk.only("ready", "failed")[0]).status == "ready":
        ref = h.claim(action.id)
        h.take(
            runs.interrupt(
                h.item,
                h.actions[action.id],
                ref,
                reason="executor raised RuntimeError: boom",
                at=h.tick(),
                by=WORKER,
            )
        )
    asked = walk.wake("action_settled")
    assert asked["kind"] == "request_human"
    assert "executor raised RuntimeError: boom" in asked["question"]
    assert "no attempt left" in asked["question"]
