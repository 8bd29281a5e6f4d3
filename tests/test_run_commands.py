"""Run commands through the service layer (lifecycle.md 3.3 to 3.5, invariants 2 to 4, 12).

Claim, renew, interrupt, finish (every outcome, normalisation steps 1 to 6 in
order, linear stage progression), recovery, and the worker fence.
"""

from __future__ import annotations

import dataclasses
import re
from datetime import timedelta
from typing import Any

import pytest
from conftest import (
    BACKENDS,
    BOOT_ID,
    CRITERIA,
    T0,
    WORKER,
    FakeClock,
    action_events,
    action_spec,
    actions_by_sequence,
    assert_nothing_claimable,
    assert_renew_refused,
    checks,
    claim,
    create_dynamic,
    create_linear,
    current,
    item_events,
    plan,
    refused,
    report,
    run_of,
)

from workcenter.application import Claim, WorkCenter
from workcenter.domain import work_item as wi
from workcenter.domain.errors import InvalidInput, StaleRun
from workcenter.domain.runs import RECOVERED_REASON

ONLY_TRIAGE = "Only a triage Action may patch the contract"
REVIEW_DECIDES = "A completed review must decide approved or changes_requested"
NEEDS_EVIDENCE = "A completed outcome needs evidence"
CHECK_PER_CRITERION = "A completed outcome needs exactly one check per criterion, in order"
FINAL_GATE = "The final gate needs every acceptance check passed"


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """Every test here runs on SQLite and on PostgreSQL."""
    return str(request.param)


def finish_current(wc: WorkCenter, **fields: Any) -> Claim:
    """Claim the next Action and complete it (reviews approve unless told otherwise)."""
    claimed = claim(wc)
    if claimed.action_type == "review":
        fields.setdefault("reviewDecision", "approved")
    wc.finish_run(claimed, report(**fields))
    return claimed


def linear_at(wc: WorkCenter, stage: str, **kwargs: Any) -> wi.WorkItemState:
    """A started linear item whose current Action is ``stage``."""
    item = create_linear(wc, **kwargs)
    while current(wc, item.id).type != stage:
        finish_current(wc)
    return wc.work_item(item.id)


def finished_as(wc: WorkCenter, claimed: Claim) -> tuple[str, str | None]:
    """(Run status, Run error) after a finish."""
    run = run_of(wc, claimed)
    return run.status, run.result.error if run.result else None


# --- 3.3 claim --------------------------------------------------------------------


def test_claim_linear_current_action(wc: WorkCenter, clock: FakeClock) -> None:
    item = create_linear(wc)
    action = current(wc, item.id)
    claimed = claim(wc)
    assert (claimed.action_id, claimed.work_item_id, claimed.action_type) == (
        action.id,
        item.id,
        "triage",
    )
    assert (claimed.lease_epoch, claimed.attempt, claimed.boot_id, claimed.worker) == (
        1,
        1,
        BOOT_ID,
        WORKER,
    )
    assert claimed.expires_at == clock.now() + timedelta(seconds=60)  # default lease
    assert (claimed.goal, claimed.acceptance_criteria) == (item.goal, CRITERIA)
    after = wc.action(action.id)
    assert (after.status, after.attempt, after.lease_epoch, after.current_run_id) == (
        "running",
        1,
        1,
        claimed.run_id,
    )
    run = run_of(wc, claimed)
    assert (run.status, run.ordinal, run.owner_boot_id, run.lease_epoch) == (
        "running",
        1,
        BOOT_ID,
        1,
    )
    assert (run.started_at, run.expires_at) == (clock.now(), claimed.expires_at)
    assert (run.generation, run.spec_hash, run.contract_revision) == (
        after.generation,
        after.spec_hash,
        1,
    )
    running = wc.work_item(item.id)
    assert (running.status, running.current_action_id) == ("running", action.id)
    assert action_events(wc, action.id, after=action.version) == ["RunClaimed"]


def test_claim_with_custom_lease(wc: WorkCenter, clock: FakeClock) -> None:
    create_linear(wc)
    assert claim(wc, lease_seconds=5).expires_at == clock.now() + timedelta(seconds=5)


def test_each_claim_bumps_the_epoch(wc: WorkCenter) -> None:
    create_linear(wc)
    first = claim(wc)
    wc.interrupt(first, reason="restart")
    second = claim(wc)
    assert second.action_id == first.action_id
    assert (second.lease_epoch, second.attempt) == (first.lease_epoch + 1, 2)
    assert run_of(wc, second).ordinal == 2
    assert second.run_id != first.run_id


def test_dynamic_claims_oldest_ready_first(wc: WorkCenter, clock: FakeClock) -> None:
    item = plan(wc, create_dynamic(wc).id, action_spec(objective="a"), action_spec(objective="b"))
    a, b = actions_by_sequence(wc, item.id)
    first = claim(wc)
    assert first.action_id == a.id  # same ready time: lower sequence first
    clock.advance(1)
    wc.interrupt(first)  # a is ready again, but later than b
    assert claim(wc).action_id == b.id
    assert claim(wc).action_id == a.id
    running = wc.work_item(item.id)
    assert running.status == "running"


