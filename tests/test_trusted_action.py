"""A command on the Action alone, or on a Run (its Action and WorkItem), is decided
first on the states this process holds, unread, and the save's version check is its
fence (ADR-0078): an old state never writes over what another process wrote, never
refuses what the stored state allows, and a stream the decision does not write is
read. Each case runs two processes' stores on one database; ``wc``'s cache is left
behind by ``other``'s writes."""

from __future__ import annotations

from datetime import timedelta
from typing import Any
from uuid import UUID

import pytest
from conftest import (
    BACKENDS,
    FakeClock,
    action_events,
    assert_renew_refused,
    claim,
    create_dynamic,
    create_linear,
    plan,
    report,
)

from workcenter.application import Claim, WorkCenter
from workcenter.domain import action as act
from workcenter.domain import work_item as wi
from workcenter.domain.unit import Unit
from workcenter.service_layer.handlers.run import run_actor


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _cached(wc: WorkCenter, action_id: UUID) -> Any:
    return wc._repository._cached(action_id)


def _claimed_elsewhere(wc: WorkCenter, other: WorkCenter) -> Claim:
    """A Run claimed by ``other`` on an Action ``wc`` created: ``wc`` holds the Action
    ready, with no Run, and on that state refuses the Run's commands."""
    create_linear(wc, stages=("implement",))
    claimed = claim(other, "worker-2")
    assert _cached(wc, claimed.action_id).run(claimed.run_id) is None
    return claimed


def test_a_renewal_on_an_old_state_of_a_run_since_finished_writes_nothing(
    wc: WorkCenter, other: WorkCenter
) -> None:
    create_linear(wc, stages=("implement",))
    claimed = claim(wc)
    other.finish_run(claimed, report())
    # This process still holds the Action as its claim left it: the Run live.
    run = _cached(wc, claimed.action_id).run(claimed.run_id)
    assert run is not None and run.status == "running"
    assert_renew_refused(wc, claimed)
    assert action_events(wc, claimed.action_id)[-1] == "RunFinished"


def test_a_renewal_refused_on_an_old_state_is_decided_again_on_the_stored_one(
    wc: WorkCenter, other: WorkCenter
) -> None:
    claimed = _claimed_elsewhere(wc, other)
    count = wc.event_count()
    assert wc.renew_lease(claimed) is True
    assert wc.event_count() == count + 1
    assert action_events(wc, claimed.action_id)[-1] == "LeaseRenewed"


def test_input_queued_by_another_process_is_consumed_on_the_stored_state(
    wc: WorkCenter, other: WorkCenter
) -> None:
    plan(wc, create_dynamic(wc).id)
    claimed = claim(wc)
    action = other.action(claimed.action_id)
    queued = other.add_input(
        action.work_item_id,
        action.id,
        expected_version=other.work_item(action.work_item_id).version,
        expected_generation=action.generation,
        text="use the staging database",
    ).inputs[-1]
    assert not _cached(wc, claimed.action_id).inputs  # this process has not seen it
    after = wc.consume_input(claimed, [queued.id])
    assert not after.unconsumed_inputs
    assert action_events(wc, claimed.action_id)[-1] == "InputConsumed"


def test_a_finish_on_an_old_state_after_another_renewal_is_decided_again(
    wc: WorkCenter, other: WorkCenter
) -> None:
    create_linear(wc, stages=("implement",))
    claimed = claim(wc)
    assert other.renew_lease(claimed)  # the Action moved on in the other process
    finished = wc.finish_run(claimed, report())
    assert finished.status == "completed"
    events = action_events(wc, claimed.action_id)
    assert events[-2:] == ["LeaseRenewed", "RunFinished"]
    assert events.count("RunFinished") == 1


def test_a_finish_refused_on_an_old_state_is_decided_again_on_the_stored_one(
    wc: WorkCenter, other: WorkCenter
) -> None:
    claimed = _claimed_elsewhere(wc, other)
    assert wc.finish_run(claimed, report()).status == "completed"


def test_a_decision_that_leaves_the_item_unwritten_is_decided_on_the_item_read(
    wc: WorkCenter, other: WorkCenter, clock: FakeClock
) -> None:
    """The item's version is fenced only by an event on its stream: a decision on the
    Action alone (a renewal, which records no status) is taken again on the item read."""
    item = create_linear(wc, stages=("implement",))
    claimed = claim(wc)
    renamed = other.update_contract(
        item.id, expected_version=other.work_item(item.id).version, title="renamed"
    )
    seen: list[int] = []

    def renew(action: act.ActionState, state: wi.WorkItemState) -> Unit:
        seen.append(state.version)
        by = run_actor(claimed, action)
        unit = Unit(state, {action.id: action}, clock.now(), by=by)
        lease = timedelta(seconds=30)
        unit.apply_action(act.renew(action, claimed.ref, lease=lease, at=clock.now(), by=by))
        return unit

    wc._repository.execute_on_run(renew, claimed.action_id)
    assert seen == [renamed.version - 1, renamed.version]
    assert action_events(wc, claimed.action_id)[-1] == "LeaseRenewed"
