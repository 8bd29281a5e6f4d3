"""Conflict classes (spec README; ADR-0004): an expected version that moved is refused
only when a later WorkItem event belongs to the command's class.

Each command shows both sides: a benign interleaving goes through, a conflicting
one is refused with ``VersionConflict`` and writes nothing.

Resume has no benign side to show: once an item is cancelled, no command but
resume appends to its stream (update, start, guide, retry, plan, complete and
claim all refuse a cancelled item), so every event after a cancelled version
the user saw is a resumption, itself in the class.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

import pytest
from conftest import (
    BACKENDS,
    action_spec,
    actions_by_sequence,
    checks,
    claim,
    create_dynamic,
    create_linear,
    current,
    plan,
    refused,
    report,
    run_of,
)

from workcenter.application import WorkCenter
from workcenter.domain import work_item as wi
from workcenter.domain.errors import CommandRefused, VersionConflict


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """Every test here runs on SQLite and on PostgreSQL."""
    return str(request.param)


def _conflict(wc: WorkCenter) -> Any:
    return refused(wc, VersionConflict)


# --- update_contract: conflicts with contract changes, cancellation, completion -------


def test_update_goes_through_claim_renew_and_finish(wc: WorkCenter) -> None:
    item = create_linear(wc)
    seen = wc.work_item(item.id)
    claimed = claim(wc)
    assert wc.renew_lease(claimed)
    wc.finish_run(claimed, report())  # triage done, implement current
    implement = current(wc, item.id)
    assert wc.work_item(item.id).version > seen.version
    updated = wc.update_contract(item.id, expected_version=seen.version, goal="Refined goal")
    assert (updated.goal, updated.contract_revision) == ("Refined goal", 2)
    assert wc.action(implement.id).status == "superseded"  # decided on the latest state


def test_update_conflicts_with_a_title_change(wc: WorkCenter) -> None:
    """A title is part of the contract: an edit from before it is refused (ADR-0004)."""
    item = create_linear(wc)
    wc.update_contract(item.id, expected_version=item.version, title="Renamed")
    with _conflict(wc) as info:
        wc.update_contract(item.id, expected_version=item.version, goal="Refined goal")
    assert info.value.conflicting == ["TitleChanged"]


def test_update_goes_through_guidance(wc: WorkCenter) -> None:
    item = create_linear(wc)
    wc.guide(item.id, item.current_action_id, expected_version=item.version, guidance="Hint")  # type: ignore[arg-type]
    updated = wc.update_contract(item.id, expected_version=item.version, goal="Refined goal")
    assert updated.contract_revision == 2


def test_update_conflicts_with_another_contract_change(wc: WorkCenter) -> None:
    item = create_linear(wc)
    wc.update_contract(item.id, expected_version=item.version, goal="First writer")
    with _conflict(wc) as info:
        wc.update_contract(item.id, expected_version=item.version, goal="Second writer")
    error = info.value
    assert isinstance(error, VersionConflict)
    assert error.expected == item.version
    assert error.actual == wc.work_item(item.id).version
    assert error.conflicting == ["ContractRefined"]
    assert wc.work_item(item.id).goal == "First writer"


def test_update_conflicts_with_a_triage_patch(wc: WorkCenter) -> None:
    item = create_linear(wc)
    seen = wc.work_item(item.id)
    patched = ["Crash reproduced"]
    claimed = claim(wc)
    wc.finish_run(
        claimed,
        report(contractPatch={"acceptanceCriteria": patched}, acceptanceChecks=checks(patched)),
    )
    with _conflict(wc) as info:
        wc.update_contract(item.id, expected_version=seen.version, goal="Refined goal")
    assert "ContractRefined" in info.value.conflicting
    assert wc.work_item(item.id).acceptance_criteria == ("Crash reproduced",)


def test_update_conflicts_with_cancellation(wc: WorkCenter) -> None:
    item = create_linear(wc)
    wc.cancel(item.id)
    with _conflict(wc) as info:
        wc.update_contract(item.id, expected_version=item.version, goal="Too late")
    assert "WorkItemCancelled" in info.value.conflicting


def test_update_conflicts_with_completion(wc: WorkCenter) -> None:
    item = create_linear(wc, stages=("deliver",))
    wc.finish_run(claim(wc), report())
    with _conflict(wc) as info:
        wc.update_contract(item.id, expected_version=item.version, title="Too late")
    assert info.value.conflicting == ["WorkItemCompleted"]


@pytest.mark.parametrize("offset", [1, None])
def test_unknown_expected_version_conflicts(wc: WorkCenter, offset: int | None) -> None:
    item = create_linear(wc)
    expected = item.version + 1 if offset else 0
    with _conflict(wc) as info:
        wc.update_contract(item.id, expected_version=expected, goal="x")
    assert info.value.conflicting == ["unknown version"]
    assert f"is at version {item.version} and never had version {expected}" in str(info.value)


# --- start: conflicts with another start or a cancellation -----------------------------


def test_start_goes_through_a_title_change(wc: WorkCenter) -> None:
    item = create_dynamic(wc, start=False)
    wc.update_contract(item.id, expected_version=item.version, title="Renamed")
    assert wc.start(item.id, expected_version=item.version).status == "running"


def test_start_conflicts_with_another_start(wc: WorkCenter) -> None:
    item = create_linear(wc, start=False)
    wc.start(item.id, expected_version=item.version)
    with _conflict(wc):
        wc.start(item.id, expected_version=item.version)
    assert len(wc.work_item(item.id).plan) == 1


# --- resume: conflicts with contract changes, cancellation, resumption, completion ----


def _resume(wc: WorkCenter, item_id: UUID, seen: int) -> wi.WorkItemState:
    """Resume from WorkItem version ``seen``, the ledger as it is now."""
    return wc.resume(
        item_id, expected_version=seen, expected_ledger_version=wc.ledger(item_id).version
    )


def test_resume_conflicts_with_another_resume(wc: WorkCenter) -> None:
    item = plan(wc, create_dynamic(wc).id)
    cancelled = wc.cancel(item.id)
    _resume(wc, item.id, cancelled.version)
    with _conflict(wc) as info:
        _resume(wc, item.id, cancelled.version)
    assert "WorkItemResumed" in info.value.conflicting


def test_resume_conflicts_with_a_cancel_after_what_was_seen(wc: WorkCenter) -> None:
    item = create_linear(wc)
    first = wc.cancel(item.id)
    _resume(wc, item.id, first.version)
    wc.cancel(item.id)  # cancelled again: the user's view predates this cancellation
    with _conflict(wc) as info:
        _resume(wc, item.id, first.version)
    assert info.value.conflicting[0] == "WorkItemResumed"
    assert "WorkItemCancelled" in info.value.conflicting


# --- retry: contract or lifecycle changes conflict; the generation is exact -----------


def test_retry_goes_through_the_claim_and_finish_it_answers(wc: WorkCenter) -> None:
    item = create_linear(wc)
    seen = wc.work_item(item.id)
    target = current(wc, item.id)
    wc.finish_run(claim(wc), report("failed"))  # after what the user saw
    retried = wc.retry(
        item.id, target.id, expected_version=seen.version, expected_generation=target.generation
    )
    assert retried.status == "ready"
    assert current(wc, item.id).sequence == 2


def test_retry_goes_through_a_title_change(wc: WorkCenter) -> None:
    item = plan(wc, create_dynamic(wc).id)
    wc.finish_run(claim(wc), report("failed"))
    seen = wc.work_item(item.id)
    wc.update_contract(item.id, expected_version=seen.version, title="Renamed")
    retried = wc.retry(item.id, item.plan[0].action_id, expected_version=seen.version)
    assert retried.status == "ready"


def test_retry_conflicts_with_a_contract_change(wc: WorkCenter) -> None:
    item = create_linear(wc)
    wc.finish_run(claim(wc), report("failed"))
    seen = wc.work_item(item.id)
    wc.update_contract(item.id, expected_version=seen.version, goal="Refined goal")
    with _conflict(wc):
        wc.retry(item.id, seen.current_action_id, expected_version=seen.version)  # type: ignore[arg-type]


def test_retry_conflicts_with_cancel_and_resume(wc: WorkCenter) -> None:
    item = create_linear(wc)
    wc.finish_run(claim(wc), report("failed"))
    seen = wc.work_item(item.id)
    cancelled = wc.cancel(item.id)
    _resume(wc, item.id, cancelled.version)
    with _conflict(wc):
        wc.retry(item.id, seen.current_action_id, expected_version=seen.version)  # type: ignore[arg-type]


def test_retry_twice_on_the_same_generation_is_refused(wc: WorkCenter) -> None:
    item = plan(wc, create_dynamic(wc).id)
    wc.finish_run(claim(wc), report("failed"))
    seen = wc.work_item(item.id)
    target = wc.action(item.plan[0].action_id)
    wc.retry(item.id, target.id, expected_version=seen.version, expected_generation=1)
    wc.finish_run(claim(wc), report("failed"))  # failed again, in generation 2
    # Only status events came after ``seen``: the exact generation is what refuses it.
    with refused(wc, CommandRefused, "Action changed before input was applied"):
        wc.retry(item.id, target.id, expected_version=seen.version, expected_generation=1)


# --- guide: same class as retry ------------------------------------------------------------


def test_guide_goes_through_a_claim_and_renewal(wc: WorkCenter) -> None:
    item = create_linear(wc)
    claimed = claim(wc)
    assert wc.renew_lease(claimed)
    guided = wc.guide(
        item.id, claimed.action_id, expected_version=item.version, guidance="Use the fast path"
    )
    assert run_of(wc, claimed).status == "superseded"  # decided on the running Action
    assert guided.status == "ready"


def test_guide_goes_through_another_actions_outcome(wc: WorkCenter) -> None:
    item = plan(wc, create_dynamic(wc).id, action_spec(objective="a"), action_spec(objective="b"))
    _, b = actions_by_sequence(wc, item.id)
    seen = wc.work_item(item.id)
    wc.finish_run(claim(wc), report())  # a completed
    wc.guide(item.id, b.id, expected_version=seen.version, expected_generation=1, guidance="Hint")
    assert wc.action(b.id).generation == 2


def test_guide_conflicts_with_a_contract_change(wc: WorkCenter) -> None:
    item = plan(wc, create_dynamic(wc).id)
    wc.update_contract(item.id, expected_version=item.version, acceptance_criteria=["New"])
    with _conflict(wc) as info:
        wc.guide(item.id, item.plan[0].action_id, expected_version=item.version, guidance="x")
    assert info.value.conflicting == ["ContractRefined"]


def test_guide_conflicts_with_cancellation(wc: WorkCenter) -> None:
    item = create_linear(wc)
    wc.cancel(item.id)
    with _conflict(wc):
        wc.guide(item.id, item.current_action_id, expected_version=item.version, guidance="x")  # type: ignore[arg-type]


def test_guide_twice_on_the_same_generation_is_refused(wc: WorkCenter) -> None:
    item = plan(wc, create_dynamic(wc).id)
    action_id = item.plan[0].action_id
    wc.guide(item.id, action_id, expected_version=item.version, expected_generation=1, guidance="a")
    with refused(wc, CommandRefused, "Action changed before guidance was applied"):
        wc.guide(
            item.id, action_id, expected_version=item.version, expected_generation=1, guidance="b"
        )


# --- plan_actions and complete: strict (any later WorkItem event conflicts) -------------


def test_plan_goes_through_work_on_other_items(wc: WorkCenter) -> None:
    item = create_dynamic(wc)
    other = create_linear(wc)
    claimed = claim(wc)  # the other item's triage
    assert wc.renew_lease(claimed)
    wc.finish_run(claimed, report())
    assert wc.work_item(other.id).status == "ready"
    planned = wc.plan_actions(item.id, expected_version=item.version, actions=[action_spec()])
    assert planned.status == "ready"


def test_plan_conflicts_with_a_run_outcome(wc: WorkCenter) -> None:
    item = plan(wc, create_dynamic(wc).id)
    wc.finish_run(claim(wc), report("failed"))
    with _conflict(wc) as info:
        wc.plan_actions(item.id, expected_version=item.version, actions=[action_spec("test")])
    assert "ActionStatusRecorded" in info.value.conflicting


def test_plan_conflicts_even_with_a_title_change(wc: WorkCenter) -> None:
    item = create_dynamic(wc)
    wc.update_contract(item.id, expected_version=item.version, title="Renamed")
    with _conflict(wc) as info:
        wc.plan_actions(item.id, expected_version=item.version, actions=[action_spec()])
    assert info.value.conflicting == ["TitleChanged"]


def test_plan_conflicts_with_another_plan(wc: WorkCenter) -> None:
    item = create_dynamic(wc)
    wc.plan_actions(item.id, expected_version=item.version, actions=[action_spec(objective="a")])
    with _conflict(wc):
        wc.plan_actions(
            item.id, expected_version=item.version, actions=[action_spec(objective="b")]
        )
    assert len(wc.work_item(item.id).plan) == 1


def _proven(wc: WorkCenter) -> tuple[wi.WorkItemState, dict[str, Any]]:
    item = plan(wc, create_dynamic(wc).id)
    claimed = claim(wc)
    wc.finish_run(claimed, report())
    run = str(claimed.run_id)
    payload = {
        "summary": "Done",
        "acceptanceResults": [
            {"criterion": c, "status": "passed", "evidenceRunIds": [run]}
            for c in wc.work_item(item.id).acceptance_criteria
        ],
        "evidenceRunIds": [run],
    }
    return wc.work_item(item.id), payload


def test_complete_goes_through_work_on_other_items(wc: WorkCenter) -> None:
    item, payload = _proven(wc)
    create_linear(wc)
    claimed = claim(wc)
    assert wc.renew_lease(claimed)
    wc.interrupt(claimed)
    done = wc.complete(item.id, expected_version=item.version, completion=payload)
    assert done.status == "done"


def test_complete_conflicts_even_with_a_title_change(wc: WorkCenter) -> None:
    item, payload = _proven(wc)
    wc.update_contract(item.id, expected_version=item.version, title="Renamed")
    with _conflict(wc):
        wc.complete(item.id, expected_version=item.version, completion=payload)


def test_complete_conflicts_with_a_new_plan(wc: WorkCenter) -> None:
    item = plan(wc, create_dynamic(wc).id, action_spec(objective="a"), action_spec(objective="b"))
    first = claim(wc)
    wc.finish_run(first, report())
    second = claim(wc)
    wc.finish_run(second, report("failed", acceptanceChecks=None))
    seen = wc.work_item(item.id)
    run = str(first.run_id)
    payload = {
        "summary": "Done",
        "acceptanceResults": [
            {"criterion": c, "status": "passed", "evidenceRunIds": [run]}
            for c in seen.acceptance_criteria
        ],
        "evidenceRunIds": [run],
        "closeActions": [{"actionId": str(second.action_id), "reason": "not needed"}],
    }
    # Another decision closed the blocker and planned more work meanwhile.
    wc.plan_actions(
        item.id,
        expected_version=seen.version,
        actions=[action_spec("write", "Write the summary")],
        close_actions=[{"actionId": str(second.action_id), "reason": "replaced"}],
        goal_refs={"blockerActionIds": [str(second.action_id)]},
    )
    with _conflict(wc):
        wc.complete(item.id, expected_version=seen.version, completion=payload)
    assert wc.work_item(item.id).status == "ready"


def test_complete_conflicts_with_cancellation(wc: WorkCenter) -> None:
    item, payload = _proven(wc)
    wc.cancel(item.id)
    with _conflict(wc) as info:
        wc.complete(item.id, expected_version=item.version, completion=payload)
    assert info.value.conflicting == ["WorkItemCancelled"]
