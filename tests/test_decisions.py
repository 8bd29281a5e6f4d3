"""Coordinator decisions in the pure domain (coordinator.md 4, 9.1-9.4): parsing, the
rules checked at parse and at apply, every kind's effects, authority, and the fence.

A rule broken at parse is ``DecisionInvalid`` (a corrective retry); at apply it is
``DecisionRefused`` (the turn fails). Either way the decision yields no events:
``rejected`` checks the history is exactly as it was.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any
from uuid import uuid4

import pytest
from domain_states import CRITERIA, TURN, History, brief, decision, passing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workcenter.domain import action as act
from workcenter.domain import decisions, lifecycle
from workcenter.domain import resource_ledger as rl
from workcenter.domain import work_item as wi
from workcenter.domain.decisions import AUTOMATIC_TURN, USER_TURN, TurnAuthority
from workcenter.domain.errors import DecisionInvalid, DecisionRefused, InvalidInput


@contextmanager
def rejected(h: History, error: type[Exception], match: str | None = None) -> Iterator[None]:
    before = h.snapshot()
    with pytest.raises(error, match=match) as info:
        yield
    assert type(info.value) is error
    assert h.snapshot() == before, "a rejected decision changed the history"
    if isinstance(info.value, DecisionInvalid):
        assert 0 < len(info.value.correction) <= 2_000


def proven(h: History, **report: Any) -> tuple[act.ActionState, Any]:
    """One read Action whose completed Run proves every criterion and the response."""
    (action,) = h.plan(brief())
    return action, h.finish(action.id, passing(**report))


def completion(run_id: Any, criteria: tuple[str, ...] = CRITERIA) -> dict[str, Any]:
    return {
        "summary": "All criteria are met",
        "acceptanceResults": [
            {"criterion": c, "status": "passed", "evidenceRunIds": [str(run_id)]} for c in criteria
        ],
        "evidenceRunIds": [str(run_id)],
        "residualRisks": None,
    }


# --- parsing: where the JSON is (4.1) ----------------------------------------------------


def test_the_whole_text_is_the_reply() -> None:
    h = History()
    reply = h.parse(decision("answer", reply="Hello"))
    assert (reply.reply, reply.decision.kind) == ("Hello", "answer")


def test_the_first_fenced_json_block_is_the_reply() -> None:
    h = History()
    text = (
        "Here is my decision:\n```json\n"
        + json.dumps(decision("answer", reply="fenced"))
        + "\n```\nand a second one:\n```json\n{}\n```"
    )
    assert h.parse(text).reply == "fenced"


def test_first_brace_to_last_brace_is_the_last_resort() -> None:
    h = History()
    text = "Sure! " + json.dumps(decision("answer", reply="braced")) + " Hope that helps."
    assert h.parse(text).reply == "braced"


@pytest.mark.parametrize("text", ["", "no json here", "[1, 2]", '"a string"', "{not json}"])
def test_a_reply_without_a_json_object_is_invalid(text: str) -> None:
    h = History()
    with rejected(h, DecisionInvalid, "no JSON object"):
        h.parse(text)


@pytest.mark.parametrize(
    ("raw", "match"),
    [
        ({"decision": {"kind": "answer", "reason": "r"}}, "reply"),
        ({"reply": "  ", "decision": {"kind": "answer", "reason": "r"}}, "reply is required"),
        ({"reply": "r", "decision": {"kind": "answer", "reason": " "}}, "reason is required"),
        ({"reply": "r", "decision": {"kind": "answer"}}, "reason"),
        ({"reply": "r", "decision": {"kind": "replan", "reason": "r"}}, "kind"),
        ({"reply": "r", "decision": {"kind": "answer", "reason": "r", "x": 1}}, "x"),
    ],
)
def test_malformed_replies_are_invalid(raw: dict[str, Any], match: str) -> None:
    h = History()
    with rejected(h, DecisionInvalid, match):
        h.parse(raw)


def test_the_correction_is_bounded_and_says_what_was_wrong() -> None:
    h = History()
    with pytest.raises(DecisionInvalid) as info:
        h.parse(decision("request_human", question=" "))
    assert "request_human needs a question" in info.value.correction
    long = DecisionInvalid("x" * 5_000)
    assert len(long.correction) == 2_000
    assert isinstance(long, InvalidInput)


def test_texts_past_their_limits_are_truncated_not_refused() -> None:
    h = History()
    reply = h.parse({"reply": "r" * 9_000, "decision": {"kind": "answer", "reason": "w" * 3_000}})
    assert (len(reply.reply), len(reply.decision.reason)) == (8_000, 2_000)


# --- kinds and authority (1.2, 4.7) ---------------------------------------------------------


def test_an_automatic_turn_cannot_answer() -> None:
    h = History()
    with rejected(h, DecisionInvalid, "answer is not allowed in an automatic turn"):
        h.parse(decision("answer"), AUTOMATIC_TURN)


def test_a_turn_is_user_originated_or_automatic_not_both() -> None:
    with pytest.raises(ValueError, match="not both"):
        TurnAuthority(user_originated=True, automatic=True)


@pytest.mark.parametrize(
    "patch",
    [{"title": "New"}, {"title": None}, {"acceptanceCriteria": []}, {"deliveryTarget": None}],
)
@pytest.mark.parametrize("kind", ["create_actions", "request_human", "guide_actions"])
def test_an_automatic_turn_that_patches_the_contract_is_refused_at_parse(
    patch: dict[str, Any], kind: str
) -> None:
    h = History()
    fields: dict[str, Any] = {"contractPatch": patch, "actions": [brief()], "question": "q?"}
    with rejected(h, DecisionInvalid, "only a turn a user began may change the contract"):
        h.parse(decision(kind, **fields), AUTOMATIC_TURN)


def test_an_empty_or_null_patch_is_no_patch_in_an_automatic_turn() -> None:
    h = History()
    for patch in ({}, None):
        h.parse(decision("create_actions", contractPatch=patch, actions=[brief()]), AUTOMATIC_TURN)


def test_a_forged_authority_is_refused_at_apply_and_changes_nothing() -> None:
    h = History()
    reply = h.parse(
        decision("create_actions", contractPatch={"goal": "Another goal"}, actions=[brief()])
    )
    with rejected(h, DecisionRefused, "only a turn a user began"):
        h.apply(reply, AUTOMATIC_TURN)
    assert (h.item.goal, h.item.contract_revision) == ("Ship the feature", 1)


@pytest.mark.parametrize(
    ("patch", "match"),
    [
        ({"acceptanceCriteria": "one criterion"}, "must be a list"),
        ({"acceptanceCriteria": [1, 2]}, "must be a list"),
        ({"deliveryTarget": "email"}, "deliveryTarget must be one of"),
        ({"acceptanceCriteria": [f"c{i}" for i in range(201)]}, "at most 200"),
    ],
)
def test_patch_normalisation_errors_are_invalid(patch: dict[str, Any], match: str) -> None:
    h = History()
    with rejected(h, DecisionInvalid, match):
        h.parse(decision("request_human", question="Which?", contractPatch=patch))


@pytest.mark.parametrize("kind", ["answer", "guide_actions", "complete"])
def test_a_patch_on_a_kind_that_cannot_carry_one_is_dropped_at_parse(kind: str) -> None:
    h = History()
    (action,) = h.plan(brief())
    fields: dict[str, Any] = {
        "contractPatch": {"goal": "Another goal"},
        "guidance": [{"actionId": str(action.id), "instruction": "Look at parser.py"}],
    }
    assert h.parse(decision(kind, **fields)).decision.contract_patch is None


def test_a_patch_on_a_kind_that_cannot_carry_one_is_refused_at_apply() -> None:
    h = History()
    forged = decisions.CoordinatorReply.model_validate(
        decision("answer", contractPatch={"goal": "Another goal"})
    )
    with rejected(h, DecisionRefused, "answer cannot carry a contract patch"):
        h.apply(forged)


def test_the_delivery_target_outside_request_human_is_refused_at_apply() -> None:
    h = History(delivery_target=None)
    reply = h.parse(
        decision("create_actions", contractPatch={"deliveryTarget": "response"}, actions=[brief()])
    )
    with rejected(h, DecisionRefused, "only request_human may set the delivery target"):
        h.apply(reply)
    assert h.item.delivery_target is None


# --- answer (4.2) -----------------------------------------------------------------------


def test_answer_changes_nothing_but_the_conversation() -> None:
    h = History()
    (action,) = h.plan(brief())
    unit = h.apply(h.parse(decision("answer", reply="It is on its way")))
    assert unit.events == [] and unit.item == h.item
    assert (h.item.status, h.item.current_action_id) == ("ready", action.id)


# --- create_actions (4.3, 9.2) --------------------------------------------------------------


def test_create_actions_adds_ready_actions_and_the_first_created_is_current() -> None:
    h = History()
    (old,) = h.plan(brief(objective="Old work"))
    unit = h.decide(
        decision(
            "create_actions",
            actions=[brief(objective="First"), brief(type="Write Docs!", objective="Second")],
        ),
        AUTOMATIC_TURN,
    )
    new = [a for a in h.actions.values() if a.id != old.id]
    assert [(a.type, a.status, a.contract_revision) for a in new] == [
        ("research", "ready", 1),
        ("write_docs", "ready", 1),
    ]
    first = min(new, key=lambda a: a.sequence)
    assert (h.item.status, h.item.current_action_id) == ("ready", first.id)
    assert unit.events and all(e.actor == TURN for e in unit.events)


def test_create_actions_closes_then_supersedes_in_the_same_decision() -> None:
    h = History()
    waiting, ready = h.plan(brief(objective="Ask"), brief(objective="Later"))
    h.finish(waiting.id, {"outcome": "waiting", "waitingReason": "Which DB?"})
    h.decide(
        decision(
            "create_actions",
            closeActions=[{"actionId": str(waiting.id), "reason": "Answered elsewhere"}],
            supersedeActionIds=[str(ready.id), str(ready.id)],
            actions=[brief(objective="Next")],
        )
    )
    assert h.actions[waiting.id].status == "closed"
    assert h.actions[waiting.id].close_reason == "Answered elsewhere"
    assert h.actions[ready.id].status == "superseded"


@pytest.mark.parametrize("count", [0, 9])
def test_create_actions_takes_one_to_eight(count: int) -> None:
    h = History()
    specs = [brief(objective=f"o{i}") for i in range(count)]
    with rejected(h, DecisionInvalid, "plan 1 to 8"):
        h.parse(decision("create_actions", actions=specs))


def test_create_actions_holds_at_most_64_per_item_history_included() -> None:
    h = History()
    created: list[act.ActionState] = []
    for batch, size in enumerate([8] * 7 + [7]):
        specs = [brief(objective=f"o{batch}-{i}") for i in range(size)]
        created = h.plan(*specs, supersede_action_ids=[a.id for a in created])
    assert len(h.item.plan) == 64 - 1
    h.parse(decision("create_actions", actions=[brief(objective="the 64th")]))
    with rejected(h, DecisionInvalid, "at most 64"):
        h.parse(decision("create_actions", actions=[brief(objective="a"), brief(objective="b")]))


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        (brief(type="Triage"), "never create triage"),
        (brief(objective="  "), "objective is required"),
        ({"type": "x", "objective": "o", "approach": "a"}, "expectedOutcome"),
        (brief(dependsOnActionIds=[]), "no dependencies"),
        (brief(dependsOnStageIds=["s"]), "no dependencies"),
        (brief(candidateVpIds=["vp"]), "candidateVpIds"),
    ],
)
def test_malformed_briefs_are_invalid(spec: dict[str, Any], match: str) -> None:
    h = History()
    with rejected(h, DecisionInvalid, match):
        h.parse(decision("create_actions", actions=[spec]))


def test_briefs_are_clamped_as_the_spec_says() -> None:
    h = History()
    specs = [
        brief(objective="a", maxAttempts=None, workspaceMode="scratch"),
        brief(objective="b", maxAttempts="three"),
        brief(objective="c", maxAttempts=9),
        brief(objective="d", maxAttempts=0),
        brief(objective="e" * 3_000),
    ]
    parsed = h.parse(decision("create_actions", actions=specs)).decision.actions
    assert parsed is not None
    assert [b.max_attempts for b in parsed] == [2, 2, 5, 1, 2]
    assert parsed[0].workspace_mode == "shared"
    assert len(parsed[4].objective) == 2_000


@pytest.mark.parametrize("mode", [None, "shared", "isolated-write"])
def test_the_delivery_gate_allows_only_read_actions_without_a_target(mode: str | None) -> None:
    h = History(delivery_target=None)
    spec = {k: v for k, v in brief().items() if k != "workspaceMode"}
    if mode is not None:
        spec["workspaceMode"] = mode
    with rejected(h, DecisionInvalid, "delivery target is unconfirmed"):
        h.parse(decision("create_actions", actions=[spec]))
    h.decide(decision("create_actions", actions=[brief(workspaceMode="read")]))


def test_the_goal_gate_refuses_planning_once_the_goal_is_met() -> None:
    h = History()
    proven(h)
    with rejected(h, DecisionInvalid, "goal is already met"):
        h.parse(decision("create_actions", actions=[brief(objective="More")]))


def test_goal_refs_must_each_be_valid_and_name_something() -> None:
    h = History()
    (done,) = h.plan(brief(objective="Tests"))
    h.finish(
        done.id,
        passing(
            acceptanceChecks=[
                {"criterion": CRITERIA[0], "status": "passed", "evidence": "ok"},
                {"criterion": CRITERIA[1], "status": "deferred", "evidence": "later"},
            ]
        ),
    )
    cases = [
        ({}, "goalRefs must name"),
        ({"criteria": [], "blockerActionIds": [], "delivery": False}, "goalRefs must name"),
        ({"criteria": [CRITERIA[0]]}, "not unmet"),
        ({"criteria": [CRITERIA[1], "Made up"]}, "not unmet"),
        ({"blockerActionIds": [str(done.id)]}, "not a current blocker"),
        ({"criteria": ["x" * 1_001]}, "goalRefs"),
    ]
    for refs, match in cases:
        with rejected(h, DecisionInvalid, match):
            h.parse(decision("create_actions", actions=[brief(objective="x", goalRefs=refs)]))
    h.parse(
        decision(
            "create_actions", actions=[brief(objective="x", goalRefs={"criteria": [CRITERIA[1]]})]
        )
    )


def test_repeating_finished_or_standing_work_needs_goal_refs_and_a_rationale() -> None:
    h = History()
    (done,) = h.plan(brief())
    h.finish(
        done.id,
        passing(
            acceptanceChecks=[
                {"criterion": c, "status": "deferred", "evidence": "later"} for c in CRITERIA
            ]
        ),
    )
    assert h.actions[done.id].status == "completed"
    refs = {"criteria": [CRITERIA[0]]}
    long_enough = "Long enough to count as a reason"
    for spec in (
        brief(),
        brief(goalRefs=refs),
        brief(goalRefs=refs, rationale="too short"),
        brief(rationale=long_enough),  # a rationale without goalRefs is not enough
    ):
        with rejected(h, DecisionInvalid, "repeating the research Action"):
            h.parse(decision("create_actions", actions=[spec]))
    h.decide(
        decision(
            "create_actions",
            actions=[brief(goalRefs=refs | {"rationale": "The first run missed the parser"})],
        )
    )
    repeat = max(h.actions.values(), key=lambda a: a.sequence)
    assert repeat.brief.rationale == "The first run missed the parser"


def test_a_repeat_within_the_batch_needs_a_rationale_too() -> None:
    h = History()
    with rejected(h, DecisionInvalid, "repeating the research Action"):
        h.parse(decision("create_actions", actions=[brief(), brief()]))


def test_repeating_a_closed_action_is_no_repeat() -> None:
    h = History()
    (failed,) = h.plan(brief())
    h.finish(failed.id, {"outcome": "failed", "error": "crashed"})
    h.decide(
        decision(
            "create_actions",
            closeActions=[{"actionId": str(failed.id), "reason": "Dead end"}],
            actions=[brief(objective="Other")],
        )
    )
    h.parse(decision("create_actions", actions=[brief()]))


def test_close_and_supersede_targets_are_checked_at_parse() -> None:
    h = History()
    (ready,) = h.plan(brief())
    cases = [
        ({"closeActions": [{"actionId": str(ready.id), "reason": "x"}]}, "not waiting or failed"),
        (
            {"supersedeActionIds": [str(uuid4())]},
            "supersedeActionIds must name Actions of this WorkItem",
        ),
        (
            {
                "closeActions": [
                    {"actionId": str(ready.id), "reason": "x"},
                    {"actionId": str(ready.id), "reason": "y"},
                ]
            },
            "names an Action twice",
        ),
    ]
    for fields, match in cases:
        with rejected(h, DecisionInvalid, match):
            h.parse(decision("create_actions", actions=[brief(objective="o")], **fields))


def test_create_actions_is_refused_at_apply_while_a_run_is_active() -> None:
    h = History()
    (action,) = h.plan(brief())
    h.claim(action.id)
    reply = h.parse(decision("create_actions", actions=[brief(objective="More")]))
    with rejected(h, DecisionRefused, "while a Run is active"):
        h.apply(reply)


def test_goal_refs_are_checked_again_against_progress_now() -> None:
    h = History()
    (action,) = h.plan(brief(objective="Prove"))
    refs = {"criteria": [CRITERIA[0]]}
    reply = h.parse(decision("create_actions", actions=[brief(objective="x", goalRefs=refs)]))
    h.finish(
        action.id,
        passing(
            acceptanceChecks=[
                {"criterion": CRITERIA[0], "status": "passed", "evidence": "ok"},
                {"criterion": CRITERIA[1], "status": "deferred", "evidence": "later"},
            ]
        ),
    )
    with rejected(h, DecisionRefused, "not unmet"):
        h.apply(reply)


def test_a_contract_change_supersedes_open_work_and_binds_new_actions() -> None:
    h = History()
    ready, waiting = h.plan(brief(objective="a"), brief(objective="b"))
    h.finish(waiting.id, {"outcome": "waiting", "waitingReason": "?"})
    h.decide(
        decision(
            "create_actions",
            contractPatch={
                "title": "  ",
                "goal": "  A sharper goal ",
                "acceptanceCriteria": [" Tests pass ", "", "Benchmarks hold"],
            },
            # Ignored: the refinement supersedes every open Action first.
            closeActions=[{"actionId": str(waiting.id), "reason": "moot"}],
            actions=[brief(objective="Fresh start")],
        )
    )
    assert (h.item.title, h.item.goal) == ("Dynamic item", "A sharper goal")
    assert h.item.acceptance_criteria == ("Tests pass", "Benchmarks hold")
    assert h.item.contract_revision == 2
    assert {h.actions[ready.id].status, h.actions[waiting.id].status} == {"superseded"}
    new = max(h.actions.values(), key=lambda a: a.sequence)
    assert (new.status, new.contract_revision, h.item.current_action_id) == ("ready", 2, new.id)


def test_a_patch_that_changes_nothing_has_no_effect() -> None:
    h = History()
    (ready,) = h.plan(brief(objective="a"))
    h.decide(
        decision(
            "create_actions",
            contractPatch={"goal": "Ship the feature", "acceptanceCriteria": list(CRITERIA)},
            actions=[brief(objective="b")],
        )
    )
    assert h.item.contract_revision == 1 and h.actions[ready.id].status == "ready"


# --- guide_actions (4.4) ------------------------------------------------------------------


def test_guide_actions_starts_a_new_generation_with_the_guidance() -> None:
    h = History()
    ready, failed = h.plan(brief(objective="a"), brief(objective="b"))
    h.finish(failed.id, {"outcome": "failed", "error": "boom"})
    h.decide(
        decision(
            "guide_actions",
            guidance=[
                {"actionId": str(ready.id), "instruction": "Start from parser.py"},
                {"actionId": str(failed.id), "instruction": "  Retry with a smaller input "},
            ],
        ),
        AUTOMATIC_TURN,
    )
    for action_id, text in (
        (ready.id, "Start from parser.py"),
        (failed.id, "Retry with a smaller input"),
    ):
        after = h.actions[action_id]
        assert (after.status, after.generation, after.attempt, after.result_run_id) == (
            "ready",
            2,
            0,
            None,
        )
        assert after.context[-1] == act.ContextEntry(kind="guidance", text=text)
    assert h.item.status == "ready"


@pytest.mark.parametrize(
    ("entries", "match"),
    [
        ([], "1 to 8"),
        ([{"actionId": str(uuid4()), "instruction": f"i{i}"} for i in range(9)], "1 to 8"),
        ([{"actionId": str(uuid4()), "instruction": "x"}], "cannot be guided"),
    ],
)
def test_guidance_entries_are_checked_at_parse(entries: list[Any], match: str) -> None:
    h = History()
    with rejected(h, DecisionInvalid, match):
        h.parse(decision("guide_actions", guidance=entries))


def test_guidance_targets_must_be_unique_unfinished_and_instructed() -> None:
    h = History()
    ready, done = h.plan(brief(objective="a"), brief(objective="b"))
    h.finish(done.id, passing())
    entry = {"actionId": str(ready.id), "instruction": "Go"}
    cases = [
        ([entry, entry], "names an Action twice"),
        ([{"actionId": str(done.id), "instruction": "Go"}], "completed; it cannot be guided"),
        ([{"actionId": str(ready.id), "instruction": "  "}], "needs an instruction"),
    ]
    for entries, match in cases:
        with rejected(h, DecisionInvalid, match):
            h.parse(decision("guide_actions", guidance=entries))


def test_a_running_target_passes_parse_and_one_miss_refuses_all_at_apply() -> None:
    h = History()
    ready, running = h.plan(brief(objective="a"), brief(objective="b"))
    h.claim(running.id)
    reply = h.parse(
        decision(
            "guide_actions",
            guidance=[
                {"actionId": str(ready.id), "instruction": "Go"},
                {"actionId": str(running.id), "instruction": "Stop"},
            ],
        )
    )
    with rejected(h, DecisionRefused, "running; it cannot be guided"):
        h.apply(reply)
    assert h.actions[ready.id].generation == 1


# --- request_human (4.5, 9.4) ---------------------------------------------------------------


def test_request_human_leaves_the_item_waiting_with_no_current_action() -> None:
    h = History()
    (action,) = h.plan(brief())
    h.decide(decision("request_human", question="Which database?"), AUTOMATIC_TURN)
    assert (h.item.status, h.item.current_action_id) == ("waiting", None)
    assert h.actions[action.id].status == "ready"


def test_request_human_needs_a_question() -> None:
    h = History()
    with rejected(h, DecisionInvalid, "needs a question"):
        h.parse(decision("request_human", question=None))
    forged = decisions.CoordinatorReply.model_validate(decision("request_human"))
    with rejected(h, DecisionRefused, "needs a question"):
        h.apply(forged)


def test_only_request_human_in_a_user_turn_sets_the_delivery_target() -> None:
    h = History(delivery_target=None)
    (action,) = h.plan(brief())
    patch = {"contractPatch": {"deliveryTarget": "pull_request"}}
    with rejected(h, DecisionInvalid, "only a turn a user began"):
        h.parse(decision("request_human", question="Shall I open a PR?", **patch), AUTOMATIC_TURN)
    h.decide(decision("request_human", question="Shall I open a PR?", **patch))
    assert (h.item.delivery_target, h.item.contract_revision) == ("pull_request", 2)
    assert h.actions[action.id].status == "superseded"
    assert (h.item.status, h.item.current_action_id) == ("waiting", None)
    h.decide(decision("request_human", question="Still a PR?", **patch))
    assert h.item.contract_revision == 2  # the same target again keeps the revision


def test_a_running_run_is_superseded_by_a_contract_change() -> None:
    h = History()
    (action,) = h.plan(brief())
    h.claim(action.id)
    epoch = h.actions[action.id].lease_epoch
    h.decide(
        decision("request_human", question="Merge?", contractPatch={"deliveryTarget": "merge"})
    )
    after = h.actions[action.id]
    assert (after.status, after.lease_epoch) == ("superseded", epoch + 1)
    assert after.runs[-1].status == "superseded"


# --- complete (4.6) ---------------------------------------------------------------------


def test_complete_finishes_the_item_with_its_final_result() -> None:
    h = History()
    _, run_id = proven(h)
    h.decide(decision("complete", completion=completion(run_id)), AUTOMATIC_TURN)
    assert h.item.status == "done"
    assert h.item.final_result is not None
    assert h.item.final_result.evidence_run_ids == (run_id,)
    assert h.item.final_result.responses[0].run_id == run_id


def test_complete_closes_first_then_checks_progress() -> None:
    h = History()
    waiting, proof = h.plan(brief(objective="Ask"), brief(objective="Prove"))
    h.finish(waiting.id, {"outcome": "waiting", "waitingReason": "?"})
    run_id = h.finish(proof.id, passing())
    h.decide(
        decision(
            "complete",
            closeActions=[{"actionId": str(waiting.id), "reason": "No longer needed"}],
            completion=completion(run_id),
        )
    )
    assert h.item.status == "done" and h.actions[waiting.id].status == "closed"


def test_complete_refuses_unfinished_actions_that_are_not_closed() -> None:
    h = History()
    waiting, proof = h.plan(brief(objective="Ask"), brief(objective="Prove"))
    h.finish(waiting.id, {"outcome": "waiting", "waitingReason": "?"})
    run_id = h.finish(proof.id, passing())
    reply = h.parse(decision("complete", completion=completion(run_id)))
    with rejected(h, DecisionRefused, "Unfinished Actions must be closed first"):
        h.apply(reply)


def test_complete_checks_only_its_closures_at_parse() -> None:
    h = History()
    (ready,) = h.plan(brief())
    with rejected(h, DecisionInvalid, "not waiting or failed"):
        h.parse(decision("complete", closeActions=[{"actionId": str(ready.id), "reason": "x"}]))
    reply = h.parse(decision("complete", completion=None))
    with rejected(h, DecisionRefused, "needs a completion"):
        h.apply(reply)


def test_complete_with_one_unmet_criterion_is_refused() -> None:
    h = History()
    (action,) = h.plan(brief())
    run_id = h.finish(
        action.id,
        passing(
            acceptanceChecks=[
                {"criterion": CRITERIA[0], "status": "passed", "evidence": "ok"},
                {"criterion": CRITERIA[1], "status": "deferred", "evidence": "later"},
            ]
        ),
    )
    reply = h.parse(decision("complete", completion=completion(run_id)))
    with rejected(h, DecisionRefused, "Criteria are not met"):
        h.apply(reply)
    assert h.item.status != "done"


def test_complete_with_a_contradicting_later_failed_run_is_refused() -> None:
    h = History()
    proof, check = h.plan(brief(objective="Prove"), brief(objective="Double check"))
    run_id = h.finish(proof.id, passing())
    h.finish(
        check.id,
        {
            "outcome": "failed",
            "error": "tests fail again",
            "acceptanceChecks": [
                {"criterion": CRITERIA[0], "status": "failed", "evidence": "3 failures"},
                {"criterion": CRITERIA[1], "status": "passed", "evidence": "ok"},
            ],
        },
    )
    reply = h.parse(
        decision(
            "complete",
            closeActions=[{"actionId": str(check.id), "reason": "Flaky"}],
            completion=completion(run_id),
        )
    )
    # Closing the failed Action does not erase its contradiction.
    with rejected(h, DecisionRefused, "Criteria are not met"):
        h.apply(reply)


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (lambda c: c | {"summary": " "}, "summary is required"),
        (lambda c: c | {"acceptanceResults": c["acceptanceResults"][::-1]}, "in order"),
        (lambda c: c | {"evidenceRunIds": []}, "evidenceRunIds must be non-empty"),
        (
            lambda c: (
                c
                | {"acceptanceResults": [r | {"status": "failed"} for r in c["acceptanceResults"]]}
            ),
            "must be passed",
        ),
    ],
)
def test_a_malformed_completion_is_refused_at_apply(change: Any, match: str) -> None:
    h = History()
    _, run_id = proven(h)
    reply = h.parse(decision("complete", completion=change(completion(run_id))))
    with rejected(h, DecisionRefused, match):
        h.apply(reply)


def test_residual_risks_are_deduplicated_and_cut_to_24() -> None:
    h = History()
    _, run_id = proven(h)
    risks = ["same", " same "] + [f"r{i}" for i in range(30)]
    h.decide(decision("complete", completion=completion(run_id) | {"residualRisks": risks}))
    assert h.item.final_result is not None
    assert h.item.final_result.residual_risks[:2] == ("same", "r0")
    assert len(h.item.final_result.residual_risks) == 24


# --- the item and its ledger at apply --------------------------------------------------------


def test_a_stopped_item_takes_no_decision() -> None:
    h = History()
    (action,) = h.plan(brief())
    reply = h.parse(decision("request_human", question="?"))
    stopped = h.ledger.model_copy(
        update={"stop_reason": rl.StopReason(code="work_item_tokens_exhausted", at=h.at)}
    )
    before = h.snapshot()
    with pytest.raises(DecisionRefused, match="stopped by its budget"):
        decisions.apply_decision(reply, USER_TURN, h.item, h.actions, stopped, at=h.tick(), by=TURN)
    assert h.snapshot() == before and action.id in h.actions


def test_a_draft_takes_only_an_answer() -> None:
    h = History()
    draft = h.item.model_copy(update={"status": "draft"})
    reply = h.parse(decision("request_human", question="Start?"))
    with pytest.raises(DecisionRefused, match="draft"):
        decisions.apply_decision(reply, USER_TURN, draft, {}, h.ledger, at=h.tick(), by=TURN)
    answer = h.parse(decision("answer"))
    assert (
        decisions.apply_decision(answer, USER_TURN, draft, {}, h.ledger, at=h.at, by=TURN).events
        == []
    )


def test_a_linear_item_takes_an_answer_only_and_a_finished_item_nothing() -> None:
    linear = History(mode="linear")
    assert decisions.offered_kinds(USER_TURN, linear.item) == ("answer",)
    assert decisions.offered_kinds(AUTOMATIC_TURN, linear.item) == ()
    assert linear.apply(linear.parse(decision("answer"))).events == []  # 4.2
    planned = decision("create_actions", actions=[brief()])
    with rejected(linear, DecisionInvalid, "takes no plans"):
        linear.parse(planned)
    with rejected(linear, DecisionRefused, "takes no plans"):
        linear.apply(decisions.CoordinatorReply.model_validate(planned))
    h = History()
    _, run_id = proven(h)
    h.decide(decision("complete", completion=completion(run_id)))
    with rejected(h, DecisionRefused, "WorkItem is done"):
        h.apply(decisions.CoordinatorReply.model_validate(decision("answer")))


# --- fences (5.3) ---------------------------------------------------------------------------


def test_conflicts_since_names_the_strict_conflict_class_only() -> None:
    h = History()
    version = h.item.version
    h.take(
        lifecycle.update_contract(
            h.item,
            h.actions,
            wi.Contract(
                title="Renamed",
                goal=h.item.goal,
                acceptance_criteria=h.item.acceptance_criteria,
                delivery_target=h.item.delivery_target,
            ),
            h.tick(),
            TURN,
        )
    )
    assert decisions.conflicts_since(h.item_events_after(version)) == []  # a title is benign
    (action,) = h.plan(brief())
    h.finish(action.id, {"outcome": "failed", "error": "boom"})
    names = decisions.conflicts_since(h.item_events_after(version))
    assert "ActionAdded" in names and "ActionStatusRecorded" in names
    assert "TitleChanged" not in names


def test_the_fingerprint_moves_with_claims_and_guidance_but_not_renewals() -> None:
    h = History()
    ready, other = h.plan(brief(objective="a"), brief(objective="b"))
    first = decisions.action_fingerprint(h.item, h.actions)
    reordered = dict(reversed(list(h.actions.items())))
    assert decisions.action_fingerprint(h.item, reordered) == first
    h.decide(decision("guide_actions", guidance=[{"actionId": str(ready.id), "instruction": "x"}]))
    guided = decisions.action_fingerprint(h.item, h.actions)
    assert guided != first
    ref = h.claim(other.id)
    claimed = decisions.action_fingerprint(h.item, h.actions)
    assert claimed != guided
    renewed = act.renew(h.actions[other.id], ref, lease=timedelta(seconds=60), at=h.tick(), by=TURN)
    h.actions[other.id] = act.fold(h.actions[other.id], renewed)  # type: ignore[assignment]
    assert decisions.action_fingerprint(h.item, h.actions) == claimed


# --- the reply schema -----------------------------------------------------------------------


def _objects(node: Any) -> Iterator[dict[str, Any]]:
    if isinstance(node, dict):
        if node.get("type") == "object":
            yield node
        for value in node.values():
            yield from _objects(value)
    elif isinstance(node, list):
        for value in node:
            yield from _objects(value)


def test_the_reply_schema_is_closed_camel_case_and_strict_compatible() -> None:
    schema = decisions.reply_schema()
    assert schema["type"] == "object" and set(schema["required"]) == {"reply", "decision"}
    objects = list(_objects(schema))
    assert len(objects) >= 8
    for node in objects:
        assert node["additionalProperties"] is False
        assert set(node["required"]) == set(node["properties"])
    text = json.dumps(schema)
    assert '"default"' not in text and '"maxLength"' not in text
    assert "title" in schema["$defs"]["ContractPatch"]["properties"]
    decision_props = schema["$defs"]["Decision"]["properties"]
    assert {"contractPatch", "closeActions", "supersedeActionIds", "workItemType"} <= set(
        decision_props
    )
    assert decision_props["kind"]["enum"] == list(
        ("answer", "create_actions", "guide_actions", "request_human", "complete")
    )
    schema["type"] = "changed"
    assert decisions.reply_schema()["type"] == "object"


def test_a_reply_with_every_key_null_as_a_strict_decoder_writes_it_parses() -> None:
    h = History()
    full = {
        "reply": "Planning",
        "decision": {
            "kind": "create_actions",
            "reason": "First step",
            "question": None,
            "workItemType": None,
            "contractPatch": None,
            "closeActions": None,
            "supersedeActionIds": None,
            "guidance": None,
            "completion": None,
            "actions": [brief() | {"maxAttempts": None, "goalRefs": None, "rationale": None}],
        },
    }
    h.decide(full, AUTOMATIC_TURN)
    assert len(h.item.plan) == 1


# --- robustness: only the typed errors leave parse and apply ---------------------------------

_json = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 70) | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)


@st.composite
def replies(draw: st.DrawFn, ids: list[str]) -> dict[str, Any]:
    an_id = st.sampled_from([*ids, str(uuid4())])
    plausible: dict[str, st.SearchStrategy[Any]] = {
        "question": st.none() | st.text(max_size=12),
        "workItemType": st.none() | st.text(max_size=12),
        "contractPatch": st.none()
        | st.fixed_dictionaries(
            {},
            optional={
                "title": st.none() | st.text(max_size=12),
                "goal": st.none() | st.text(max_size=12),
                "acceptanceCriteria": _json,
                "deliveryTarget": st.none() | st.sampled_from(["response", "merge", "email"]),
            },
        ),
        "closeActions": st.none()
        | st.lists(
            st.fixed_dictionaries({"actionId": an_id, "reason": st.text(max_size=8)}), max_size=3
        ),
        "supersedeActionIds": st.none() | st.lists(an_id, max_size=3),
        "guidance": st.none()
        | st.lists(
            st.fixed_dictionaries({"actionId": an_id, "instruction": st.text(max_size=8)}),
            max_size=3,
        ),
        "actions": st.none()
        | st.lists(
            st.builds(
                lambda mode, attempts, refs, objective: brief(
                    objective=objective, workspaceMode=mode, maxAttempts=attempts, goalRefs=refs
                ),
                st.none() | st.sampled_from(["read", "shared", "odd"]),
                _json,
                st.none()
                | st.fixed_dictionaries(
                    {"criteria": st.lists(st.sampled_from(CRITERIA), max_size=2)}
                ),
                st.sampled_from(["Find the cause", "Other", " "]),
            ),
            max_size=9,
        ),
        "completion": st.none() | _json,
    }
    fields = draw(st.fixed_dictionaries({}, optional=plausible))
    kind = draw(
        st.sampled_from(
            ["answer", "create_actions", "guide_actions", "request_human", "complete", "bad"]
        )
    )
    return decision(kind, **fields)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), automatic=st.booleans())
def test_any_reply_is_parsed_or_invalid_then_applied_or_refused(
    data: st.DataObject, automatic: bool
) -> None:
    h = History()
    ready, failed = h.plan(brief(objective="a"), brief(objective="b"))
    h.finish(failed.id, {"outcome": "failed", "error": "boom"})
    raw = data.draw(replies([str(ready.id), str(failed.id)]))
    authority = AUTOMATIC_TURN if automatic else USER_TURN
    before = h.snapshot()
    try:
        reply = h.parse(raw, authority)
    except DecisionInvalid:
        assert h.snapshot() == before
        return
    try:
        unit = h.apply(reply, authority)
    except DecisionRefused:
        return
    if automatic:
        assert not any(isinstance(e, wi.ContractRefined | wi.TitleChanged) for e in unit.events)
    assert unit.item.status != "done" or reply.decision.kind == "complete"


def test_a_brief_may_name_source_actions_of_the_item_and_only_those() -> None:
    h = History()
    (source,) = h.plan(brief())
    linked = decision("create_actions", actions=[brief("review", sourceActionIds=[str(source.id)])])
    h.decide(linked)
    built = max(h.actions.values(), key=lambda a: a.sequence)
    assert built.source_action_ids == (source.id,)
    stranger = decision("create_actions", actions=[brief("review", sourceActionIds=[str(uuid4())])])
    with rejected(h, DecisionInvalid, "sourceActionIds"):
        h.parse(stranger)
    with rejected(h, DecisionRefused, "sourceActionIds"):
        h.apply(decisions.CoordinatorReply.model_validate(stranger))
    # An integrate Action merges completed isolated-write work (4.3): a ready read
    # Action is no source of it.
    merge = brief("merge", workspaceMode="integrate", sourceActionIds=[str(source.id)])
    with rejected(h, DecisionInvalid, "completed isolated-write"):
        h.parse(decision("create_actions", actions=[merge]))
