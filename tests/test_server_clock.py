"""Every process of a PostgreSQL store tells the time by its server's clock (ADR-0136):
a machine whose own clock is minutes ahead ended other workers' live Runs, and one
behind took leases already over by everyone else's (found by acceptance testing)."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any
from zoneinfo import ZoneInfo

import postgres
import pytest
from conftest import claim, create_linear, report

from workcenter.adapters import server_clock
from workcenter.adapters.server_clock import Reading, ServerClock, read_on
from workcenter.application import WorkCenter

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


class Host:
    """A host's wall clock and monotonic clock, moved by the test."""

    def __init__(self) -> None:
        self.wall, self.ticks = T0, 0.0

    def advance(self, seconds: float) -> None:
        self.wall += timedelta(seconds=seconds)
        self.ticks += seconds


def wait_for_resync(clock: ServerClock, readings: list[object]) -> None:
    for _ in range(200):
        if not readings and not clock._measuring.locked():
            return
        threading.Event().wait(0.01)
    raise AssertionError(f"readings left: {readings}")


def server_ahead(host: Host, seconds: float) -> Reading:
    """What the server answers, ``seconds`` ahead of the host's wall clock."""
    return host.wall + timedelta(seconds=seconds), host.ticks


def test_the_servers_clock_is_read_at_open_and_again_after_a_minute_apart() -> None:
    host = Host()
    readings = [partial(server_ahead, host, 300), partial(server_ahead, host, 299)]
    clock = ServerClock(
        lambda monotonic: readings.pop(0)(), local=lambda: host.wall, monotonic=lambda: host.ticks
    )
    assert clock.now() == T0 + timedelta(seconds=300)
    host.advance(59)
    assert clock.now() == T0 + timedelta(seconds=359)  # not due: carried by the ticks
    host.advance(1)
    clock.now()  # due: read again in a thread of its own; this answer does not wait
    wait_for_resync(clock, readings)
    assert clock.now() == T0 + timedelta(seconds=60 + 299)
    assert clock.offset == timedelta(seconds=299)


def test_a_wall_clock_stepped_between_readings_moves_no_time() -> None:
    """NTP stepped a machine's clock an hour: the offset measured before the step was
    added to the stepped clock until the next reading, a minute later, and the process
    ended other machines' live Runs meanwhile (found by acceptance testing, ADR-0138).
    The time between two readings is carried by the monotonic clock alone."""
    host = Host()
    readings = [partial(server_ahead, host, 0), partial(server_ahead, host, -3600)]
    clock = ServerClock(
        lambda monotonic: readings.pop(0)(), local=lambda: host.wall, monotonic=lambda: host.ticks
    )
    host.advance(10)
    host.wall += timedelta(hours=1)  # stepped: the ticks do not move
    assert clock.now() == T0 + timedelta(seconds=10)
    host.advance(50)
    clock.now()  # the next reading: the server's time, the host now an hour ahead of it
    wait_for_resync(clock, readings)
    assert clock.now() == T0 + timedelta(seconds=60)
    assert clock.offset == timedelta(hours=-1)


def test_a_reading_in_a_zone_with_daylight_saving_is_carried_in_utc() -> None:
    """A session whose TimeZone keeps daylight saving (a role's setting) answers in that
    zone: carried across the hour's change by adding seconds, a reading came out an
    hour ahead (found by acceptance testing, ADR-0138)."""
    host = Host()
    before_fall_back = datetime(2026, 11, 1, 5, 59, 30, tzinfo=UTC)
    readings = [
        (before_fall_back.astimezone(ZoneInfo("America/New_York")), 0.0),
        OSError("the server is away"),
    ]

    def measure(monotonic: object) -> Reading:
        answer = readings.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    clock = ServerClock(measure, local=lambda: host.wall, monotonic=lambda: host.ticks)
    host.advance(59)
    assert clock.now() == before_fall_back + timedelta(seconds=59)


def test_the_time_between_readings_counts_the_machines_suspends() -> None:
    """The monotonic clock stops while the machine sleeps: a process woken from a suspend
    ran behind by its length until its next reading (found by acceptance testing,
    ADR-0138). On Linux the time is carried by the boot-time clock, which counts it."""
    assert server_clock.SINCE_BOOT is server_clock._since_boot
    assert abs(server_clock.SINCE_BOOT() - time.clock_gettime(time.CLOCK_BOOTTIME)) < 1


def test_a_failed_reading_keeps_the_last_and_is_tried_again_soon() -> None:
    host = Host()
    answers: list[float | Exception] = [-7, OSError("the server is away"), -8]

    def measure(monotonic: object) -> Reading:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return server_ahead(host, answer)

    clock = ServerClock(measure, local=lambda: host.wall, monotonic=lambda: host.ticks)
    host.advance(60)
    clock.now()
    for _ in range(200):  # the failed reading
        if len(answers) == 1 and not clock._measuring.locked():
            break
        threading.Event().wait(0.01)
    assert clock.offset == timedelta(seconds=-7)
    host.advance(5)  # tried again after 5 s, not a minute
    clock.now()
    wait_for_resync(clock, answers)
    assert clock.offset == timedelta(seconds=-8)


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
            partial(read_on, a.store.recorder.datastore.pool),  # type: ignore[attr-defined]
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


def test_a_process_whose_wall_clock_steps_an_hour_ends_no_live_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The finding, on the server: a process whose machine's clock NTP stepped an hour
    ahead recovered another worker's Run with most of its lease left, and its Action was
    claimed and run a second time (found by acceptance testing, ADR-0138)."""
    step = [timedelta(0)]

    class Stepped(datetime):
        @classmethod
        def now(cls, tz: Any = None) -> Any:
            return datetime.now(tz) + step[0]

    with postgres.fresh_schema("wcclock") as url, WorkCenter.open(url, boot_id="boot-a") as a:
        monkeypatch.setattr(server_clock, "datetime", Stepped)
        with WorkCenter.open(url, boot_id="boot-b") as b:
            create_linear(a, stages=("implement",))
            claimed = claim(a, lease_seconds=60)
            step[0] = timedelta(hours=1)  # b's machine's clock, stepped
            assert abs(b.clock.now() - a.clock.now()) < timedelta(seconds=1)
            assert b.recover() == []
            assert b.claim_next("worker-b") is None
            assert a.finish_run(claimed, report()).status == "completed"
