"""A worker told to exit when idle first ends the Runs whose lease lapsed while it ran
(and claims their Actions again): it never leaves an item running after every worker
has exited (found by an acceptance test with a killed worker). The echo executor
completes a review too."""

from __future__ import annotations

from typing import Any

from conftest import FakeClock, claim, create_linear

from workcenter.adapters.executors import echo
from workcenter.adapters.worker import run_worker
from workcenter.application import Claim, WorkCenter


def test_an_idle_worker_recovers_a_lease_that_lapsed_before_it_exits(
    wc: WorkCenter, clock: FakeClock
) -> None:
    stuck = create_linear(wc, stages=("implement",))
    lost = claim(wc, lease_seconds=5)  # a worker that dies: it never finishes
    assert lost.work_item_id == stuck.id
    create_linear(wc, stages=("implement",))

    def slow(claimed: Claim) -> dict[str, Any]:
        clock.advance(6)  # the dead worker's lease lapses while this Run works
        return echo(claimed)

    stats = run_worker(wc, slow, worker="w2", exit_when_idle=True, poll_seconds=0.01)
    assert stats.claimed == 2 and stats.finished == 2, stats
    assert wc.work_item(stuck.id).status == "done"
    action = wc.action(lost.action_id)
    assert action.status == "completed" and action.lease_epoch == lost.lease_epoch + 1


def test_echo_completes_every_stage_of_a_linear_item_review_included(wc: WorkCenter) -> None:
    item = create_linear(wc, stages=("implement", "review", "deliver"))
    stats = run_worker(wc, echo, worker="w", exit_when_idle=True, poll_seconds=0.01)
    assert stats.finished == 3, stats
    assert wc.work_item(item.id).status == "done"
