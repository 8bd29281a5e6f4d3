"""Periodic work (the server's lease watcher, a busy worker's recovery) is due once per
interval of the store's clock, and a clock stepped back does not hold it up for the
length of the step (ADR-0136)."""

from __future__ import annotations

from datetime import timedelta

from conftest import FakeClock

from workcenter.service_layer.cadence import Cadence

EVERY = timedelta(seconds=5)


def test_due_once_per_interval() -> None:
    clock = FakeClock()
    cadence = Cadence(clock)
    assert cadence.due(EVERY) and not cadence.due(EVERY)
    clock.advance(4.9)
    assert not cadence.due(EVERY)
    clock.advance(0.1)
    assert cadence.due(EVERY) and not cadence.due(EVERY)


def test_a_clock_stepped_back_does_not_wait_out_the_step() -> None:
    """It did: stepped back an hour, the watcher ended no lapsed Run for an hour (found
    by acceptance testing)."""
    clock = FakeClock()
    cadence = Cadence(clock)
    assert cadence.due(EVERY)
    clock.advance(-3600)
    assert cadence.due(EVERY)  # at once, and then once per interval again
    assert not cadence.due(EVERY)
    clock.advance(5)
    assert cadence.due(EVERY)


def test_not_before_holds_the_first_time() -> None:
    clock = FakeClock()
    cadence = Cadence(clock, not_before=clock.now() + EVERY)
    assert not cadence.due(EVERY)
    clock.advance(5)
    assert cadence.due(EVERY)
