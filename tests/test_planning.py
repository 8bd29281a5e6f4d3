"""Dynamic planning and completion through the service layer (coordinator.md 4.3, 4.6).

Only what the code implements; the ADR-0007 gaps (type templates, candidate VPs,
create_vp, operations) are absent and refused as unknown fields; sourceActionIds are
kept as audit links (ADR-0045).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any
from uuid import UUID

import pytest
from conftest import (
    CRITERIA,
    FakeClock,
    action_spec,
    actions_by_sequence,
    checks,
    claim,
    create_dynamic,
    create_linear,
    plan,
    refused,
    report,
)

from workcenter.application import WorkCenter
from workcenter.domain import work_item as wi
from workcenter.domain.errors import CommandRefused, InvalidInput


def _plan(wc: WorkCenter, item_id: UUID, actions: list[dict[str, Any]], **kwargs: Any) -> Any:
    return wc.plan_actions(
        item_id, expected_version=wc.work_item(item_id).version, actions=actions, **kwargs
    )


def completion(
    *cited: Sequence[UUID],
    criteria: Sequence[str] = CRITERIA,
    summary: str = "All done",
    evidence: Sequence[UUID] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """One passed result per criterion citing ``cited[i]``; top-level ids cover them all."""
    results = [
        {"criterion": c, "status": "passed", "evidenceRunIds": [str(r) for r in runs]}
        for c, runs in zip(criteria, cited, strict=True)
    ]
    every = list(dict.fromkeys(r for runs in cited for r in runs))
    ids = every if evidence is None else list(evidence)
    return {
        "summary": summary,
        "acceptanceResults": results,
        "evidenceRunIds": [str(r) for r in ids],
    } | extra


def _complete(wc: WorkCenter, item_id: UUID, payload: dict[str, Any]) -> wi.WorkItemState:
    return wc.complete(item_id, expected_version=wc.work_item(item_id).version, completion=payload)


def proven_item(wc: WorkCenter, **kwargs: Any) -> tuple[wi.WorkItemState, UUID]:
    """A dynamic item with one completed Run proving every criterion (and delivering)."""
    item = plan(wc, create_dynamic(wc, **kwargs).id)
    claimed = claim(wc)
    wc.finish_run(claimed, report(summary="Report", outputs=_file_output()))
    return wc.work_item(item.id), claimed.run_id


def _file_output(status: str | None = None) -> list[dict[str, Any]]:
    output: dict[str, Any] = {"kind": "file", "label": "patch", "ref": "src/fix.py"}
    return [output | {"status": status}] if status else [output]


# --- 4.3 create_actions: effects -------------------------------------------------------


def test_plan_actions_adds_ready_actions(wc: WorkCenter) -> None:
    item = create_dynamic(wc)
    planned = _plan(
        wc,
        item.id,
        [
            action_spec("Code Review!", "  Review the patch  ", workspace_mode="weird"),
            {k: v for k, v in action_spec(objective="x").items() if k != "type"},
            action_spec(objective="low", maxAttempts=0),
            action_spec(objective="high", maxAttempts=9),
        ],
    )
    actions = actions_by_sequence(wc, item.id)
    assert [a.type for a in actions] == ["code_review", "custom", "research", "research"]
    assert [a.status for a in actions] == ["ready"] * 4
    assert [a.sequence for a in actions] == [1, 2, 3, 4]
    assert actions[0].brief.objective == "Review the patch"
    assert actions[0].workspace_mode == "shared"  # unknown mode falls back to shared
    assert [a.max_attempts for a in actions] == [2, 2, 1, 5]  # default 2, clamped to 1..5
    assert {a.contract_revision for a in actions} == {item.contract_revision}
    assert (planned.status, planned.current_action_id) == ("ready", actions[0].id)


def test_plan_actions_closes_and_supersedes(wc: WorkCenter) -> None:
    item = plan(
        wc,
        create_dynamic(wc).id,
        action_spec(objective="a"),
        action_spec(objective="b"),
        action_spec(objective="c"),
    )
    a, b, c = actions_by_sequence(wc, item.id)
    wc.finish_run(claim(wc), report("waiting"))
    wc.finish_run(claim(wc), report("failed"))
    before_c = wc.action(c.id)
    _plan(
        wc,
        item.id,
        [action_spec(objective="d")],
        close_actions=[
            {"actionId": str(a.id), "reason": "  answered elsewhere "},
            {"actionId": str(b.id), "reason": "obsolete"},
        ],
        supersede_action_ids=[c.id],
    )
    assert (wc.action(a.id).status, wc.action(a.id).close_reason) == (
        "closed",
        "answered elsewhere",
    )
    assert wc.action(b.id).status == "closed"
    after_c = wc.action(c.id)
    assert (after_c.status, after_c.lease_epoch) == ("superseded", before_c.lease_epoch + 1)
    after = wc.work_item(item.id)
    assert after.status == "ready"
    assert wc.action(after.current_action_id).brief.objective == "d"  # type: ignore[arg-type]


def test_plan_actions_repeat_with_goal_refs_and_rationale(wc: WorkCenter) -> None:
    item = plan(wc, create_dynamic(wc).id)
    _plan(
        wc,
        item.id,
        [action_spec()],
        goal_refs={"criteria": [CRITERIA[0]]},
        rationale="The first attempt looked at the wrong module",
    )
    assert len(wc.work_item(item.id).plan) == 2


def test_plan_actions_may_repeat_a_finished_action(wc: WorkCenter) -> None:
    item = plan(wc, create_dynamic(wc).id)
    wc.finish_run(claim(wc), report(check_status="deferred"))
    _plan(wc, item.id, [action_spec()])
    assert len(wc.work_item(item.id).plan) == 2


def test_plan_actions_read_only_without_delivery_target(wc: WorkCenter) -> None:
    item = create_dynamic(wc, delivery_target=None)
    assert _plan(wc, item.id, [action_spec(workspace_mode="read")]).status == "ready"


# --- 4.3 create_actions: refusals -------------------------------------------------------


@pytest.mark.parametrize(
    "spec",
    [
        {"type": "research", "approach": "a", "expectedOutcome": "e"},
        action_spec(dependsOnActionIds=[]),
        action_spec(dependsOnStageIds=["x"]),
        action_spec(candidateVpIds=["vp-1"]),
        action_spec(objective="   "),
        action_spec(approach=""),
        action_spec(expectedOutcome="o" * 2_001),
        action_spec("triage"),
        action_spec(" Triage "),
    ],
    ids=[
        "missing-objective",
        "depends-on-actions",
        "depends-on-stages",
        "candidate-vps",
        "blank-objective",
        "blank-approach",
        "long-outcome",
        "triage",
        "triage-slug",
    ],
)
def test_plan_actions_refuses_invalid_spec(wc: WorkCenter, spec: dict[str, Any]) -> None:
    item = create_dynamic(wc)
    with refused(wc, InvalidInput):
        _plan(wc, item.id, [spec])


@pytest.mark.parametrize("count", [0, 9])
def test_plan_actions_takes_one_to_eight(wc: WorkCenter, count: int) -> None:
    item = create_dynamic(wc)
    specs = [action_spec(objective=f"o{i}") for i in range(count)]
    with refused(wc, InvalidInput, "plan 1 to 8 Actions"):
        _plan(wc, item.id, specs)


def test_plan_actions_caps_an_item_at_64_actions(wc: WorkCenter) -> None:
    item = create_dynamic(wc)
    for batch in range(8):
        _plan(wc, item.id, [action_spec(objective=f"o{batch}-{i}") for i in range(8)])
    assert len(wc.work_item(item.id).plan) == 64
    with refused(wc, CommandRefused, "at most 64 Actions"):
        _plan(wc, item.id, [action_spec(objective="one more")])


def test_plan_actions_refuses_linear_item(wc: WorkCenter) -> None:
    item = create_linear(wc)
    with refused(wc, CommandRefused, "Only dynamic WorkItems"):
        _plan(wc, item.id, [action_spec()])


@pytest.mark.parametrize("state", ["draft", "cancelled"])
def test_plan_actions_refuses_inactive_item(wc: WorkCenter, state: str) -> None:
    item = create_dynamic(wc, start=False)
    if state == "cancelled":
        wc.cancel(item.id)
    with refused(wc, CommandRefused, f"that is {state}"):
        _plan(wc, item.id, [action_spec()])


def test_plan_actions_refuses_done_item(wc: WorkCenter) -> None:
    item, run_id = proven_item(wc)
    _complete(wc, item.id, completion([run_id], [run_id]))
    with refused(wc, CommandRefused, "that is done"):
        _plan(wc, item.id, [action_spec(objective="more")])


def test_plan_actions_refuses_while_a_run_is_active(wc: WorkCenter) -> None:
    item = plan(wc, create_dynamic(wc).id)
    claim(wc)
    with refused(wc, CommandRefused, "while a Run is active"):
        _plan(wc, item.id, [action_spec(objective="other")])


@pytest.mark.parametrize("mode", [None, "shared", "isolated-write", "integrate", "bogus"])
def test_plan_actions_delivery_gate(wc: WorkCenter, mode: str | None) -> None:
    item = create_dynamic(wc, delivery_target=None)
    with refused(wc, CommandRefused, "delivery target is unconfirmed"):
        _plan(wc, item.id, [action_spec(workspace_mode=mode)])


def test_plan_actions_refuses_a_met_goal(wc: WorkCenter) -> None:
    item, _ = proven_item(wc)
    with refused(wc, CommandRefused, "goal is already met"):
        _plan(wc, item.id, [action_spec(objective="more")])


@pytest.mark.parametrize(
    ("goal_refs", "rationale"),
    [(None, ""), ({"criteria": [CRITERIA[0]]}, "too short"), (None, "x" * 40)],
)
def test_plan_actions_repeat_of_live_action_needs_goal_refs_and_rationale(
    wc: WorkCenter, goal_refs: dict[str, Any] | None, rationale: str
) -> None:
    item = plan(wc, create_dynamic(wc).id)
    with refused(wc, InvalidInput, "repeating a live research Action"):
        _plan(wc, item.id, [action_spec()], goal_refs=goal_refs, rationale=rationale)


def test_plan_actions_repeat_within_the_batch_needs_goal_refs(wc: WorkCenter) -> None:
    item = create_dynamic(wc)
    with refused(wc, InvalidInput, "repeating a live research Action"):
        _plan(wc, item.id, [action_spec(), action_spec()])


def test_plan_actions_goal_refs_must_name_something_unmet(wc: WorkCenter) -> None:
    item = plan(wc, create_dynamic(wc).id, action_spec(objective="a"), action_spec(objective="b"))
    a, b = actions_by_sequence(wc, item.id)
    wc.finish_run(claim(wc), report(check_status="deferred"))  # a completed, proves nothing
    wc.finish_run(claim(wc), report("failed"))  # b failed: a blocker
    new = [action_spec(objective="c")]
    with refused(wc, InvalidInput, "goalRefs must name"):
        _plan(wc, item.id, new, goal_refs={})
    with refused(wc, CommandRefused, "not unmet"):
        _plan(wc, item.id, new, goal_refs={"criteria": ["No such criterion"]})
    with refused(wc, CommandRefused, "not a current blocker"):
        _plan(wc, item.id, new, goal_refs={"blockerActionIds": [str(a.id)]})
    _plan(wc, item.id, new, goal_refs={"blockerActionIds": [str(b.id)]})


def test_plan_actions_goal_refs_refuse_delivered_delivery(wc: WorkCenter) -> None:
    item = plan(wc, create_dynamic(wc).id)
    # Delivered (a response with no failed check) but criteria still deferred.
    wc.finish_run(claim(wc), report(check_status="deferred"))
    assert wc.goal_progress(item.id).delivery.status == "passed"
    with refused(wc, CommandRefused, "delivery, which has already passed"):
        _plan(wc, item.id, [action_spec(objective="c")], goal_refs={"delivery": True})


def test_plan_actions_refuses_invalid_closures(wc: WorkCenter) -> None:
    item = plan(wc, create_dynamic(wc).id, action_spec(objective="a"), action_spec(objective="b"))
    a, b = actions_by_sequence(wc, item.id)
    wc.finish_run(claim(wc), report("failed"))  # a failed, b ready
    new = [action_spec(objective="c")]
    twice = [{"actionId": str(a.id), "reason": "x"}] * 2
    with refused(wc, InvalidInput, "names an Action twice"):
        _plan(wc, item.id, new, close_actions=twice)
    with refused(wc, InvalidInput, "needs a reason"):
        _plan(wc, item.id, new, close_actions=[{"actionId": str(a.id), "reason": "  "}])
    with refused(wc, CommandRefused, "cannot close"):
        _plan(wc, item.id, new, close_actions=[{"actionId": str(b.id), "reason": "x"}])
    with refused(wc, InvalidInput, "closeActions must name Actions of this WorkItem"):
        _plan(wc, item.id, new, close_actions=[{"actionId": str(uuid.uuid4()), "reason": "x"}])


def test_plan_actions_refuses_invalid_supersessions(wc: WorkCenter) -> None:
    item = plan(wc, create_dynamic(wc).id, action_spec(objective="a"), action_spec(objective="b"))
    a, b = actions_by_sequence(wc, item.id)
    wc.finish_run(claim(wc), report(check_status="deferred"))  # a completed
    wc.finish_run(claim(wc), report("failed"))  # b failed
    new = [action_spec(objective="c")]
    with refused(wc, InvalidInput, "both closed and superseded"):
        _plan(
            wc,
            item.id,
            new,
            close_actions=[{"actionId": str(b.id), "reason": "x"}],
            supersede_action_ids=[b.id],
        )
    with refused(wc, CommandRefused, "not ready, waiting or failed"):
        _plan(wc, item.id, new, supersede_action_ids=[a.id])


# --- 4.6 complete: success --------------------------------------------------------------


def test_complete_with_response_delivery(wc: WorkCenter) -> None:
    item, run_id = proven_item(wc)
    done = _complete(wc, item.id, completion([run_id], [run_id], residualRisks=["  flaky CI  "]))
    assert (done.status, done.current_action_id) == ("done", None)
    result = done.final_result
    assert result is not None
    assert result.summary == "All done"
    assert [(r.criterion, r.evidence_run_ids) for r in result.acceptance_results] == [
        (CRITERIA[0], (run_id,)),
        (CRITERIA[1], (run_id,)),
    ]
    assert result.evidence_run_ids == (run_id,)
    assert result.residual_risks == ("flaky CI",)
    assert [(r.run_id, r.summary, r.evidence) for r in result.responses] == [
        (run_id, "Report", ("ran pytest: 12 passed",))
    ]
    assert [(o.kind, o.ref, o.run_id) for o in result.outputs] == [("file", "src/fix.py", run_id)]
    assert wc.history(item.id)[-1].__class__.__name__ == "WorkItemCompleted"


def test_complete_with_workspace_files_delivery(wc: WorkCenter) -> None:
    item, run_id = proven_item(wc, delivery_target="workspace_files")
    done = _complete(wc, item.id, completion([run_id], [run_id]))
    assert done.final_result is not None
    assert done.final_result.responses == ()
    assert [(o.kind, o.ref) for o in done.final_result.outputs] == [("file", "src/fix.py")]


def test_complete_closes_blockers_in_the_same_decision(wc: WorkCenter, clock: FakeClock) -> None:
    item = plan(wc, create_dynamic(wc).id, action_spec(objective="a"), action_spec(objective="b"))
    a, b = actions_by_sequence(wc, item.id)
    wc.finish_run(claim(wc), report("waiting", acceptanceChecks=None))  # a waiting, no verdict
    clock.advance(1)
    proof = claim(wc)
    wc.finish_run(proof, report())
    payload = completion(
        [proof.run_id],
        [proof.run_id],
        closeActions=[{"actionId": str(a.id), "reason": "no longer needed"}],
    )
    done = _complete(wc, item.id, payload)
    assert done.status == "done"
    assert wc.action(a.id).status == "closed"
    assert wc.action(b.id).status == "completed"


# --- 4.6 complete: refusals -------------------------------------------------------------


def test_complete_refuses_linear_item(wc: WorkCenter) -> None:
    item = create_linear(wc)
    with refused(wc, CommandRefused, "Linear WorkItems complete through their deliver stage"):
        _complete(wc, item.id, completion([uuid.uuid4()], [uuid.uuid4()]))


@pytest.mark.parametrize("state", ["draft", "cancelled"])
def test_complete_refuses_inactive_item(wc: WorkCenter, state: str) -> None:
    item = create_dynamic(wc, start=False)
    if state == "cancelled":
        wc.cancel(item.id)
    with refused(wc, CommandRefused, f"that is {state}"):
        _complete(wc, item.id, completion([uuid.uuid4()], [uuid.uuid4()]))


def test_complete_refuses_item_without_criteria(wc: WorkCenter) -> None:
    item = plan(wc, create_dynamic(wc, criteria=()).id)
    claimed = claim(wc)
    wc.finish_run(claimed, report(criteria=()))
    with refused(wc, CommandRefused, "no acceptance criteria cannot be completed"):
        _complete(wc, item.id, completion(criteria=(), evidence=[claimed.run_id]))


def test_complete_refuses_twice_and_keeps_the_final_result(wc: WorkCenter) -> None:
    item, run_id = proven_item(wc)
    done = _complete(wc, item.id, completion([run_id], [run_id]))
    with refused(wc, CommandRefused, "that is done"):
        _complete(wc, item.id, completion([run_id], [run_id], summary="Rewritten"))
    assert wc.work_item(item.id).final_result == done.final_result


def _results(payload: dict[str, Any]) -> list[dict[str, Any]]:
    return list(payload["acceptanceResults"])


MALFORMED_COMPLETIONS: dict[str, Any] = {
    "blank-summary": lambda p: p | {"summary": "   "},
    "long-summary": lambda p: p | {"summary": "s" * 8_001},
    "results-reversed": lambda p: p | {"acceptanceResults": _results(p)[::-1]},
    "result-missing": lambda p: p | {"acceptanceResults": _results(p)[:1]},
    "result-deferred": lambda p: (
        p | {"acceptanceResults": [_results(p)[0], _results(p)[1] | {"status": "deferred"}]}
    ),
    "result-without-runs": lambda p: (
        p | {"acceptanceResults": [_results(p)[0], _results(p)[1] | {"evidenceRunIds": []}]}
    ),
    "no-evidence-runs": lambda p: p | {"evidenceRunIds": []},
    "25-risks": lambda p: p | {"residualRisks": ["r"] * 25},
    "unknown-field": lambda p: p | {"operations": []},
}


@pytest.mark.parametrize("name", MALFORMED_COMPLETIONS)
def test_complete_refuses_malformed_completion(wc: WorkCenter, name: str) -> None:
    item, run_id = proven_item(wc)
    payload = MALFORMED_COMPLETIONS[name](completion([run_id], [run_id]))
    with refused(wc, InvalidInput):
        _complete(wc, item.id, payload)


def test_complete_refuses_evidence_not_covering_cited_runs(wc: WorkCenter) -> None:
    item, run_id = proven_item(wc)
    extra = uuid.uuid4()
    with refused(wc, InvalidInput, "cover every cited Run"):
        _complete(wc, item.id, completion([run_id], [run_id, extra], evidence=[run_id]))


def test_complete_refuses_unfinished_actions(wc: WorkCenter) -> None:
    item = plan(wc, create_dynamic(wc).id, action_spec(objective="a"), action_spec(objective="b"))
    _, b = actions_by_sequence(wc, item.id)
    proof = claim(wc)
    wc.finish_run(proof, report())  # a proves everything; b is still ready
    payload = completion([proof.run_id], [proof.run_id])
    with refused(wc, CommandRefused, "Unfinished Actions must be closed first"):
        _complete(wc, item.id, payload)
    close_ready = payload | {"closeActions": [{"actionId": str(b.id), "reason": "unneeded"}]}
    with refused(wc, CommandRefused, "cannot close"):
        _complete(wc, item.id, close_ready)


def test_complete_refuses_runs_of_other_items(wc: WorkCenter) -> None:
    item, run_id = proven_item(wc)
    _, foreign = proven_item(wc, title="Other")
    for stranger in (foreign, uuid.uuid4()):
        with refused(wc, CommandRefused, "does not belong to this WorkItem"):
            _complete(wc, item.id, completion([run_id], [stranger]))


def test_complete_refuses_a_run_from_an_older_contract(wc: WorkCenter) -> None:
    item, run_id = proven_item(wc)
    wc.update_contract(item.id, expected_version=item.version, goal="A refined goal")
    with refused(wc, CommandRefused, "not a current, canonical proof"):
        _complete(wc, item.id, completion([run_id], [run_id]))


def test_complete_refuses_a_failed_run(wc: WorkCenter) -> None:
    item = plan(wc, create_dynamic(wc).id, action_spec(objective="a"), action_spec(objective="b"))
    a, _ = actions_by_sequence(wc, item.id)
    failed = claim(wc)
    wc.finish_run(failed, report("failed", acceptanceChecks=None))
    proof = claim(wc)
    wc.finish_run(proof, report())
    payload = completion(
        [proof.run_id],
        [proof.run_id],
        evidence=[proof.run_id, failed.run_id],
        closeActions=[{"actionId": str(a.id), "reason": "superseded by b"}],
    )
    with refused(wc, CommandRefused, "not a current, canonical proof"):
        _complete(wc, item.id, payload)


def test_complete_refuses_unmet_criteria(wc: WorkCenter) -> None:
    item = plan(wc, create_dynamic(wc).id)
    claimed = claim(wc)
    wc.finish_run(claimed, report(acceptanceChecks=checks(**{CRITERIA[1]: "deferred"})))
    with refused(wc, CommandRefused, "Criteria are not met"):
        _complete(wc, item.id, completion([claimed.run_id], [claimed.run_id]))


def test_complete_refuses_citations_goal_progress_does_not_list(wc: WorkCenter) -> None:
    item = plan(wc, create_dynamic(wc).id, action_spec(objective="a"), action_spec(objective="b"))
    first = claim(wc)
    wc.finish_run(first, report(acceptanceChecks=checks(**{CRITERIA[1]: "deferred"})))
    second = claim(wc)
    wc.finish_run(second, report(acceptanceChecks=checks(**{CRITERIA[0]: "deferred"})))
    crossed = completion([second.run_id], [first.run_id])
    with refused(wc, CommandRefused, "cites no Run that goal progress lists"):
        _complete(wc, item.id, crossed)
    assert _complete(wc, item.id, completion([first.run_id], [second.run_id])).status == "done"


def test_complete_refuses_unconfirmed_delivery_target(wc: WorkCenter) -> None:
    item, run_id = proven_item(wc, delivery_target=None)
    with refused(wc, CommandRefused, "delivery target is unconfirmed"):
        _complete(wc, item.id, completion([run_id], [run_id]))


@pytest.mark.parametrize(
    ("output_status", "error"),
    [
        (None, "No evidence Run carries current, fresh delivery evidence"),
        # A negative output makes the Run contradictory: it proves nothing at all.
        ("failed", "not a current, canonical proof"),
        ("pending", "not a current, canonical proof"),
    ],
)
def test_complete_refuses_without_delivery_evidence(
    wc: WorkCenter, output_status: str | None, error: str
) -> None:
    item = plan(wc, create_dynamic(wc, delivery_target="workspace_files").id)
    claimed = claim(wc)
    outputs = _file_output(output_status) if output_status else []
    wc.finish_run(claimed, report(outputs=outputs))
    with refused(wc, CommandRefused, error):
        _complete(wc, item.id, completion([claimed.run_id], [claimed.run_id]))


def test_complete_closing_a_failed_action_keeps_its_contradiction(
    wc: WorkCenter, clock: FakeClock
) -> None:
    item = plan(wc, create_dynamic(wc).id, action_spec(objective="a"), action_spec(objective="b"))
    _, b = actions_by_sequence(wc, item.id)
    proof = claim(wc)
    wc.finish_run(proof, report())
    verifier = claim(wc)
    clock.advance(5)
    failing = checks(**{CRITERIA[0]: "failed"})
    wc.finish_run(verifier, report("failed", acceptanceChecks=failing))
    payload = completion(
        [proof.run_id],
        [proof.run_id],
        closeActions=[{"actionId": str(b.id), "reason": "flaky verifier"}],
    )
    with refused(wc, CommandRefused, "Criteria are not met"):
        _complete(wc, item.id, payload)


# --- 4.3 sourceActionIds: audit links, never scheduling -----------------------------------


def test_plan_actions_keeps_source_action_ids_as_audit_links(wc: WorkCenter) -> None:
    item = create_dynamic(wc)
    plan(wc, item.id)
    [source] = actions_by_sequence(wc, item.id)
    assert source.status == "ready"  # unfinished: a source never gates scheduling
    _plan(
        wc,
        item.id,
        [action_spec(objective="Build on it", sourceActionIds=[str(source.id), str(source.id)])],
    )
    _, built = actions_by_sequence(wc, item.id)
    assert built.source_action_ids == (source.id,)  # duplicates dropped
    assert built.status == "ready"
    [planned, *_] = wc.action_history(built.id)  # the stored event keeps the links
    assert planned.source_action_ids == (source.id,)  # type: ignore[attr-defined]


def test_an_integrate_action_integrates_completed_isolated_write_actions(wc: WorkCenter) -> None:
    """coordinator.md 4.3: "integrate needs completed isolated-write sources"; any source
    of the item was taken, and none at all."""
    item = create_dynamic(wc)
    plan(wc, item.id, action_spec(objective="Shared work", workspace_mode="shared"))
    plan(wc, item.id, action_spec(objective="Branch work", workspace_mode="isolated-write"))
    shared, isolated = actions_by_sequence(wc, item.id)

    def integrate(*sources: UUID) -> list[dict[str, Any]]:
        ids = [str(s) for s in sources]
        return [
            action_spec(
                "merge", "Merge the branch", workspace_mode="integrate", sourceActionIds=ids
            )
        ]

    with refused(wc, InvalidInput, "an integrate Action needs sourceActionIds"):
        _plan(wc, item.id, integrate())
    with refused(wc, CommandRefused, f"Action {isolated.id} is ready isolated-write"):
        _plan(wc, item.id, integrate(isolated.id))
    for _ in range(2):
        wc.finish_run(claim(wc), report())
    assert wc.action(isolated.id).status == "completed"
    with refused(wc, CommandRefused, f"Action {shared.id} is completed shared"):
        _plan(wc, item.id, integrate(isolated.id, shared.id))
    _plan(wc, item.id, integrate(isolated.id))
    merge = actions_by_sequence(wc, item.id)[-1]
    assert (merge.workspace_mode, merge.source_action_ids) == ("integrate", (isolated.id,))


def test_plan_actions_refuses_source_action_ids_that_are_not_actions_of_the_item(
    wc: WorkCenter,
) -> None:
    item, other = create_dynamic(wc), create_dynamic(wc, title="Other")
    plan(wc, other.id)
    [foreign] = actions_by_sequence(wc, other.id)
    for ids in ([str(uuid.uuid4())], [str(foreign.id)], [str(item.id)]):
        with refused(wc, InvalidInput, "sourceActionIds"):
            _plan(wc, item.id, [action_spec(sourceActionIds=ids)])
