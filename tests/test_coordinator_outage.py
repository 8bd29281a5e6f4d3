"""A Coordinator's reply in hand while the store cannot be reached (ADR-0128): it is
recorded once the store answers, within a lease, and recorded once whatever became of
the try that lost its connection. Before, the reply was dropped: after the lease the
request's outcome was unknown, the turn failed for good, counted, and the whole estimate
was charged (found by acceptance testing with PostgreSQL stopped while the model
answered)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import BOOT_ID, FakeClock, action_spec, create_dynamic
from coordinator_fakes import FakeRules, create_actions
from private_postgres import private_server

from workcenter.adapters.executors import echo
from workcenter.adapters.postgres_connection import StoreDisconnected
from workcenter.adapters.providers.scripted import Reply
from workcenter.adapters.providers.scripted_coordinator import scripted_coordinator
from workcenter.adapters.worker import run_worker
from workcenter.application import WorkCenter
from workcenter.service_layer.handlers import coordinator_step
from workcenter.service_layer.handlers.coordinator import CoordinatorCommands
from workcenter.service_layer.ports import StoreUnreachable
from workcenter.service_layer.repository import Repository

USAGE = {"total_tokens": 77}


@pytest.fixture
def wc(db_path: Path, clock: FakeClock) -> Iterator[WorkCenter]:
    center = WorkCenter.open(db_path, clock=clock, boot_id=BOOT_ID, coordinator_rules=FakeRules())
    yield center
    center.close()


class Away:
    """A store out of reach for the next ``reads`` conversation reads and ``writes``
    replies recorded, from the moment the model answers; a write may be made before its
    connection is lost (``made``)."""

    def __init__(self) -> None:
        self.reads = self.writes = 0
        self.made = False
        self.tries: list[str] = []


@pytest.fixture
def away(monkeypatch: pytest.MonkeyPatch) -> Away:
    monkeypatch.setattr(coordinator_step, "STORE_RETRY_FIRST_WAIT", 0.01)
    state = Away()
    read, respond = Repository.conversation, CoordinatorCommands.respond

    def conversation(self: Repository, work_item_id: Any) -> Any:
        if state.reads:
            state.reads -= 1
            raise StoreUnreachable("the database cannot be reached")
        return read(self, work_item_id)

    def responding(self: CoordinatorCommands, *args: Any) -> None:
        state.tries.append("try")
        if state.writes:
            state.writes -= 1
            if state.made:
                respond(self, *args)
            raise StoreUnreachable("the database cannot be reached")
        respond(self, *args)

    monkeypatch.setattr(Repository, "conversation", conversation)
    monkeypatch.setattr(CoordinatorCommands, "respond", responding)
    return state


class Answers:
    """A provider whose reply arrives as the store goes away."""

    def __init__(self, away: Away, reads: int, writes: int) -> None:
        self.away, self.reads, self.writes = away, reads, writes

    def answer(self, request: Any, before_request: Callable[[], None]) -> Reply:
        before_request()
        self.away.reads, self.away.writes = self.reads, self.writes
        return Reply(create_actions(action_spec()), usage=USAGE)


@pytest.mark.parametrize(
    ("reads", "writes", "made", "tries"),
    [(2, 0, False, 1), (0, 2, False, 3), (1, 2, True, 1)],
    ids=["reads-away", "writes-away", "written-answer-lost"],
)
def test_a_reply_in_hand_is_recorded_once_the_store_answers(
    wc: WorkCenter, away: Away, reads: int, writes: int, made: bool, tries: int
) -> None:
    item = create_dynamic(wc)
    away.made = made
    [result] = wc.coordinate_once(Answers(away, reads, writes))
    assert result.status == "decided", result
    # A try whose write was made is read back, not sent again (it would be refused).
    assert len(away.tries) == tries
    assert len(wc.work_item(item.id).plan) == 1
    [reservation] = wc.ledger(item.id).reservations.values()
    assert (reservation.status, reservation.charged_tokens) == ("reported", 77)
    assert wc.ledger(item.id).coordinator_failures == 0


def test_a_reply_that_arrives_while_postgresql_is_down_is_recorded_when_it_is_back() -> None:
    """The acceptance finding itself, on a server of the test's own: stopped as the model
    answers, started again 3 s later; the turn ends decided with its usage charged."""
    with private_server() as server, WorkCenter.open(server.url, boot_id=BOOT_ID) as wc:
        item = create_dynamic(wc)

        class Down:
            def answer(self, request: Any, before_request: Callable[[], None]) -> Reply:
                before_request()
                server.stop()
                threading.Timer(3.0, server.start).start()
                return Reply(create_actions(action_spec()), usage=USAGE)

        [result] = wc.coordinate_once(Down(), lease_seconds=60)
        assert result.status == "decided", result
        [reservation] = wc.ledger(item.id).reservations.values()
        assert (reservation.status, reservation.charged_tokens) == ("reported", 77)
        assert len(wc.work_item(item.id).plan) == 1


def test_an_outage_is_not_counted_as_a_refused_coordinator_turn(
    wc: WorkCenter, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker counted a database outage (or a busy pool) in its Coordinator steps
    as a refused turn, on a store with no Conversation at all (found by acceptance
    testing); the outage is the claim's to wait out, and nothing was refused."""
    passes: list[int] = []

    def away(provider: Any, **kwargs: Any) -> Any:
        passes.append(1)
        raise StoreDisconnected("the database went away")

    monkeypatch.setattr(wc, "coordinate_once", away)
    stats = run_worker(
        wc, echo, worker="w", coordinator=scripted_coordinator(), runs=False, exit_when_idle=True
    )
    assert passes == [1] and stats.coordinator_steps == {}


@pytest.mark.parametrize(
    ("away_tries", "made", "tries"),
    [(2, False, 3), (1, True, 1)],
    ids=["dispatch-away", "dispatched-answer-lost"],
)
def test_a_dispatch_whose_store_went_away_is_waited_out_and_read_back(
    wc: WorkCenter, monkeypatch: pytest.MonkeyPatch, away_tries: int, made: bool, tries: int
) -> None:
    """A provider turn's dispatch (its reservation, before any byte is sent) that could not
    reach the store is tried again once it answers, and one whose write was made before
    its answer was lost is read back as its own, not sent again. Before, the turn failed
    at once: the request the dispatch had reserved was left unknown, charged its whole
    estimate, though the provider was never called (ADR-0137)."""
    monkeypatch.setattr(coordinator_step, "STORE_RETRY_FIRST_WAIT", 0.01)
    dispatch = CoordinatorCommands.dispatch
    sent: list[str] = []
    left = [away_tries]

    def dispatching(self: CoordinatorCommands, *args: Any) -> str:
        sent.append("try")
        if left[0]:
            left[0] -= 1
            if made:
                dispatch(self, *args)
            raise StoreUnreachable("the database cannot be reached")
        return dispatch(self, *args)

    monkeypatch.setattr(CoordinatorCommands, "dispatch", dispatching)
    item = create_dynamic(wc)

    class Provider:
        calls = 0

        def answer(self, request: Any, before_request: Callable[[], None]) -> Reply:
            before_request()
            Provider.calls += 1
            return Reply(create_actions(action_spec()), usage=USAGE)

    [result] = wc.coordinate_once(Provider())
    assert result.status == "decided", result
    assert len(sent) == tries and Provider.calls == 1
    [reservation] = wc.ledger(item.id).reservations.values()
    assert (reservation.status, reservation.charged_tokens) == ("reported", 77)
    assert wc.ledger(item.id).coordinator_failures == 0
