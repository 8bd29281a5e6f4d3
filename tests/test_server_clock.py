"""Every process of a PostgreSQL store tells the time by its server's clock (ADR-0136):
a machine whose own clock is minutes ahead ended other workers' live Runs, and one
behind took leases already over by everyone else's (found by acceptance testing)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from functools import partial

import postgres
from conftest import claim, create_linear, report

from workcenter.adapters.server_clock import ServerClock, offset_to
from workcenter.application import WorkCenter

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


class Host:
    """A host's wall clock and monotonic clock, moved by the test."""

    def __init__(self) -> None:
        self.wall, self.ticks = T0, 0.0

    def advance(self, seconds: float) -> None:
        self.wall += timedelta(seconds=seconds)
        self.ticks += seconds


def wait_for_resync(clock: ServerClock, offset: timedelta) -> None:
    for _ in range(200):
        if clock.offset == offset:
            return
        threading.Event().wait(0.01)
    raise AssertionError(f"the offset stayed {clock.offset}")


def test_the_offset_is_measured_at_open_and_again_after_a_minute_apart() -> None:
    host, offsets = Host(), [timedelta(seconds=300), timedelta(seconds=299)]
    clock = ServerClock(
        lambda local: offsets.pop(0), local=lambda: host.wall, monotonic=lambda: host.ticks
    )
    assert clock.now() == T0 + timedelta(seconds=300)
    host.advance(59)
    assert clock.now() == T0 + timedelta(seconds=359)  # not due: the offset kept
    host.advance(1)
    clock.now()  # due: measured again in a thread of its own; this answer does not wait
    wait_for_resync(clock, timedelta(seconds=299))
    assert clock.now() == T0 + timedelta(seconds=60 + 299)


def test_a_failed_measure_keeps_the_last_offset_and_is_tried_again_soon() -> None:
    host = Host()
    answers: list[timedelta | Exception] = [
        timedelta(seconds=-7),
        OSError("the server is away"),
        timedelta(seconds=-8),
    ]

    def measure(local: object) -> timedelta:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    clock = ServerClock(measure, local=lambda: host.wall, monotonic=lambda: host.ticks)
    host.advance(60)
    clock.now()
    for _ in range(200):  # the failed measure
        if len(answers) == 1 and not clock._measuring.locked():
            break
        threading.Event().wait(0.01)
    assert clock.offset == timedelta(seconds=-7)
    host.advance(5)  # tried again after 5 s, not a minute
    clock.now()
    wait_for_resync(clock, timedelta(seconds=-8))


def test_a_store_opened_without_a_clock_keeps_its_servers_time() -> None:
    with postgres.fresh_schema("wcclock") as url, WorkCenter.open(url) as wc:
        assert isinstance(wc.clock, ServerClock) and wc.clock.measured_at is not None
        # The shared test server runs on this machine: no offset but the round trip's.
        assert abs(wc.clock.offset) < timedelta(seconds=1)
        assert abs(wc.clock.now() - datetime.now(UTC)) < timedelta(seconds=1)


def test_a_host_minutes_ahead_does_not_end_a_live_run() -> None:
    """The finding: a process on a host five minutes ahead recovered a Run claimed a
    second before with a 60 s lease, and another worker ran its Action again."""
    with postgres.fresh_schema("wcclock") as url, WorkCenter.open(url, boot_id="boot-a") as a:
        ahead = ServerClock(
            partial(offset_to, a.store.recorder.datastore.pool),  # type: ignore[attr-defined]
            local=lambda: datetime.now(UTC) + timedelta(minutes=5),
        )
        with WorkCenter.open(url, clock=ahead, boot_id="boot-b") as b:
            create_linear(a, stages=("implement",))
            claimed = claim(a, lease_seconds=60)
            assert abs(b.clock.now() - a.clock.now()) < timedelta(seconds=1)
            assert b.recover() == []
            assert b.claim_next("worker-b") is None
            assert a.renew_lease(claimed)
            assert a.finish_run(claimed, report()).status == "completed"