def test_dynamic_claims_while_another_action_failed(wc: WorkCenter) -> None:
    item = plan(wc, create_dynamic(wc).id, action_spec(objective="a"), action_spec(objective="b"))
    _, b = actions_by_sequence(wc, item.id)
    wc.finish_run(claim(wc), report("failed"))
    assert wc.work_item(item.id).status == "ready"  # running, else ready, else blockers
    assert claim(wc).action_id == b.id  # invariant 13 binds non-dynamic items only


@pytest.mark.parametrize("mode", ["linear", "dynamic"])
def test_claim_nothing_in_a_draft(wc: WorkCenter, mode: str) -> None:
    if mode == "linear":
        create_linear(wc, start=False)
    else:
        create_dynamic(wc, start=False)
    assert_nothing_claimable(wc)


def test_claim_nothing_while_the_current_action_runs(wc: WorkCenter) -> None:
    create_linear(wc)
    claim(wc)
    assert_nothing_claimable(wc)


@pytest.mark.parametrize("outcome", ["waiting", "failed"])
def test_claim_nothing_in_linear_waiting_or_needs_attention(wc: WorkCenter, outcome: str) -> None:
    create_linear(wc)
    wc.finish_run(claim(wc), report(outcome))
    assert_nothing_claimable(wc)


def test_claim_nothing_in_cancelled_or_done_items(wc: WorkCenter) -> None:
    cancelled = plan(wc, create_dynamic(wc).id)
    wc.cancel(cancelled.id)
    create_linear(wc, stages=("deliver",))
    finish_current(wc)
    assert_nothing_claimable(wc)


# --- 3.3 renew --------------------------------------------------------------------


def test_renew_extends_the_lease_on_the_action_only(wc: WorkCenter, clock: FakeClock) -> None:
    item = create_linear(wc)
    claimed = claim(wc)
    seen = wc.work_item(item.id)
    clock.advance(30)
    assert wc.renew_lease(claimed, lease_seconds=90) is True
    assert run_of(wc, claimed).expires_at == clock.now() + timedelta(seconds=90)
    assert wc.work_item(item.id).version == seen.version  # no WorkItem event
    assert action_events(wc, claimed.action_id)[-1] == "LeaseRenewed"


def test_renew_refuses_an_expired_lease(wc: WorkCenter, clock: FakeClock) -> None:
    create_linear(wc)
    claimed = claim(wc)
    clock.advance(59.999)
    assert wc.renew_lease(claimed) is True
    clock.advance(60)  # exactly at expires_at: expired
    assert_renew_refused(wc, claimed)


# --- 3.3 interrupt ----------------------------------------------------------------


def test_interrupt_requeues_by_the_auto_retry_rule(wc: WorkCenter) -> None:
    item = create_linear(wc)
    claimed = claim(wc)
    after = wc.interrupt(claimed, reason="worker shutting down")
    run = run_of(wc, claimed)
    assert (run.status, run.end_reason, run.ended_at) == (
        "interrupted",
        "worker shutting down",
        T0,
    )
    assert (after.status, after.current_run_id, after.attempt) == ("ready", None, 1)
    interrupted = wc.work_item(item.id)
    assert (interrupted.status, interrupted.current_action_id) == ("ready", claimed.action_id)
    event = wc.action_history(claimed.action_id)[-1]
    assert (type(event).__name__, event.retryable) == ("RunInterrupted", True)  # type: ignore[attr-defined]


def test_interrupt_exhausted_fails_the_action(wc: WorkCenter) -> None:
    item = create_linear(wc)
    wc.interrupt(claim(wc))
    claimed = claim(wc)  # attempt 2 of 2
    after = wc.interrupt(claimed)
    assert after.status == "failed"
    assert wc.work_item(item.id).status == "needs_attention"
    assert_nothing_claimable(wc)  # invariant 13


def test_interrupt_never_requeues_deliver(wc: WorkCenter) -> None:
    item = create_linear(wc, stages=("deliver",))
    assert wc.interrupt(claim(wc)).status == "failed"  # invariant 12, even on attempt 1
    assert wc.work_item(item.id).status == "needs_attention"


def test_interrupt_ignores_lease_expiry(wc: WorkCenter, clock: FakeClock) -> None:
    create_linear(wc)
    claimed = claim(wc)
    clock.advance(600)
    assert wc.interrupt(claimed).status == "ready"  # LRF, not LRF+


def test_interrupt_dynamic_derives_the_item_status(wc: WorkCenter) -> None:
    item = plan(wc, create_dynamic(wc).id, action_spec(objective="a"), action_spec(objective="b"))
    a_claim = claim(wc)
    b_claim = claim(wc)
    wc.interrupt(b_claim)
    # a still runs: running beats ready.
    assert (wc.work_item(item.id).status, wc.work_item(item.id).current_action_id) == (
        "running",
        a_claim.action_id,
    )
    wc.interrupt(a_claim)
    derived = wc.work_item(item.id)
    assert (derived.status, derived.current_action_id) == ("ready", a_claim.action_id)


