"""WorkItem commands through the service layer (lifecycle.md 3.1, 3.2, 3.6).

One test per transition row, refusals included; every refusal checks the typed
error and that nothing was written.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from conftest import (
    BACKENDS,
    CRITERIA,
    action_events,
    action_spec,
    actions_by_sequence,
    assert_nothing_claimable,
    assert_renew_refused,
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

from workcenter.application import WorkCenter
from workcenter.domain import bounds
from workcenter.domain import work_item as wi
from workcenter.domain.errors import (
    CommandRefused,
    InvalidInput,
    NotFound,
    StaleRun,
    WorkcenterError,
)
from workcenter.service_layer.handlers import work_item as work_item_handlers


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """Every test here runs on SQLite and on PostgreSQL."""
    return str(request.param)


def _fail_current(wc: WorkCenter, outcome: str = "failed") -> None:
    wc.finish_run(claim(wc), report(outcome))


# --- 3.1 create -------------------------------------------------------------------


def test_create_dynamic_is_draft(wc: WorkCenter) -> None:
    item = create_dynamic(wc, start=False)
    assert (item.mode, item.status, item.contract_revision) == ("dynamic", "draft", 1)
    assert item.plan == () and item.current_action_id is None
    assert item.acceptance_criteria == CRITERIA and item.delivery_target == "response"
    assert item_events(wc, item.id) == ["WorkItemCreated"]


def test_create_dynamic_started_runs_with_no_action(wc: WorkCenter) -> None:
    item = create_dynamic(wc, start=True)
    # No Action yet: it is the Coordinator's turn.
    assert (item.status, item.current_action_id, item.plan) == ("running", None, ())
    # Created started (ADR-0046); the Coordinator's turn is a status no event implies.
    assert item_events(wc, item.id) == ["WorkItemCreated", "StatusChanged"]
    assert wc.history(item.id)[0].started  # type: ignore[attr-defined]


def test_create_linear_started_is_ready_with_first_stage_action(wc: WorkCenter) -> None:
    item = create_linear(wc, start=True)
    assert (item.mode, item.status, item.stages) == (
        "linear",
        "ready",
        ("triage", "implement", "review", "deliver"),
    )
    action = current(wc, item.id)
    assert (action.type, action.status, action.sequence) == ("triage", "ready", 1)
    assert (action.contract_revision, action.generation, action.attempt, action.lease_epoch) == (
        1,
        1,
        0,
        0,
    )
    assert action.max_attempts == 2 and action.runs == ()


def test_create_linear_without_start_is_draft(wc: WorkCenter) -> None:
    item = create_linear(wc, start=False)
    assert (item.status, item.plan, item.current_action_id) == ("draft", (), None)


def test_create_linear_with_custom_stages(wc: WorkCenter) -> None:
    item = create_linear(wc, stages=("implement", "review"))
    assert item.stages == ("implement", "review")
    assert current(wc, item.id).type == "implement"


def test_create_normalises_the_contract(wc: WorkCenter) -> None:
    item = wc.create_work_item(
        title="  " + "t" * 200 + " ",
        goal="  the goal  ",
        acceptance_criteria=["  one ", "", "   ", "two"],
    )
    assert item.title == "t" * 200
    assert item.goal == "the goal"
    assert item.acceptance_criteria == ("one", "two")
    assert item.delivery_target is None


@pytest.mark.parametrize(
    "fields",
    [
        {"title": ""},
        {"title": "   "},
        {"goal": ""},
        {"goal": "  "},
        {"acceptance_criteria": "not a list"},
        {"acceptance_criteria": ["ok", 3]},
        {"delivery_target": "email"},
        {"mode": "graph"},
        {"mode": "linear", "stages": ("Triage", "implement")},
        {"mode": "linear", "stages": ("triage", "")},
        {"mode": "linear", "stages": ("review", "deliver")},
        {"mode": "linear", "stages": ("deliver", "review")},
    ],
)
def test_create_refuses_invalid_input(wc: WorkCenter, fields: dict[str, object]) -> None:
    args: dict[str, object] = {"title": "T", "goal": "G", "acceptance_criteria": ["c"]} | fields
    with refused(wc, InvalidInput):
        wc.create_work_item(**args)  # type: ignore[arg-type]
    assert wc.list_work_items() == []


@pytest.mark.parametrize("stages", [0, "", b"", False, 0.0, {}, "implement", 3])
def test_create_refuses_stages_that_are_no_list(wc: WorkCenter, stages: object) -> None:
    """Only stages left out (None) mean the default ones: a falsy value of another type
    once passed for them silently."""
    with refused(wc, InvalidInput, "stages"):
        wc.create_work_item(
            title="T",
            goal="G",
            acceptance_criteria=["c"],
            mode="linear",
            stages=stages,  # type: ignore[arg-type]
        )
    assert wc.list_work_items() == []


@pytest.mark.parametrize(
    "name",
    ["\u200b", "\ufeff", "\u3164", "a\nb", "a\x00b", "\x1b[31mred", "A", " a"],
    ids=["zero-width", "BOM", "filler", "newline", "NUL", "escape", "upper", "padded"],
)
def test_a_stage_name_shows_what_it_is(wc: WorkCenter, name: str) -> None:
    """A linear stage's name is printable, shows something and is lowercase, as over
    HTTP: the Python API took control and invisible characters, a NUL among them (found
    by acceptance testing), which a Run's action type then carried."""
    with refused(wc, InvalidInput, "linear stages must be lowercase names of printable"):
        wc.create_work_item(
            title="T", goal="G", acceptance_criteria=["c"], mode="linear", stages=[name]
        )
    create_linear(wc, stages=("code review",))  # a space inside is a name, as over HTTP


