"""The server's watcher of leases (ADR-0126): a remote worker that dies leaves its Run
running only until its lease lapses, even when no claim reaches the server again. Before,
only claims ended lapsed Runs, so a server whose workers had all gone showed the Run
running, its item blocked, for as long as nobody claimed."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from uuid import UUID

import pytest
from conftest import FakeClock, claim, create_linear
from fastapi.testclient import TestClient

from workcenter.adapters.http.app import create_app
from workcenter.adapters.postgres_connection import StoreDisconnected
from workcenter.application import WorkCenter
from workcenter.service_layer.handlers.worker_protocol import WorkerProtocol

EVERY = 0.02


@pytest.fixture
def looks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """One entry per look the watcher took at the live Runs."""
    taken: list[int] = []
    recover = WorkerProtocol.recover_expired

    def counted(self: WorkerProtocol) -> list[UUID]:
        taken.append(1)
        return recover(self)

    monkeypatch.setattr(WorkerProtocol, "recover_expired", counted)
    return taken


@pytest.fixture
def serving(wc: WorkCenter) -> Iterator[TestClient]:
    with TestClient(create_app(wc, recover_every=EVERY)) as api:
        yield api


def eventually(condition: Callable[[], bool], seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "not within the time allowed"
        time.sleep(EVERY)


def test_a_lapsed_lease_is_ended_with_no_claim_and_a_live_one_is_not(
    wc: WorkCenter, clock: FakeClock, looks: list[int], serving: TestClient
) -> None:
    create_linear(wc)
    lost = claim(wc, lease_seconds=30)  # its worker dies; nobody claims again

    def run_status() -> str:
        run = wc.action(lost.action_id).run(lost.run_id)
        assert run is not None
        return run.status

    clock.advance(EVERY * 2)
    eventually(lambda: len(looks) >= 1)
    clock.advance(EVERY * 2)
    eventually(lambda: len(looks) >= 2)
    assert run_status() == "running"  # its lease is live: looked at, left alone

    clock.advance(31)
    eventually(lambda: run_status() == "interrupted")
    item = wc.work_item(lost.work_item_id)
    assert item.status == "ready" and wc.action(lost.action_id).status == "ready"


def test_a_run_ended_for_its_lapsed_lease_is_the_systems_doing_and_is_said(
    wc: WorkCenter, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """The audit said "by operator" of a Run the server's watch ended, and no process
    said a word (found by acceptance testing, ADR-0142)."""
    create_linear(wc)
    lost = claim(wc, lease_seconds=30)
    clock.advance(31)
    with caplog.at_level(logging.WARNING, logger="workcenter.leases"):
        assert wc.worker_protocol.recover_expired() == [lost.run_id]
    (line,) = [r.getMessage() for r in caplog.records if r.name == "workcenter.leases"]
    assert f"Run {lost.run_id} of Action {lost.action_id} ended" in line
    assert f"its worker {lost.worker}@{lost.boot_id} let its lease lapse" in line
    assert line.endswith("(recovered by system leases)")
    ended = wc.action(lost.action_id).run(lost.run_id)
    assert ended is not None and ended.status == "interrupted"
    (row,) = [e for e in wc.audit(lost.work_item_id) if e.type == "RunInterrupted"]
    assert (row.actor, row.actor_id) == ("system", "leases")


def test_an_app_made_without_it_ends_no_run(wc: WorkCenter, clock: FakeClock) -> None:
    """An embedding's own app recovers only on claims, as before."""
    create_linear(wc)
    lost = claim(wc, lease_seconds=30)
    with TestClient(create_app(wc)):
        clock.advance(31)
        time.sleep(EVERY * 10)
        run = wc.action(lost.action_id).run(lost.run_id)
        assert run is not None and run.status == "running"


def test_a_store_away_is_said_once_and_the_watch_goes_on(
    wc: WorkCenter, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    calls: list[int] = []

    def away_three_times(self: WorkerProtocol, every: float) -> list[UUID]:
        calls.append(1)
        if len(calls) <= 3:
            raise StoreDisconnected("the database cannot be reached: connection refused")
        return []

    monkeypatch.setattr(WorkerProtocol, "recover_when_due", away_three_times)
    with (
        caplog.at_level(logging.WARNING, logger="workcenter.http"),
        TestClient(create_app(wc, recover_every=EVERY)),
    ):
        eventually(lambda: len(calls) >= 5)
    said = [r.getMessage() for r in caplog.records if r.name == "workcenter.http"]
    assert said == [
        "lapsed leases not recovered, trying again: the database cannot be reached:"
        " connection refused",
        "lapsed leases recovered again",
    ]