# --- 3.4 step 1: payload rules and normalisation --------------------------------------


@pytest.mark.parametrize(
    "payload",
    [
        {"outcome": "done"},
        {"outcome": None},
        {"summary": "no outcome"},
        {"outcome": "waiting"},
        {"outcome": "waiting", "waitingReason": "   "},
        {"outcome": "completed", "contractPatch": "make it better"},
        {"outcome": "completed", "contractPatch": {"acceptanceCriteria": "one"}},
        {"outcome": "completed", "contractPatch": {"deliveryTarget": "email"}},
    ],
)
def test_finish_refuses_malformed_payload(wc: WorkCenter, payload: dict[str, Any]) -> None:
    create_linear(wc)
    claimed = claim(wc)
    with refused(wc, InvalidInput):
        wc.finish_run(claimed, payload)
    assert run_of(wc, claimed).status == "running"  # nothing recorded, the Run goes on


def test_finish_normalises_payload(wc: WorkCenter) -> None:
    linear_at(wc, "implement", delivery_target="workspace_files")
    claimed = claim(wc)
    after = wc.finish_run(
        claimed,
        report(
            summary="  done  ",
            response="r" * 70_000,
            evidence=["  ran tests  ", {"tool": "pytest", "isError": True}, {"kind": "bogus"}, 7],
            outputs=[
                {"kind": "file", "label": "module", "ref": "./src/a.py"},
                {"kind": "file", "label": "absolute", "ref": "/etc/passwd"},
                {"kind": "text", "label": "not an output", "ref": "x"},
            ],
            reviewDecision="maybe",
            failureKind="x" * 200,
        ),
    )
    assert after.status == "completed"
    result = run_of(wc, claimed).result
    assert result is not None
    assert result.summary == "done"
    assert len(result.response) == 65_536
    assert [(e.kind, e.label, e.status) for e in result.evidence] == [
        ("text", "ran tests", None),
        ("tool", "pytest", "error"),
    ]
    assert [(o.kind, o.ref) for o in result.outputs] == [("file", "src/a.py")]
    assert result.review_decision is None
    assert result.failure_kind == "x" * 128


def test_finish_failed_records_system_blocked(wc: WorkCenter) -> None:
    create_linear(wc)
    claimed = claim(wc)
    wc.finish_run(
        claimed,
        report("failed", error="quota", failureKind="system_blocked", failureCode="rate_limit"),
    )
    result = run_of(wc, claimed).result
    assert result is not None
    assert (result.error, result.failure_kind, result.failure_code) == (
        "quota",
        "system_blocked",
        "rate_limit",
    )


# --- 3.4 steps 2 to 6 --------------------------------------------------------------


def test_step2_contract_patch_from_non_triage_fails(wc: WorkCenter) -> None:
    item = linear_at(wc, "implement")
    claimed = claim(wc)
    wc.finish_run(claimed, report(contractPatch={"goal": "Something else"}))
    assert finished_as(wc, claimed) == ("failed", ONLY_TRIAGE)
    after = wc.work_item(item.id)
    assert (after.goal, after.contract_revision, after.status) == (
        item.goal,
        1,
        "needs_attention",
    )


def test_step2_applies_to_any_outcome(wc: WorkCenter) -> None:
    linear_at(wc, "implement")
    claimed = claim(wc)
    wc.finish_run(claimed, report("waiting", contractPatch={"goal": "Something else"}))
    assert finished_as(wc, claimed) == ("failed", ONLY_TRIAGE)


def test_step2_empty_patch_is_none(wc: WorkCenter) -> None:
    linear_at(wc, "implement")
    for patch in ({}, {"title": "   ", "goal": ""}):
        claimed = claim(wc)
        wc.finish_run(claimed, report("retryable", contractPatch=patch))
        assert finished_as(wc, claimed) == ("retryable", "tool crashed")


def test_step2_dynamic_drops_patches(wc: WorkCenter) -> None:
    # ADR-0007 deviation: dynamic items drop a Run's patch instead of failing the Run.
    item = plan(wc, create_dynamic(wc).id)
    claimed = claim(wc)
    wc.finish_run(claimed, report(contractPatch={"goal": "Something else"}))
    assert finished_as(wc, claimed) == ("completed", None)
    assert wc.work_item(item.id).goal == item.goal


def test_step3_completed_review_needs_a_decision(wc: WorkCenter) -> None:
    linear_at(wc, "review")
    claimed = claim(wc)
    wc.finish_run(claimed, report(reviewDecision="looks fine"))
    assert finished_as(wc, claimed) == ("failed", REVIEW_DECIDES)