def test_create_linear_without_stages_has_the_default_ones(wc: WorkCenter) -> None:
    """Only stages left out (None) mean the default ones."""
    item = wc.create_work_item(title="T", goal="G", acceptance_criteria=["c"], mode="linear")
    assert item.stages == wi.DEFAULT_STAGES


@pytest.mark.parametrize("stages", [[], ()])
def test_create_linear_refuses_an_empty_list_of_stages(wc: WorkCenter, stages: object) -> None:
    """An empty list once gave the default stages without a word: a caller who built
    the list and ended with none is told, not given four stages it did not ask for."""
    with refused(wc, InvalidInput, "at least one stage: give stages or leave them out"):
        wc.create_work_item(
            title="T",
            goal="G",
            acceptance_criteria=["c"],
            mode="linear",
            stages=stages,  # type: ignore[arg-type]
        )
    assert wc.list_work_items() == []


@pytest.mark.parametrize("stages", [None, [], ()])
def test_a_dynamic_item_takes_stages_left_out_or_an_empty_list(
    wc: WorkCenter, stages: object
) -> None:
    """A dynamic item has no stages: an empty list asks for none (docs/limits.md)."""
    item = wc.create_work_item(
        title="T",
        goal="G",
        acceptance_criteria=["c"],
        mode="dynamic",
        stages=stages,  # type: ignore[arg-type]
    )
    assert item.stages == ()


# --- 3.1 update -------------------------------------------------------------------


def test_update_title_only_is_not_a_contract_change(wc: WorkCenter) -> None:
    item = create_linear(wc)
    before = current(wc, item.id)
    updated = wc.update_contract(item.id, expected_version=item.version, title="  New title ")
    assert updated.title == "New title"
    assert updated.contract_revision == 1
    assert item_events(wc, item.id, after=item.version) == ["TitleChanged"]
    assert wc.action(before.id) == before  # the open Action is untouched


def test_update_with_nothing_changed_writes_nothing(wc: WorkCenter) -> None:
    item = create_linear(wc)
    count = wc.event_count()
    same = wc.update_contract(item.id, expected_version=item.version, goal=item.goal)
    assert same.version == item.version
    assert wc.event_count() == count


def test_update_contract_linear_supersedes_and_restarts_from_first_stage(
    wc: WorkCenter,
) -> None:
    item = create_linear(wc)
    wc.finish_run(claim(wc), report())  # triage done, implement is current
    implement = current(wc, item.id)
    item = wc.work_item(item.id)
    updated = wc.update_contract(
        item.id, expected_version=item.version, acceptance_criteria=["Only this"]
    )
    assert updated.contract_revision == 2
    assert updated.acceptance_criteria == ("Only this",)
    assert "ContractRefined" in item_events(wc, item.id, after=item.version)
    old = wc.action(implement.id)
    assert old.status == "superseded"
    assert old.lease_epoch == implement.lease_epoch + 1  # invariant 5
    fresh = current(wc, item.id)
    assert (fresh.type, fresh.status, fresh.contract_revision) == ("triage", "ready", 2)
    assert fresh.sequence == 3
    assert (updated.status, updated.current_action_id) == ("ready", fresh.id)
    history = wc.history(item.id)
    refined = next(e for e in history if type(e).__name__ == "ContractRefined")
    assert refined.changed_fields == ("acceptance_criteria",)  # type: ignore[attr-defined]


def test_update_contract_linear_invalidates_the_running_run(wc: WorkCenter) -> None:
    item = create_linear(wc)
    claimed = claim(wc)
    updated = wc.update_contract(
        item.id, expected_version=wc.work_item(item.id).version, goal="Another goal"
    )
    run = run_of(wc, claimed)
    assert (run.status, run.end_reason) == ("superseded", "contract changed")
    assert run.ended_at is not None
    assert wc.action(claimed.action_id).lease_epoch == claimed.lease_epoch + 1
    assert updated.status == "ready"
    # The worker can no longer advance the item (invariant 5).
    with refused(wc, StaleRun):
        wc.finish_run(claimed, report())
    assert_renew_refused(wc, claimed)


def test_update_contract_linear_from_draft_makes_it_ready(wc: WorkCenter) -> None:
    item = create_linear(wc, start=False)
    updated = wc.update_contract(item.id, expected_version=item.version, goal="Refined")
    assert updated.status == "ready"
    assert current(wc, item.id).type == "triage"


