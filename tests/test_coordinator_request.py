"""The Coordinator's request (coordinator.md 1.3, 9.6): a bounded snapshot of the
WorkItem, framed with the turn's input, hashed as canonical JSON. Pure domain."""

from __future__ import annotations

import hashlib
import json
from datetime import timedelta
from typing import Any

import pytest
from domain_states import CRITERIA, T0, TURN, History, brief, decision, passing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workcenter.domain import bounds, planning
from workcenter.domain import coordinator_request as cr
from workcenter.domain import resource_ledger as rl
from workcenter.domain.decisions import reply_schema
from workcenter.domain.errors import SnapshotTooLarge
from workcenter.domain.unit import Unit

USER_TEXT = "Please fix the flaky import"


def lines(count: int, text: str = "hello") -> list[cr.ConversationLine]:
    return [
        cr.ConversationLine(
            role="user" if i % 2 == 0 else "assistant",
            text=f"{text} {i}",
            status="completed",
            at=T0 + timedelta(seconds=i),
        )
        for i in range(count)
    ]


def request(h: History, **kwargs: Any) -> cr.CoordinatorRequestBody:
    args: dict[str, Any] = {"lines": lines(3), "prompt": USER_TEXT, "correction": None}
    args |= kwargs
    return cr.build_request(
        h.item,
        h.actions,
        planning.progress(h.item, h.actions),
        args["lines"],
        args["prompt"],
        args["correction"],
    )


def snapshot_of(body: cr.CoordinatorRequestBody) -> dict[str, Any]:
    content = body.messages[1]["content"]
    assert content.startswith(cr.SNAPSHOT_HEADING + "\n")
    text = content[len(cr.SNAPSHOT_HEADING) + 1 :].split("\n\n" + cr.PROMPT_HEADING)[0]
    value: dict[str, Any] = json.loads(text)
    return value


# --- the request ------------------------------------------------------------------------


def test_the_request_frames_the_snapshot_the_input_and_the_correction() -> None:
    h = History()
    h.plan(brief())
    body = request(h, correction="reply must be JSON")
    system, user = body.messages
    assert system == {"role": "system", "content": cr.SYSTEM_PROMPT}
    assert user["role"] == "user"
    assert (
        f"\n\n{cr.PROMPT_HEADING}\n{USER_TEXT}\n\n{cr.CORRECTION_HEADING}\nreply must be JSON"
        in (user["content"])
    )
    assert body.reply_schema == reply_schema()
    assert cr.CORRECTION_HEADING not in request(h).messages[1]["content"]


def test_the_hash_is_sha256_of_canonical_json() -> None:
    h = History()
    body = request(h)
    canonical = body.canonical()
    assert json.loads(canonical) == {
        "messages": list(body.messages),
        "reply_schema": body.reply_schema,
    }
    assert b": " not in canonical[:20] and canonical.startswith(b'{"messages":')
    assert body.hash() == hashlib.sha256(canonical).hexdigest()
    assert request(h).hash() == body.hash()


def test_the_snapshot_shows_the_contract_progress_and_actions() -> None:
    h = History()
    ready, done = h.plan(brief(objective="Next"), brief(objective="Proof"))
    run_id = h.finish(done.id, passing(outputs=[{"kind": "file", "label": "p", "ref": "a.py"}]))
    snap = snapshot_of(request(h))
    item = snap["workItem"]
    assert (item["id"], item["version"], item["contractRevision"]) == (
        str(h.item.id),
        h.item.version,
        1,
    )
    assert [c["criterion"] for c in item["acceptanceCriteria"]] == list(CRITERIA)
    assert [c["status"] for c in item["acceptanceCriteria"]] == ["passed", "passed"]
    assert snap["goalProgress"]["delivery"]["status"] == "passed"
    assert [a["id"] for a in snap["actions"]] == [str(ready.id), str(done.id)]  # unfinished first
    shown = snap["actions"][1]
    assert shown["brief"]["objective"] == "Proof"
    assert shown["result"]["runId"] == str(run_id)
    assert shown["result"]["outputs"][0]["ref"] == "a.py"
    assert [c["status"] for c in shown["result"]["checks"]] == ["passed", "passed"]
    assert (snap["form"], snap["actionsLeftOut"]) == ("full", 0)