@pytest.mark.parametrize("evidence", [None, [], [{"kind": "bogus", "label": "x"}, 3, "  "]])
def test_step4_completed_needs_evidence(wc: WorkCenter, evidence: Any) -> None:
    linear_at(wc, "implement")
    claimed = claim(wc)
    wc.finish_run(claimed, report(evidence=evidence))
    assert finished_as(wc, claimed) == ("failed", NEEDS_EVIDENCE)


@pytest.mark.parametrize(
    "bad_checks",
    [
        None,
        checks(CRITERIA[:1]),
        checks((*CRITERIA, "Extra")),
        checks(tuple(reversed(CRITERIA))),
        checks(("Tests pass", "Docs were updated")),
        checks(status="ok"),
        [{"criterion": c, "status": "passed", "evidence": "  "} for c in CRITERIA],
        [{"criterion": c, "status": ["passed"], "evidence": "e"} for c in CRITERIA],
        [{"criterion": c, "status": {"passed": True}, "evidence": "e"} for c in CRITERIA],
    ],
    ids=["none", "missing", "extra", "order", "text", "status", "evidence", "list", "object"],
)
def test_step5_completed_needs_one_check_per_criterion(wc: WorkCenter, bad_checks: Any) -> None:
    linear_at(wc, "implement")
    claimed = claim(wc)
    wc.finish_run(claimed, report(acceptanceChecks=bad_checks))
    assert finished_as(wc, claimed) == ("failed", CHECK_PER_CRITERION)


def test_a_status_of_the_wrong_type_is_dropped_like_an_unknown_one(wc: WorkCenter) -> None:
    """An evidence item's or output's status that is a list or an object is ignored (the
    item kept), as "ok" is; before, it escaped as an untyped TypeError (unhashable)."""
    linear_at(wc, "implement")
    claimed = claim(wc)
    after = wc.finish_run(
        claimed,
        report(
            evidence=[{"kind": "test", "label": "pytest", "status": ["passed"]}],
            outputs=[{"kind": "file", "label": "a", "ref": "src/a.py", "status": {"x": 1}}],
        ),
    )
    assert after.status == "completed"
    result = run_of(wc, claimed).result
    assert result is not None
    assert [(e.kind, e.status) for e in (*result.evidence, *result.outputs)] == [
        ("test", None),
        ("file", None),
    ]


def test_a_check_status_of_the_wrong_type_fails_the_run_through_the_worker_protocol(
    wc: WorkCenter,
) -> None:
    """The remote worker's finish normalises the same report the same way."""
    linear_at(wc, "implement")
    claimed = claim(wc)
    bad = [{"criterion": c, "status": ["passed"], "evidence": "e"} for c in CRITERIA]
    finished = wc.worker_protocol.finish(claimed.ref, report(acceptanceChecks=bad))
    assert (finished.outcome, finished.replayed) == ("failed", False)
    assert finished_as(wc, claimed) == ("failed", CHECK_PER_CRITERION)


def test_step5_accepts_deferred_and_not_applicable_before_the_final_gate(wc: WorkCenter) -> None:
    linear_at(wc, "implement")
    claimed = claim(wc)
    mixed = checks(**{CRITERIA[0]: "deferred", CRITERIA[1]: "not_applicable"})
    wc.finish_run(claimed, report(acceptanceChecks=mixed))
    assert finished_as(wc, claimed) == ("completed", None)


def test_step6_deliver_needs_every_check_passed(wc: WorkCenter) -> None:
    linear_at(wc, "deliver")
    claimed = claim(wc)
    wc.finish_run(claimed, report(check_status="deferred"))
    assert finished_as(wc, claimed) == ("failed", FINAL_GATE)


def test_step6_approved_review_without_downstream_stage_is_the_final_gate(
    wc: WorkCenter,
) -> None:
    linear_at(wc, "review", stages=("implement", "review"))
    claimed = claim(wc)
    wc.finish_run(claimed, report(check_status="deferred", reviewDecision="approved"))
    assert finished_as(wc, claimed) == ("failed", FINAL_GATE)


def test_step6_approved_review_before_deliver_is_not_the_final_gate(wc: WorkCenter) -> None:
    linear_at(wc, "review")
    claimed = claim(wc)
    wc.finish_run(claimed, report(check_status="deferred", reviewDecision="approved"))
    assert finished_as(wc, claimed) == ("completed", None)


def test_step6_dynamic_review_before_an_open_deliver_is_not_the_final_gate(
    wc: WorkCenter,
) -> None:
    plan(
        wc,
        create_dynamic(wc).id,
        action_spec("review", "Review it"),
        action_spec("deliver", "Deliver it"),
    )
    claimed = claim(wc)
    assert claimed.action_type == "review"
    wc.finish_run(claimed, report(check_status="deferred", reviewDecision="approved"))
    assert finished_as(wc, claimed) == ("completed", None)