def test_update_contract_linear_from_needs_attention_makes_it_ready(wc: WorkCenter) -> None:
    item = create_linear(wc)
    _fail_current(wc)
    failed = wc.work_item(item.id)
    assert failed.status == "needs_attention"
    updated = wc.update_contract(item.id, expected_version=failed.version, goal="Refined")
    assert updated.status == "ready"
    assert wc.action(failed.plan[0].action_id).status == "superseded"


def test_update_contract_dynamic_supersedes_every_open_action(wc: WorkCenter) -> None:
    item = create_dynamic(wc)
    plan(
        wc,
        item.id,
        action_spec(objective="a"),
        action_spec(objective="b"),
        action_spec(objective="c"),
        action_spec(objective="d"),
    )
    a, b, c, _ = actions_by_sequence(wc, item.id)
    wc.finish_run(claim(wc), report())  # a completed
    wc.finish_run(claim(wc), report("failed"))  # b failed
    wc.finish_run(claim(wc), report("waiting"))  # c waiting; d stays ready
    seen = wc.work_item(item.id)
    before = {x.id: x for x in actions_by_sequence(wc, item.id)}
    updated = wc.update_contract(item.id, expected_version=seen.version, goal="Refined goal")
    after = {x.id: x for x in actions_by_sequence(wc, item.id)}
    assert after[a.id] == before[a.id]  # finished work is history
    for action_id in (b.id, c.id, _.id):
        assert after[action_id].status == "superseded"
        assert after[action_id].lease_epoch == before[action_id].lease_epoch + 1
    # Nothing open: the Coordinator's turn.
    assert (updated.status, updated.current_action_id, updated.contract_revision) == (
        "running",
        None,
        2,
    )


def test_update_contract_dynamic_draft_stays_draft(wc: WorkCenter) -> None:
    # ADR-0007: start stays explicit for dynamic items.
    item = create_dynamic(wc, start=False)
    updated = wc.update_contract(item.id, expected_version=item.version, goal="Refined")
    assert (updated.status, updated.contract_revision) == ("draft", 2)


def test_update_delivery_target_is_a_contract_change(wc: WorkCenter) -> None:
    item = create_dynamic(wc, delivery_target=None)
    plan(wc, item.id)
    seen = wc.work_item(item.id)
    updated = wc.update_contract(
        item.id, expected_version=seen.version, delivery_target="pull_request"
    )
    assert (updated.delivery_target, updated.contract_revision) == ("pull_request", 2)
    assert wc.action(seen.plan[0].action_id).status == "superseded"


def test_update_refuses_invalid_contract(wc: WorkCenter) -> None:
    item = create_linear(wc)
    with refused(wc, InvalidInput):
        wc.update_contract(item.id, expected_version=item.version, goal="   ")
    with refused(wc, InvalidInput):
        wc.update_contract(item.id, expected_version=item.version, delivery_target="email")


def test_update_refuses_cancelled_item(wc: WorkCenter) -> None:
    item = wc.cancel(create_linear(wc).id)
    with refused(wc, CommandRefused, "Cannot update a WorkItem that is cancelled"):
        wc.update_contract(item.id, expected_version=item.version, goal="Other")


def test_update_refuses_done_item(wc: WorkCenter) -> None:
    item = create_linear(wc, stages=("deliver",))
    wc.finish_run(claim(wc), report())
    done = wc.work_item(item.id)
    assert done.status == "done"
    with refused(wc, CommandRefused, "Cannot update a WorkItem that is done"):
        wc.update_contract(done.id, expected_version=done.version, title="Other")


def test_update_refuses_unknown_item(wc: WorkCenter) -> None:
    with refused(wc, NotFound):
        wc.update_contract(uuid.uuid4(), expected_version=1, goal="x")


# --- 3.1 start --------------------------------------------------------------------


def test_start_linear_draft_adds_first_stage_action(wc: WorkCenter) -> None:
    item = create_linear(wc, start=False, stages=("implement", "deliver"))
    started = wc.start(item.id, expected_version=item.version)
    assert started.status == "ready"
    action = current(wc, item.id)
    assert (action.type, action.status, action.contract_revision) == ("implement", "ready", 1)
    assert item_events(wc, item.id, after=item.version)[0] == "WorkItemStarted"


def test_start_dynamic_draft_runs_with_no_action(wc: WorkCenter) -> None:
    item = create_dynamic(wc, start=False)
    started = wc.start(item.id)
    assert (started.status, started.current_action_id) == ("running", None)
    assert item_events(wc, item.id, after=item.version) == ["WorkItemStarted", "StatusChanged"]


def test_start_linear_with_ready_current_action_is_a_no_op(wc: WorkCenter) -> None:
    item = create_linear(wc)
    count = wc.event_count()
    assert wc.start(item.id) == item
    assert wc.event_count() == count


def test_start_dynamic_with_ready_current_action_is_a_no_op(wc: WorkCenter) -> None:
    item = plan(wc, create_dynamic(wc).id)
    assert item.status == "ready"
    count = wc.event_count()
    assert wc.start(item.id) == item
    assert wc.event_count() == count


