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


def test_a_busy_worker_ends_a_lease_that_lapsed_while_it_never_went_idle(
    wc: WorkCenter, clock: FakeClock
) -> None:
    """A Run whose lease lapsed (its worker died, or an operator's lock outlasted it) is
    ended by a worker that never runs out of work, within about one of its own leases:
    before ADR-0107 only a worker that found nothing to claim recovered, so under a
    steady backlog the Run stayed running, its linear item blocked, for as long as the
    backlog lasted (4.5 minutes in the acceptance test, for ever under an endless one)."""
    stuck = create_linear(wc, stages=("implement",))
    lost = claim(wc, lease_seconds=5)  # a worker that dies: it never finishes
    assert lost.work_item_id == stuck.id
    for n in range(5):
        create_linear(wc, stages=("implement",), title=f"backlog {n}")

    def slow(claimed: Claim) -> dict[str, Any]:
        clock.advance(6)  # the dead worker's lease lapses while this Run works
        return echo(claimed)

    stats = run_worker(wc, slow, worker="w2", lease_seconds=10, max_runs=3, poll_seconds=0.01)
    assert stats.claimed == 3 and stats.finished == 3, stats
    assert len(wc.work_queue.ready_actions(16)) >= 2  # it never found the queue empty
    run = wc.action(lost.action_id).run(lost.run_id)
    assert run is not None and run.status == "interrupted"


def test_a_busy_worker_running_several_at_once_ends_a_lapsed_lease_too(
    wc: WorkCenter, clock: FakeClock
) -> None:
    stuck = create_linear(wc, stages=("implement",))
    lost = claim(wc, lease_seconds=5)
    assert lost.work_item_id == stuck.id
    for n in range(10):
        create_linear(wc, stages=("implement",), title=f"backlog {n}")

    def slow(claimed: Claim) -> dict[str, Any]:
        # Two at once, each moving the clock: a Run's own lease of 10 s outlives it unless
        # the other thread runs five while it runs one (with 3 s a step, three sufficed
        # when a CI machine starved one thread, and the worker's own recovery ended it).
        clock.advance(2)
        return echo(claimed)

    stats = run_worker(
        wc, slow, worker="w2", lease_seconds=10, max_runs=8, poll_seconds=0.01, runs_at_once=2
    )
    assert stats.finished == 8, stats
    run = wc.action(lost.action_id).run(lost.run_id)
    assert run is not None and run.status == "interrupted"