def test_step6_dynamic_review_without_an_open_deliver_is_the_final_gate(wc: WorkCenter) -> None:
    item = plan(
        wc,
        create_dynamic(wc).id,
        action_spec("review", "Review it"),
        action_spec("deliver", "Deliver it"),
    )
    _, deliver = actions_by_sequence(wc, item.id)
    item = wc.plan_actions(
        item.id,
        expected_version=item.version,
        actions=[action_spec("review", "Review once more")],
        supersede_action_ids=[deliver.id, item.plan[0].action_id],
    )
    claimed = claim(wc)
    assert claimed.action_type == "review"
    wc.finish_run(claimed, report(check_status="deferred", reviewDecision="approved"))
    assert finished_as(wc, claimed) == ("failed", FINAL_GATE)


@pytest.mark.parametrize(
    ("stage", "fields", "error"),
    [
        # 2 before 3: a review that patches and does not decide
        ("review", {"contractPatch": {"goal": "x"}, "reviewDecision": None}, ONLY_TRIAGE),
        # 3 before 4: a review that neither decides nor shows evidence
        ("review", {"reviewDecision": None, "evidence": []}, REVIEW_DECIDES),
        # 4 before 5: no evidence and no checks
        ("implement", {"evidence": [], "acceptanceChecks": []}, NEEDS_EVIDENCE),
        # 5 before 6: deliver with a missing and a deferred check
        ("deliver", {"acceptanceChecks": checks(CRITERIA[:1], "deferred")}, CHECK_PER_CRITERION),
    ],
)
def test_normalisation_runs_in_order(
    wc: WorkCenter, stage: str, fields: dict[str, Any], error: str
) -> None:
    linear_at(wc, stage)
    claimed = claim(wc)
    wc.finish_run(claimed, report(**fields))
    assert finished_as(wc, claimed) == ("failed", error)


def test_step1_before_step2_malformed_patch_from_non_triage_is_a_command_error(
    wc: WorkCenter,
) -> None:
    linear_at(wc, "implement")
    claimed = claim(wc)
    with refused(wc, InvalidInput):
        wc.finish_run(claimed, report(contractPatch={"acceptanceCriteria": 5}))


# --- 3.4 linear outcome table --------------------------------------------------------


def test_finish_waiting(wc: WorkCenter) -> None:
    item = create_linear(wc)
    claimed = claim(wc)
    after = wc.finish_run(claimed, report("waiting", waitingReason="Which DB?"))
    assert (after.status, after.current_run_id) == ("waiting", None)
    run = run_of(wc, claimed)
    assert (run.status, run.ended_at) == ("waiting", T0)
    assert run.result is not None and run.result.waiting_reason == "Which DB?"
    waiting = wc.work_item(item.id)
    assert (waiting.status, waiting.current_action_id) == ("waiting", claimed.action_id)


@pytest.mark.parametrize("reason", ["", "   ", " \u200b ", "\u2060", "\u3164"])
def test_a_waiting_outcome_without_a_reason_that_shows_is_refused(
    wc: WorkCenter, reason: str
) -> None:
    """lifecycle.md 1.6; a reason of zero-width characters was taken (found by acceptance
    testing), where limits.md refuses a required text that shows nothing."""
    create_linear(wc)
    claimed = claim(wc)
    with refused(wc, InvalidInput, "a waiting outcome needs a waitingReason"):
        wc.finish_run(claimed, report("waiting", waitingReason=reason))
    assert wc.action(claimed.action_id).status == "running"


def test_finish_keeps_the_run_identity(wc: WorkCenter, clock: FakeClock) -> None:
    create_linear(wc)
    claimed = claim(wc)
    before = run_of(wc, claimed)
    clock.advance(10)
    wc.renew_lease(claimed)
    wc.finish_run(claimed, report())
    after = run_of(wc, claimed)
    identity = (
        "id",
        "ordinal",
        "worker",
        "owner_boot_id",
        "lease_epoch",
        "started_at",
        "generation",
        "spec_hash",
        "attempt",
        "contract_revision",
    )
    assert [getattr(after, f) for f in identity] == [getattr(before, f) for f in identity]
    assert (after.status, after.ended_at) == ("completed", clock.now())


def test_finish_retryable_with_attempts_left(wc: WorkCenter) -> None:
    item = create_linear(wc)
    claimed = claim(wc)
    after = wc.finish_run(claimed, report("retryable"))
    assert (after.status, after.attempt) == ("ready", 1)
    assert run_of(wc, claimed).status == "retryable"
    ready = wc.work_item(item.id)
    assert (ready.status, ready.current_action_id) == ("ready", claimed.action_id)
    assert claim(wc).attempt == 2


def test_finish_retryable_exhausted(wc: WorkCenter) -> None:
    item = create_linear(wc)
    wc.finish_run(claim(wc), report("retryable"))
    after = wc.finish_run(claim(wc), report("retryable"))
    assert after.status == "failed"
    failed = wc.work_item(item.id)
    assert (failed.status, failed.current_action_id) == ("needs_attention", after.id)