def test_start_refuses_item_that_must_be_retried(wc: WorkCenter) -> None:
    item = create_linear(wc)
    _fail_current(wc)
    with refused(wc, CommandRefused, "must be resumed with retry"):
        wc.start(item.id)


def test_start_refuses_running_item(wc: WorkCenter) -> None:
    """Said as what it is: a running item needs no resume (it read "must be resumed")."""
    item = create_linear(wc)
    claim(wc)
    with refused(wc, CommandRefused, "WorkItem is running: it was started already"):
        wc.start(item.id)
    dynamic = create_dynamic(wc)  # running, no Action: not a draft any more
    with refused(wc, CommandRefused, "WorkItem is running: it was started already"):
        wc.start(dynamic.id)


@pytest.mark.parametrize("terminal", ["cancelled", "done"])
def test_start_refuses_terminal_item(wc: WorkCenter, terminal: str) -> None:
    item = create_linear(wc, stages=("deliver",))
    if terminal == "cancelled":
        wc.cancel(item.id)
    else:
        wc.finish_run(claim(wc), report())
    with refused(wc, CommandRefused, f"Cannot start a WorkItem that is {terminal}"):
        wc.start(item.id)


# --- 3.1 cancel -------------------------------------------------------------------


def test_cancel_linear_ready_item(wc: WorkCenter) -> None:
    item = create_linear(wc)
    action = current(wc, item.id)
    cancelled = wc.cancel(item.id, reason="not needed")
    assert (cancelled.status, cancelled.current_action_id) == ("cancelled", None)
    after = wc.action(action.id)
    assert after.status == "cancelled"
    assert after.lease_epoch == action.lease_epoch + 1  # invariant 5
    assert item_events(wc, item.id, after=item.version)[-1] == "WorkItemCancelled"
    assert_nothing_claimable(wc)


def test_cancel_ends_the_running_run(wc: WorkCenter) -> None:
    item = create_linear(wc)
    claimed = claim(wc)
    wc.cancel(item.id, reason="stop")
    run = run_of(wc, claimed)
    assert (run.status, run.end_reason) == ("cancelled", "stop")
    assert run.ended_at is not None
    action = wc.action(claimed.action_id)
    assert (action.status, action.current_run_id) == ("cancelled", None)
    assert action.lease_epoch == claimed.lease_epoch + 1
    with refused(wc, StaleRun):
        wc.finish_run(claimed, report())
    with refused(wc, StaleRun):
        wc.interrupt(claimed)
    assert_renew_refused(wc, claimed)


def test_cancel_dynamic_cancels_open_actions_only(wc: WorkCenter) -> None:
    item = create_dynamic(wc)
    plan(
        wc,
        item.id,
        action_spec(objective="a"),
        action_spec(objective="b"),
        action_spec(objective="c"),
    )
    a, b, c = actions_by_sequence(wc, item.id)
    wc.finish_run(claim(wc), report())  # a completed
    wc.finish_run(claim(wc), report("failed"))  # b failed, c ready
    completed = wc.action(a.id)
    cancelled = wc.cancel(item.id)
    assert (cancelled.status, cancelled.current_action_id) == ("cancelled", None)
    assert wc.action(a.id) == completed
    assert wc.action(b.id).status == wc.action(c.id).status == "cancelled"


def test_cancel_draft_item(wc: WorkCenter) -> None:
    item = create_dynamic(wc, start=False)
    assert wc.cancel(item.id).status == "cancelled"


def test_cancel_twice_is_unchanged(wc: WorkCenter) -> None:
    item = wc.cancel(create_linear(wc).id)
    count = wc.event_count()
    assert wc.cancel(item.id) == item
    assert wc.event_count() == count


def test_cancel_refuses_done_item(wc: WorkCenter) -> None:
    item = create_linear(wc, stages=("deliver",))
    wc.finish_run(claim(wc), report())
    with refused(wc, CommandRefused, "Completed WorkItem cannot be cancelled"):
        wc.cancel(item.id)


def test_cancel_refuses_unknown_item(wc: WorkCenter) -> None:
    with refused(wc, NotFound):
        wc.cancel(uuid.uuid4())


# --- 3.1 resume -------------------------------------------------------------------


def test_resume_linear_resets_the_cancelled_action(wc: WorkCenter) -> None:
    item = create_linear(wc)
    claimed = claim(wc)
    cancelled = wc.cancel(item.id)
    before = wc.action(claimed.action_id)
    resumed = wc.resume(
        item.id,
        expected_version=cancelled.version,
        expected_ledger_version=wc.ledger(item.id).version,
    )
    action = wc.action(claimed.action_id)
    assert (resumed.status, resumed.current_action_id) == ("ready", action.id)
    assert (action.status, action.attempt, action.current_run_id) == ("ready", 0, None)
    assert action.generation == before.generation + 1
    assert action.result_run_id is None
    assert "WorkItemResumed" in item_events(wc, item.id, after=cancelled.version)
    assert action_events(wc, action.id, after=before.version) == ["ActionReset"]
    # The reset Action runs again in its new generation; the old claim stays dead.
    again = claim(wc)
    assert (again.action_id, again.attempt) == (action.id, 1)
    assert wc.action(action.id).current_run.generation == action.generation  # type: ignore[union-attr]
    with refused(wc, StaleRun):
        wc.finish_run(claimed, report())