def test_superseded_actions_are_left_out_and_counted() -> None:
    h = History()
    (old,) = h.plan(brief(objective="Old"))
    h.plan(brief(objective="New"), supersede_action_ids=[old.id])
    snap = snapshot_of(request(h))
    assert [a["brief"]["objective"] for a in snap["actions"]] == ["New"]
    assert snap["actionsLeftOut"] == 1


def test_the_conversation_is_the_last_20_finished_lines_newest_first() -> None:
    h = History()
    given_lines = [
        *lines(25),
        cr.ConversationLine(
            role="assistant", text="...", status="thinking", at=T0 + timedelta(hours=1)
        ),
    ]
    shown = snapshot_of(request(h, lines=given_lines))["conversation"]
    assert [line["text"] for line in shown] == [f"hello {i}" for i in range(24, 4, -1)]
    long = [cr.ConversationLine(role="user", text="x" * 5_000, status="completed", at=T0)]
    assert len(snapshot_of(request(h, lines=long))["conversation"][0]["text"]) == cr.LINE_LIMIT


def test_finished_actions_then_briefs_give_way_to_fit_64_kib() -> None:
    h = History()
    long = "long text " * 200  # 2,000 characters
    specs = [
        brief(objective=f"{i} {long}"[:1_900], approach=long, expectedOutcome=long)
        for i in range(8)
    ]
    for _ in range(4):
        batch = h.plan(*specs[:8])
        for action in batch[:4]:
            h.finish(
                action.id,
                passing(
                    summary=long,
                    acceptanceChecks=[
                        {"criterion": c, "status": "deferred", "evidence": long} for c in CRITERIA
                    ],
                ),
            )
        specs = [s | {"objective": s["objective"] + "+"} for s in specs]
    snap = snapshot_of(request(h, lines=lines(20, "y" * 1_000)))
    assert len(cr.canonical_json(snap)) <= cr.SNAPSHOT_LIMIT
    unfinished = [a for a in h.actions.values() if a.status == "ready"]
    shown = {a["id"] for a in snap["actions"]}
    assert {str(a.id) for a in unfinished} <= shown
    assert snap["actionsLeftOut"] == len(h.item.plan) - len(snap["actions"])


def test_the_compact_form_drops_briefs_when_unfinished_actions_need_the_room() -> None:
    h = History(goal="g" * 8_000, criteria=[f"{i} " + "c" * 900 for i in range(24)])
    long = "z" * 2_000
    for batch in range(8):
        h.plan(
            *[
                brief(objective=f"{batch}-{i} {long}"[:2_000], approach=long, expectedOutcome=long)
                for i in range(8)
            ]
        )
    snap = snapshot_of(request(h, lines=lines(20, "w" * 1_000)))
    assert snap["form"] == "compact" and "brief" not in snap["actions"][0]
    assert len(snap["actions"]) == 64
    assert len(cr.canonical_json(snap)) <= cr.SNAPSHOT_LIMIT


def test_a_snapshot_that_cannot_fit_its_unfinished_actions_fails_the_turn() -> None:
    # 24 criteria of 1,000 four-byte characters: the contract alone passes 64 KiB.
    h = History(criteria=[f"{i:02}" + "\U0001f600" * 998 for i in range(24)])
    h.plan(brief())
    with pytest.raises(SnapshotTooLarge, match="do not fit"):
        request(h)


# --- properties ---------------------------------------------------------------------------

_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40)