def test_finish_failed(wc: WorkCenter) -> None:
    item = create_linear(wc)
    claimed = claim(wc)
    after = wc.finish_run(claimed, report("failed"))
    assert (after.status, after.result_run_id) == ("failed", None)
    failed = wc.work_item(item.id)
    assert (failed.status, failed.current_action_id) == ("needs_attention", after.id)
    assert_nothing_claimable(wc)


def test_finish_completed_moves_to_the_next_stage(wc: WorkCenter) -> None:
    item = create_linear(wc)
    claimed = claim(wc)
    triage = wc.finish_run(
        claimed, report(summary="Plan: patch parser", evidence=["read parser.py"])
    )
    assert (triage.status, triage.result_run_id) == ("completed", claimed.run_id)
    ready = wc.work_item(item.id)
    nxt = current(wc, item.id)
    assert (ready.status, nxt.type, nxt.sequence, nxt.status) == ("ready", "implement", 2, "ready")
    assert nxt.contract_revision == ready.contract_revision
    [entry] = nxt.context
    assert (entry.kind, entry.action_type, entry.run_id, entry.text) == (
        "prior_result",
        "triage",
        claimed.run_id,
        "Plan: patch parser",
    )
    assert [e.label for e in entry.evidence] == ["read parser.py"]


def test_finish_completed_does_not_carry_inputs(wc: WorkCenter) -> None:
    item = create_linear(wc)
    wc.finish_run(claim(wc), report("waiting"))
    waiting = wc.work_item(item.id)
    wc.retry(
        item.id,
        waiting.current_action_id,  # type: ignore[arg-type]
        expected_version=waiting.version,
        answer="PostgreSQL",
    )
    assert "input" in [e.kind for e in current(wc, item.id).context]
    finish_current(wc)
    assert [e.kind for e in current(wc, item.id).context] == ["prior_result", "prior_result"]


def test_finish_completed_last_stage_completes_the_item(wc: WorkCenter) -> None:
    item = linear_at(wc, "deliver")
    claimed = finish_current(wc, summary="Released 1.2")
    deliver = wc.action(claimed.action_id)
    assert (deliver.status, deliver.result_run_id) == ("completed", claimed.run_id)
    done = wc.work_item(item.id)
    assert (done.status, done.current_action_id) == ("done", None)
    assert done.final_result is not None
    assert (done.final_result.summary, done.final_result.evidence_run_ids) == (
        "Released 1.2",
        (claimed.run_id,),
    )
    assert item_events(wc, item.id)[-1] == "WorkItemCompleted"


def test_linear_progression_with_changes_requested(wc: WorkCenter) -> None:
    item = create_linear(wc)
    types: list[str] = []

    def step(**fields: Any) -> Claim:
        claimed = claim(wc)
        types.append(claimed.action_type)
        wc.finish_run(claimed, report(**fields))
        return claimed

    step()  # triage
    step()  # implement
    review = step(reviewDecision="changes_requested", acceptanceChecks=checks(status="failed"))
    back = current(wc, item.id)
    assert (back.type, back.sequence) == ("implement", 4)
    assert back.context[-1].review_decision == "changes_requested"
    assert back.context[-1].run_id == review.run_id
    step()  # implement again
    step(reviewDecision="approved", check_status="deferred")  # not the final gate
    assert current(wc, item.id).type == "deliver"
    step()  # deliver
    assert types == ["triage", "implement", "review", "implement", "review", "deliver"]
    assert wc.work_item(item.id).status == "done"


def test_changes_requested_returns_to_the_latest_editable_stage(wc: WorkCenter) -> None:
    linear_at(wc, "review", stages=("triage", "design", "implement", "test", "review"))
    finish_current(wc, reviewDecision="changes_requested")
    assert claim(wc).action_type == "test"


def test_changes_requested_returns_to_triage_only_when_nothing_else_is_earlier(
    wc: WorkCenter,
) -> None:
    # Never to review or deliver, even when deliver comes right before the review.
    linear_at(wc, "review", stages=("triage", "deliver", "review"))
    finish_current(wc, reviewDecision="changes_requested", check_status="failed")
    assert claim(wc).action_type == "triage"


def test_triage_patch_refines_the_contract_in_the_same_write(wc: WorkCenter) -> None:
    item = create_linear(wc)
    claimed = claim(wc)
    seen = wc.work_item(item.id)
    patch = {
        "title": "  Sharper title  ",
        "goal": "Fix the parser crash",
        "acceptanceCriteria": ["  Crash reproduced  ", "", "Fix covered by a test"],
        "deliveryTarget": "merge",
    }
    new_criteria = ("Crash reproduced", "Fix covered by a test")
    wc.finish_run(claimed, report(contractPatch=patch, acceptanceChecks=checks(new_criteria)))
    assert finished_as(wc, claimed) == ("completed", None)
    after = wc.work_item(item.id)
    assert (after.title, after.goal, after.acceptance_criteria) == (
        "Sharper title",
        "Fix the parser crash",
        new_criteria,
    )
    assert (after.contract_revision, after.delivery_target) == (2, "response")  # never the target
    written = item_events(wc, item.id, after=seen.version)
    assert written[:2] == ["TitleChanged", "ContractRefined"]
    nxt = current(wc, item.id)
    assert (nxt.type, nxt.contract_revision) == ("implement", 2)
    assert "Fix the parser crash" in nxt.brief.objective
    assert run_of(wc, claimed).contract_revision == 1  # the triage Run ran under revision 1