def test_resume_linear_keeps_accepted_input(wc: WorkCenter) -> None:
    item = create_linear(wc)
    wc.finish_run(claim(wc), report("waiting"))
    waiting = wc.work_item(item.id)
    wc.retry(
        item.id,
        waiting.current_action_id,
        expected_version=waiting.version,  # type: ignore[arg-type]
        answer="Use PostgreSQL",
    )
    replacement = current(wc, item.id)
    assert [e.kind for e in replacement.context] == ["prior_result", "input"]
    cancelled = wc.cancel(item.id)
    wc.resume(
        item.id,
        expected_version=cancelled.version,
        expected_ledger_version=wc.ledger(item.id).version,
    )
    resumed = wc.action(replacement.id)
    assert resumed.status == "ready"
    assert [(e.kind, e.text) for e in resumed.context if e.kind == "input"] == [
        ("input", "Use PostgreSQL")
    ]


def test_resume_linear_without_cancelled_actions_adds_first_stage(wc: WorkCenter) -> None:
    item = wc.cancel(create_linear(wc, start=False).id)
    resumed = wc.resume(
        item.id, expected_version=item.version, expected_ledger_version=wc.ledger(item.id).version
    )
    assert resumed.status == "ready"
    assert current(wc, item.id).type == "triage"


def test_resume_dynamic_supersedes_cancelled_actions(wc: WorkCenter) -> None:
    item = plan(wc, create_dynamic(wc).id)
    cancelled = wc.cancel(item.id)
    before = wc.action(item.plan[0].action_id)
    assert before.status == "cancelled"
    resumed = wc.resume(
        item.id,
        expected_version=cancelled.version,
        expected_ledger_version=wc.ledger(item.id).version,
    )
    after = wc.action(before.id)
    assert after.status == "superseded"
    assert after.lease_epoch == before.lease_epoch + 1
    assert (resumed.status, resumed.current_action_id) == ("running", None)


@pytest.mark.parametrize("state", ["draft", "ready", "needs_attention"])
def test_resume_refuses_item_that_is_not_cancelled(wc: WorkCenter, state: str) -> None:
    item = create_linear(wc, start=state != "draft")
    if state == "needs_attention":
        _fail_current(wc)
    item = wc.work_item(item.id)
    assert item.status == state
    with refused(wc, CommandRefused, "only a cancelled or stopped WorkItem that is not"):
        wc.resume(
            item.id,
            expected_version=item.version,
            expected_ledger_version=wc.ledger(item.id).version,
        )


def test_resume_refuses_done_item(wc: WorkCenter) -> None:
    item = create_linear(wc, stages=("deliver",))
    wc.finish_run(claim(wc), report())
    done = wc.work_item(item.id)
    with refused(wc, CommandRefused):
        wc.resume(
            item.id,
            expected_version=done.version,
            expected_ledger_version=wc.ledger(item.id).version,
        )


# --- 3.2 retry --------------------------------------------------------------------


def test_retry_linear_failed_inserts_a_new_current_action(wc: WorkCenter) -> None:
    item = create_linear(wc)
    claimed = claim(wc)
    wc.finish_run(claimed, report("failed", summary="", error="compiler crashed"))
    failed = wc.work_item(item.id)
    target = wc.action(claimed.action_id)
    retried = wc.retry(
        item.id, target.id, expected_version=failed.version, expected_generation=target.generation
    )
    old = wc.action(target.id)
    assert (old.status, old.lease_epoch) == ("superseded", target.lease_epoch + 1)
    new = current(wc, item.id)
    assert (new.sequence, new.type, new.status, new.attempt) == (2, "triage", "ready", 0)
    assert new.brief == target.brief
    assert retried.status == "ready"
    # Spec: revision +1 when expected was given; here the contract revision stays (ADR-0004).
    assert retried.contract_revision == 1
    [entry] = new.context
    assert (entry.kind, entry.text, entry.run_id) == (
        "prior_result",
        "compiler crashed",
        claimed.run_id,
    )
    # The predecessor no longer blocks claims (invariant 13).
    assert claim(wc).action_id == new.id


def test_retry_linear_waiting_carries_the_answer(wc: WorkCenter) -> None:
    item = create_linear(wc)
    wc.finish_run(claim(wc), report("waiting", waitingReason="Which DB?"))
    waiting = wc.work_item(item.id)
    assert waiting.status == "waiting"
    wc.retry(
        item.id,
        waiting.current_action_id,
        expected_version=waiting.version,  # type: ignore[arg-type]
        answer="  PostgreSQL  ",
    )
    new = current(wc, item.id)
    prior, given = new.context
    assert prior.kind == "prior_result"
    assert prior.waiting_reason == "Which DB?\nAnswer: PostgreSQL"
    assert (given.kind, given.text) == ("input", "PostgreSQL")