@st.composite
def histories(draw: st.DrawFn) -> History:
    h = History()
    batches = draw(st.lists(st.integers(1, 8), min_size=0, max_size=3))
    for batch, size in enumerate(batches):
        created = h.plan(*[brief(objective=f"{batch}-{i} {draw(_text)}") for i in range(size)])
        for action in created:
            outcome = draw(st.sampled_from(["none", "completed", "failed", "waiting", "running"]))
            if outcome == "running":
                h.claim(action.id)
                break  # nothing more is planned while a Run is active
            if outcome != "none":
                # Deferred checks keep the goal unmet, so every batch can be planned.
                report = passing(outcome=outcome, waitingReason="?", error="")
                report["acceptanceChecks"] = [
                    {"criterion": c, "status": "deferred", "evidence": "later"} for c in CRITERIA
                ]
                if outcome == "failed":
                    report["error"] = "boom"
                h.finish(action.id, report)
        if h.item.entries("running"):
            break
    return h


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    h=histories(),
    costs=st.lists(st.tuples(st.integers(1, 5_000), st.integers(0, 5_000)), max_size=6),
)
def test_budget_usage_never_changes_the_request(h: History, costs: list[tuple[int, int]]) -> None:
    before = request(h).hash()
    item = h.item
    for turn, (estimate, used) in enumerate(costs):
        unit = Unit(h.item, h.actions, h.tick(), h.ledger, by=TURN)
        admission = rl.reserve_coordinator(
            h.ledger,
            turn_id=f"turn-{turn}",
            retry_id="r",
            estimated_tokens=estimate,
            item_active=True,
            at=unit.at,
            by=TURN,
        )
        unit.apply_ledger(admission.events)
        assert unit.ledger is not None
        unit.apply_ledger(
            rl.settle_coordinator(
                unit.ledger,
                turn_id=f"turn-{turn}",
                usage=rl.Usage(input_tokens=used, total_tokens=used),
                complete=True,
                at=unit.at,
                by=TURN,
            )
        )
        h.take(unit)
    assert h.item == item and h.ledger.request_count == len(costs)
    assert request(h).hash() == before


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(h=histories())
def test_the_request_is_a_pure_function_of_decision_relevant_state(h: History) -> None:
    body = request(h)
    shuffled = dict(reversed(list(h.actions.items())))
    again = cr.build_request(
        h.item, shuffled, planning.progress(h.item, shuffled), lines(3), USER_TEXT, None
    )
    assert again.hash() == body.hash()
    if h.item.status not in ("done", "cancelled") and not h.item.entries("running"):
        h.decide(decision("request_human", question="What next?"))
        assert request(h).hash() != body.hash()


_long_text = st.text(
    st.characters(codec="ascii", exclude_categories=("Cc",)), min_size=1_500, max_size=2_000
)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    data=st.data(),
    batches=st.integers(1, 8),
    criteria=st.integers(1, 24),
    conversation=st.integers(0, 25),
    finish=st.floats(0, 1),
)
def test_the_snapshot_stays_within_64_kib_for_large_items(
    data: st.DataObject, batches: int, criteria: int, conversation: int, finish: float
) -> None:
    long = data.draw(_long_text)
    h = History(
        goal=(long * 5)[:8_000],
        criteria=[f"{i} {long}"[:1_000] for i in range(criteria)],
    )
    for batch in range(batches):
        created = h.plan(
            *[
                brief(objective=f"{batch}-{i} {long}"[:2_000], approach=long, expectedOutcome=long)
                for i in range(8)
            ]
        )
        for action in created[: int(8 * finish)]:
            h.finish(
                action.id,
                passing(
                    criteria=h.item.acceptance_criteria,
                    summary=long,
                    outputs=[
                        {"kind": "file", "label": long[:500], "ref": f"f{i}.py"} for i in range(5)
                    ],
                )
                | {
                    "acceptanceChecks": [
                        {"criterion": c, "status": "deferred", "evidence": long}
                        for c in h.item.acceptance_criteria
                    ]
                },
            )
    body = request(h, lines=lines(conversation, long[:1_200]), prompt=long * 5, correction=long)
    snap = snapshot_of(body)
    assert len(cr.canonical_json(snap)) <= cr.SNAPSHOT_LIMIT
    unfinished = {str(a.id) for a in h.actions.values() if a.status == "ready"}
    assert unfinished <= {a["id"] for a in snap["actions"]}


def test_the_snapshot_holds_the_goal_the_contract_took_whole() -> None:
    """It held the first 4,000 of the 8,000 characters a goal may have (found by
    acceptance testing, ADR-0144)."""
    goal = "目" * (bounds.GOAL - 2) + "終了"
    assert snapshot_of(request(History(goal=goal)))["workItem"]["goal"] == goal