def test_triage_patch_checks_are_against_the_patched_criteria(wc: WorkCenter) -> None:
    item = create_linear(wc)
    claimed = claim(wc)
    wc.finish_run(claimed, report(contractPatch={"acceptanceCriteria": ["Only this"]}))
    assert finished_as(wc, claimed) == ("failed", CHECK_PER_CRITERION)
    after = wc.work_item(item.id)
    assert (after.acceptance_criteria, after.contract_revision) == (CRITERIA, 1)


def test_triage_patch_of_the_title_alone_keeps_the_revision(wc: WorkCenter) -> None:
    item = create_linear(wc)
    wc.finish_run(claim(wc), report(contractPatch={"title": "Renamed"}))
    after = wc.work_item(item.id)
    assert (after.title, after.contract_revision) == ("Renamed", 1)


# --- 3.4 dynamic outcome mapping -------------------------------------------------------


def test_dynamic_completed_hands_the_turn_to_the_coordinator(wc: WorkCenter) -> None:
    item = plan(wc, create_dynamic(wc).id)
    claimed = claim(wc)
    after = wc.finish_run(claimed, report())
    assert (after.status, after.result_run_id) == ("completed", claimed.run_id)
    derived = wc.work_item(item.id)
    assert (derived.status, derived.current_action_id) == ("running", None)


@pytest.mark.parametrize(
    ("outcome", "action_status", "item_status"),
    [
        ("waiting", "waiting", "waiting"),
        ("retryable", "ready", "ready"),
        ("failed", "failed", "needs_attention"),
    ],
)
def test_dynamic_outcomes_derive_the_item_status(
    wc: WorkCenter, outcome: str, action_status: str, item_status: str
) -> None:
    item = plan(wc, create_dynamic(wc).id)
    claimed = claim(wc)
    assert wc.finish_run(claimed, report(outcome)).status == action_status
    derived = wc.work_item(item.id)
    assert (derived.status, derived.current_action_id) == (item_status, claimed.action_id)


def test_dynamic_retryable_exhausted_fails(wc: WorkCenter) -> None:
    item = plan(wc, create_dynamic(wc).id, action_spec(maxAttempts=1))
    assert wc.finish_run(claim(wc), report("retryable")).status == "failed"
    assert wc.work_item(item.id).status == "needs_attention"


def test_finish_retryable_requeues_deliver(wc: WorkCenter) -> None:
    # ADR-0007: a retryable outcome follows attempts only, deliver included.
    linear_at(wc, "deliver")
    assert wc.finish_run(claim(wc), report("retryable")).status == "ready"


# --- fencing (invariants 3 and 4) -----------------------------------------------------


def _assert_fenced(wc: WorkCenter, stale: Claim, why: str) -> None:
    """Every Run command of ``stale`` refused, saying ``why`` (a pattern)."""
    with refused(wc, StaleRun, why):
        wc.finish_run(stale, report())
    with refused(wc, StaleRun, why):
        wc.interrupt(stale)
    assert_renew_refused(wc, stale)


def test_fence_refuses_a_stale_epoch(wc: WorkCenter) -> None:
    create_linear(wc)
    first = claim(wc)
    wc.interrupt(first)
    second = claim(wc)
    _assert_fenced(wc, first, rf"Run {first.run_id} has ended \(interrupted: interrupted\)")
    _assert_fenced(
        wc,
        dataclasses.replace(second, lease_epoch=first.lease_epoch),
        f"at lease epoch {second.lease_epoch}, not by this fence"
        f" .* lease epoch {first.lease_epoch}",
    )
    assert wc.finish_run(second, report()).status == "completed"


def test_fence_refuses_another_boot_id(wc: WorkCenter) -> None:
    create_linear(wc)
    claimed = claim(wc)
    _assert_fenced(
        wc,
        dataclasses.replace(claimed, boot_id="boot-other"),
        f"held by boot id '{claimed.boot_id}' .* not by this fence \\(boot id 'boot-other'",
    )
    assert wc.renew_lease(claimed) is True


def test_fence_refuses_another_run_id(wc: WorkCenter) -> None:
    create_linear(wc)
    first = claim(wc)
    wc.interrupt(first)
    second = claim(wc)
    _assert_fenced(
        wc, dataclasses.replace(second, run_id=first.run_id), f"Run {first.run_id} is held by"
    )


