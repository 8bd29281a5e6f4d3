"""A command on the Action alone is decided first on the state this process holds,
unread, and the save's version check is its fence (ADR-0078): an old state never
writes over what another process wrote, and never refuses what the stored state
allows. Each case runs two processes' stores on one database; ``wc``'s cache is left
behind by ``other``'s writes."""

from __future__ import annotations

from collections.abc import Iterator
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

from workcenter.application import WorkCenter


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def other(location: str, clock: FakeClock) -> Iterator[WorkCenter]:
    center = WorkCenter.open(location, clock=clock, boot_id="other-process", create=False)
    yield center
    center.close()


def _cached(wc: WorkCenter, action_id: UUID) -> Any:
    return wc._repository._cached(action_id)


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
    create_linear(wc, stages=("implement",))
    claimed = claim(other, "worker-2")
    # This process created the Action and holds it ready, with no Run: on that state a
    # renewal is refused.
    assert _cached(wc, claimed.action_id).run(claimed.run_id) is None
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