def test_retry_dynamic_failed_resets_the_action_in_place(wc: WorkCenter) -> None:
    item = plan(wc, create_dynamic(wc).id)
    claimed = claim(wc)
    wc.finish_run(claimed, report("failed"))
    failed = wc.work_item(item.id)
    assert failed.status == "needs_attention"
    target = wc.action(claimed.action_id)
    retried = wc.retry(
        item.id, target.id, expected_version=failed.version, expected_generation=target.generation
    )
    after = wc.action(target.id)
    assert (after.status, after.attempt, after.result_run_id) == ("ready", 0, None)
    assert after.generation == target.generation + 1
    assert after.lease_epoch == target.lease_epoch  # it was not running
    assert [e.kind for e in after.context] == ["prior_result"]
    assert (retried.status, retried.current_action_id, retried.contract_revision) == (
        "ready",
        target.id,
        1,
    )


def test_retry_dynamic_waiting_with_answer(wc: WorkCenter) -> None:
    item = plan(wc, create_dynamic(wc).id)
    wc.finish_run(claim(wc), report("waiting"))
    waiting = wc.work_item(item.id)
    assert waiting.status == "waiting"
    wc.retry(item.id, waiting.plan[0].action_id, expected_version=waiting.version, answer="yes")
    after = wc.action(waiting.plan[0].action_id)
    assert after.status == "ready"
    assert [(e.kind, e.text) for e in after.context][-1] == ("input", "yes")


def test_retry_refuses_an_answer_past_its_bound(wc: WorkCenter) -> None:
    item = plan(wc, create_dynamic(wc).id)
    wc.finish_run(claim(wc), report("waiting"))
    waiting = wc.work_item(item.id)
    with refused(wc, InvalidInput, "answer is longer than 8000"):
        wc.retry(
            item.id, waiting.plan[0].action_id, expected_version=waiting.version, answer="x" * 8_001
        )


@pytest.mark.parametrize("answer", ["   ", "\u200b", " \u2060\ufeff "])
def test_retry_waiting_needs_an_answer(wc: WorkCenter, answer: str) -> None:
    """Blank, or only characters that show nothing (a zero-width space was taken)."""
    item = create_linear(wc)
    wc.finish_run(claim(wc), report("waiting"))
    waiting = wc.work_item(item.id)
    with refused(wc, InvalidInput, "needs an answer"):
        wc.retry(
            item.id,
            waiting.current_action_id,
            expected_version=waiting.version,  # type: ignore[arg-type]
            answer=answer,
        )


def test_retry_refuses_generation_mismatch(wc: WorkCenter) -> None:
    item = create_linear(wc)
    _fail_current(wc)
    failed = wc.work_item(item.id)
    action = current(wc, item.id)
    with refused(wc, CommandRefused, "Action changed before input was applied"):
        wc.retry(
            item.id,
            action.id,
            expected_version=failed.version,
            expected_generation=action.generation + 1,
        )


@pytest.mark.parametrize(
    ("mode", "refusal"),
    [
        ("linear", "WorkItem is ready; it does not need retry"),
        # Actions side by side: the item's status says nothing of this one (ADR-0091).
        ("dynamic", "Action is ready; only waiting or failed Actions retry"),
    ],
)
def test_retry_refuses_item_that_does_not_need_retry(
    wc: WorkCenter, mode: str, refusal: str
) -> None:
    item = create_linear(wc) if mode == "linear" else plan(wc, create_dynamic(wc).id)
    item = wc.work_item(item.id)
    assert item.status == "ready"
    with refused(wc, CommandRefused, refusal):
        wc.retry(item.id, item.plan[0].action_id, expected_version=item.version)


def test_a_waiting_action_is_answered_while_another_runs(wc: WorkCenter) -> None:
    """A dynamic item's Actions run side by side: its status is running while one of
    them waits for an answer, which was refused as "does not need retry" (ADR-0091)."""
    item = plan(wc, create_dynamic(wc).id, action_spec(objective="a"), action_spec(objective="b"))
    a, b = actions_by_sequence(wc, item.id)
    first = claim(wc)
    assert first.action_id == a.id
    wc.finish_run(first, report("waiting", waitingReason="Which Python versions?"))
    claim(wc)  # b runs
    running = wc.work_item(item.id)
    assert (running.status, wc.action(a.id).status) == ("running", "waiting")
    wc.retry(item.id, a.id, expected_version=running.version, answer="3.11 and 3.12")
    answered = wc.action(a.id)
    assert (answered.status, answered.context[-1].text) == ("ready", "3.11 and 3.12")
    assert wc.action(b.id).status == "running"


def test_retry_refuses_action_that_is_not_waiting_or_failed(wc: WorkCenter) -> None:
    item = plan(wc, create_dynamic(wc).id, action_spec(objective="a"), action_spec(objective="b"))
    a, _ = actions_by_sequence(wc, item.id)
    wc.finish_run(claim(wc), report())  # a completed
    wc.finish_run(claim(wc), report("failed"))  # b failed: needs_attention
    seen = wc.work_item(item.id)
    assert seen.status == "needs_attention"
    with refused(wc, CommandRefused, "only waiting or failed Actions retry"):
        wc.retry(item.id, a.id, expected_version=seen.version)