def test_fence_refuses_finish_after_lease_expiry(wc: WorkCenter, clock: FakeClock) -> None:
    create_linear(wc)
    claimed = claim(wc)
    clock.advance(60)
    expired = f"Run {claimed.run_id}'s lease expired at {claimed.expires_at.isoformat()}"
    with refused(wc, StaleRun, re.escape(expired)):
        wc.finish_run(claimed, report())
    assert_renew_refused(wc, claimed)
    assert run_of(wc, claimed).status == "running"  # only recovery or interrupt ends it now


def test_fence_of_a_cancelled_items_run_says_so(wc: WorkCenter) -> None:
    plan(wc, create_dynamic(wc).id)
    claimed = claim(wc)
    wc.cancel(claimed.work_item_id, reason="not needed")
    run = run_of(wc, claimed)
    _assert_fenced(wc, claimed, rf"Run {claimed.run_id} has ended \({run.status}")


def test_finished_run_never_changes(wc: WorkCenter) -> None:
    item = plan(wc, create_dynamic(wc).id)
    claimed = claim(wc)
    wc.finish_run(claimed, report("failed"))
    finished = run_of(wc, claimed)
    _assert_fenced(wc, claimed, r"has ended \(failed\)")
    seen = wc.work_item(item.id)
    wc.retry(item.id, claimed.action_id, expected_version=seen.version)  # a new generation
    wc.finish_run(claim(wc), report())
    assert run_of(wc, claimed) == finished


# --- 3.5 recovery --------------------------------------------------------------------


def test_recover_expired_lease(wc: WorkCenter, clock: FakeClock) -> None:
    item = create_linear(wc)
    claimed = claim(wc)
    clock.advance(59)
    count = wc.event_count()
    assert wc.recover() == []  # still live
    assert wc.event_count() == count
    clock.advance(1)
    assert wc.recover() == [claimed.run_id]
    run = run_of(wc, claimed)
    assert (run.status, run.end_reason, run.ended_at) == (
        "interrupted",
        RECOVERED_REASON,
        clock.now(),
    )
    action = wc.action(claimed.action_id)
    assert (action.status, action.current_run_id) == ("ready", None)
    recovered = wc.work_item(item.id)
    assert (recovered.status, recovered.current_action_id) == ("ready", claimed.action_id)
    event = wc.action_history(claimed.action_id)[-1]
    assert (type(event).__name__, event.retryable) == ("RunInterrupted", True)  # type: ignore[attr-defined]
    _assert_fenced(wc, claimed, f"has ended \\(interrupted: {RECOVERED_REASON}\\)")
    assert wc.recover() == []


def test_recover_never_ends_a_live_run_of_another_boot_or_the_same_name(
    wc: WorkCenter, location: str, clock: FakeClock
) -> None:
    """ADR-0048: a process starting with a new boot id, under the same worker name or
    another, recovers nothing while the lease holds; once it has run out, the Run is
    recovered and claimed again under a new epoch, and the old claim is fenced."""
    item = create_linear(wc)
    claimed = claim(wc)
    restarted = WorkCenter.open(location, clock=clock, boot_id="boot-2")
    try:
        count = restarted.event_count()
        assert restarted.recover() == []
        assert restarted.claim_next(WORKER) is None  # the same name claims nothing either
        assert restarted.event_count() == count
        assert wc.renew_lease(claimed)  # the first process still holds its Run
        clock.advance(60)
        assert restarted.recover() == [claimed.run_id]
        assert restarted.work_item(item.id).status == "ready"
        again = restarted.claim_next(WORKER)
        assert again is not None
        assert (again.boot_id, again.lease_epoch) == ("boot-2", claimed.lease_epoch + 1)
    finally:
        restarted.close()
    _assert_fenced(
        wc, claimed, f"Run {claimed.run_id} has ended \\(interrupted: {RECOVERED_REASON}"
    )


def test_recover_deliver_fails_it(wc: WorkCenter, clock: FakeClock) -> None:
    item = linear_at(wc, "deliver")
    claimed = claim(wc)
    clock.advance(61)
    wc.recover()
    assert wc.action(claimed.action_id).status == "failed"  # invariant 12
    assert wc.work_item(item.id).status == "needs_attention"
    assert wc.action_history(claimed.action_id)[-1].retryable is False  # type: ignore[attr-defined]


def test_recover_exhausted_attempts_fails_the_action(wc: WorkCenter, clock: FakeClock) -> None:
    item = create_linear(wc)
    wc.interrupt(claim(wc))
    claimed = claim(wc)
    clock.advance(61)
    wc.recover()
    assert wc.action(claimed.action_id).status == "failed"
    assert wc.work_item(item.id).status == "needs_attention"


def test_recover_dynamic_derives_the_item_status(wc: WorkCenter, clock: FakeClock) -> None:
    item = plan(wc, create_dynamic(wc).id, action_spec(maxAttempts=1))
    claimed = claim(wc)
    clock.advance(61)
    wc.recover()
    derived = wc.work_item(item.id)
    assert (derived.status, derived.current_action_id) == ("needs_attention", claimed.action_id)