def test_retry_refuses_action_of_another_item(wc: WorkCenter) -> None:
    item = create_linear(wc)
    _fail_current(wc)
    other = create_linear(wc, title="Other")
    failed = wc.work_item(item.id)
    with refused(wc, CommandRefused, "does not belong"):
        wc.retry(item.id, other.current_action_id, expected_version=failed.version)  # type: ignore[arg-type]


def test_retry_refuses_unknown_action(wc: WorkCenter) -> None:
    item = create_linear(wc)
    _fail_current(wc)
    failed = wc.work_item(item.id)
    with refused(wc, NotFound):
        wc.retry(item.id, uuid.uuid4(), expected_version=failed.version)


# --- 3.6 guidance -----------------------------------------------------------------


def test_guide_linear_ready_replaces_the_current_action(wc: WorkCenter) -> None:
    item = create_linear(wc)
    target = current(wc, item.id)
    guided = wc.guide(
        item.id,
        target.id,
        expected_version=item.version,
        expected_generation=1,
        guidance="  Focus on the parser  ",
    )
    old = wc.action(target.id)
    assert (old.status, old.lease_epoch) == ("superseded", target.lease_epoch + 1)
    new = current(wc, item.id)
    assert (new.type, new.sequence, new.status, new.brief) == ("triage", 2, "ready", target.brief)
    assert [(e.kind, e.text) for e in new.context] == [("guidance", "Focus on the parser")]
    assert (guided.status, guided.current_action_id, guided.contract_revision) == (
        "ready",
        new.id,
        1,
    )


def test_guide_linear_running_supersedes_the_run(wc: WorkCenter) -> None:
    item = create_linear(wc)
    claimed = claim(wc)
    running = wc.work_item(item.id)
    guided = wc.guide(
        item.id, claimed.action_id, expected_version=running.version, guidance="Stop and reconsider"
    )
    assert run_of(wc, claimed).status == "superseded"
    assert wc.action(claimed.action_id).lease_epoch == claimed.lease_epoch + 1
    assert guided.status == "ready"
    with refused(wc, StaleRun):
        wc.finish_run(claimed, report())
    assert claim(wc).action_id == guided.current_action_id


def test_guide_dynamic_ready_resets_the_same_action(wc: WorkCenter) -> None:
    item = plan(wc, create_dynamic(wc).id)
    target = wc.action(item.plan[0].action_id)
    guided = wc.guide(
        item.id,
        target.id,
        expected_version=item.version,
        expected_generation=1,
        guidance="Check the logs",
    )
    after = wc.action(target.id)
    assert (after.status, after.generation, after.lease_epoch) == ("ready", 2, target.lease_epoch)
    assert [(e.kind, e.text) for e in after.context] == [("guidance", "Check the logs")]
    assert after.spec_hash != target.spec_hash
    assert (guided.status, guided.current_action_id, guided.contract_revision) == (
        "ready",
        target.id,
        1,
    )


def test_guide_dynamic_running_supersedes_the_run(wc: WorkCenter) -> None:
    item = plan(wc, create_dynamic(wc).id)
    claimed = claim(wc)
    running = wc.work_item(item.id)
    wc.guide(item.id, claimed.action_id, expected_version=running.version, guidance="Hurry")
    after = wc.action(claimed.action_id)
    assert (after.status, after.generation, after.lease_epoch) == (
        "ready",
        2,
        claimed.lease_epoch + 1,
    )
    assert run_of(wc, claimed).status == "superseded"
    with refused(wc, StaleRun):
        wc.finish_run(claimed, report())
    again = claim(wc)
    assert (again.action_id, again.lease_epoch, again.attempt) == (
        after.id,
        after.lease_epoch + 1,
        1,
    )


def test_guide_dynamic_waiting_action(wc: WorkCenter) -> None:
    item = plan(wc, create_dynamic(wc).id)
    wc.finish_run(claim(wc), report("waiting"))
    waiting = wc.work_item(item.id)
    assert waiting.status == "waiting"
    guided = wc.guide(
        item.id,
        item.plan[0].action_id,
        expected_version=waiting.version,
        guidance="Assume PostgreSQL",
    )
    assert guided.status == "ready"
    assert wc.action(item.plan[0].action_id).status == "ready"


def test_guide_refuses_failed_action(wc: WorkCenter) -> None:
    item = plan(wc, create_dynamic(wc).id)
    wc.finish_run(claim(wc), report("failed"))
    failed = wc.work_item(item.id)
    with refused(wc, CommandRefused, "no active Action for guidance"):
        wc.guide(item.id, item.plan[0].action_id, expected_version=failed.version, guidance="x")


@pytest.mark.parametrize("outcome", ["waiting", "failed"])
def test_guide_linear_refuses_item_that_is_not_ready_or_running(
    wc: WorkCenter, outcome: str
) -> None:
    item = create_linear(wc)
    _fail_current(wc, outcome)
    seen = wc.work_item(item.id)
    with refused(wc, CommandRefused, "no active Action for guidance"):
        wc.guide(item.id, seen.current_action_id, expected_version=seen.version, guidance="x")  # type: ignore[arg-type]


def test_guide_linear_refuses_action_that_is_not_current(wc: WorkCenter) -> None:
    item = create_linear(wc)
    first = current(wc, item.id)
    wc.finish_run(claim(wc), report())
    seen = wc.work_item(item.id)
    with refused(wc, CommandRefused, "no active Action for guidance"):
        wc.guide(item.id, first.id, expected_version=seen.version, guidance="x")


def test_guide_refuses_generation_mismatch(wc: WorkCenter) -> None:
    item = plan(wc, create_dynamic(wc).id)
    with refused(wc, CommandRefused, "Action changed before guidance was applied"):
        wc.guide(
            item.id,
            item.plan[0].action_id,
            expected_version=item.version,
            expected_generation=2,
            guidance="x",
        )


@pytest.mark.parametrize("guidance", ["  ", "\u200b", "\ufeff \u3164", "\x00"])
def test_guide_refuses_guidance_that_shows_nothing(wc: WorkCenter, guidance: str) -> None:
    """Zero-width and filler characters were taken as guidance: a new generation (a
    running Run replaced) with words no one could read (limits.md, ADR-0083)."""
    item = create_linear(wc)
    with refused(wc, InvalidInput, "guidance text is required"):
        wc.guide(item.id, item.current_action_id, expected_version=item.version, guidance=guidance)  # type: ignore[arg-type]


def test_a_planned_objective_that_shows_nothing_is_refused(wc: WorkCenter) -> None:
    item = create_dynamic(wc)
    with refused(wc, InvalidInput, "objective is required for every planned Action"):
        plan(wc, item.id, action_spec(objective="\u200b\u2060"))


def test_guide_refuses_terminal_item(wc: WorkCenter) -> None:
    item = plan(wc, create_dynamic(wc).id)
    cancelled = wc.cancel(item.id)
    with refused(wc, CommandRefused, "no active Action for guidance"):
        wc.guide(item.id, item.plan[0].action_id, expected_version=cancelled.version, guidance="x")


def test_guide_refuses_text_past_its_bound(wc: WorkCenter) -> None:
    item = plan(wc, create_dynamic(wc).id)
    with refused(wc, InvalidInput, "guidance is longer than 8000"):
        wc.guide(
            item.id, item.plan[0].action_id, expected_version=item.version, guidance="g" * 8_001
        )


# --- the criteria bound and the goal-progress DTO's cap (read-models.md 2.5) ----------


def test_an_item_may_hold_more_criteria_than_the_progress_dto_shows(wc: WorkCenter) -> None:
    criteria = [f"Criterion {n}" for n in range(bounds.CRITERIA)]
    item = create_dynamic(wc, criteria=criteria)
    progress = wc.detail(item.id)["goalProgress"]
    assert progress["totalCriteriaCount"] == bounds.CRITERIA > 100
    assert len(progress["criteria"]) == 100  # the DTO's cap applies
    assert progress["omittedCriteriaCount"] == bounds.CRITERIA - 100
    assert progress["remainingCriteriaCount"] == bounds.CRITERIA
    assert [c["criterion"] for c in progress["criteria"]] == criteria[:100]  # contract order


def test_one_criterion_past_the_bound_is_refused(wc: WorkCenter) -> None:
    too_many = [f"Criterion {n}" for n in range(bounds.CRITERIA + 1)]
    with refused(wc, InvalidInput, f"more than {bounds.CRITERIA} entries"):
        create_dynamic(wc, criteria=too_many)


def test_a_create_whose_write_is_sent_again_after_it_committed_returns_the_item(
    wc: WorkCenter, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The recorder sends a write again when the connection is lost before its answer
    (ADR-0056); a create that had committed then met its own rows, and the library's
    IntegrityError (duplicate key) left the API, untyped (found by the crash test on
    CI). Its fresh ids can only be its own: the create succeeded."""
    events = wc._repository.store.events
    put = events.put

    def committed_then_sent_again(*args: Any, **kwargs: Any) -> Any:
        put(*args, **kwargs)
        return put(*args, **kwargs)  # as the recorder's retry would, after the commit

    monkeypatch.setattr(events, "put", committed_then_sent_again)
    item = wc.create_work_item(title="Once", goal="G", acceptance_criteria=["c"])
    monkeypatch.setattr(events, "put", put)
    assert wc.work_item(item.id) == item
    assert [i["id"] for i in wc.list_work_items()] == [item.id]


def test_a_create_that_meets_another_items_rows_is_a_typed_error(
    wc: WorkCenter, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Were the rows not the create's own (ids drawn twice: never, but not assumed), the
    create is not said to have succeeded."""
    first = wc.create_work_item(title="First", goal="G", acceptance_criteria=["c"])
    monkeypatch.setattr(work_item_handlers, "uuid4", lambda: first.id)
    count = wc.event_count()
    with pytest.raises(WorkcenterError):
        wc.create_work_item(title="Second", goal="G", acceptance_criteria=["c"])
    assert wc.event_count() == count
    assert wc.work_item(first.id).title == "First"
