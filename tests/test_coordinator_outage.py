"""A Coordinator's reply in hand while the store cannot be reached (ADR-0128): it is
recorded once the store answers, within a lease, and recorded once whatever became of
the try that lost its connection. Before, the reply was dropped: after the lease the
request's outcome was unknown, the turn failed for good, counted, and the whole estimate
was charged (found by acceptance testing with PostgreSQL stopped while the model
answered)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import BOOT_ID, FakeClock, action_spec, create_dynamic
from coordinator_fakes import FakeRules, create_actions

from workcenter.adapters.providers.scripted import Reply, ScriptedProvider
from workcenter.application import WorkCenter
from workcenter.service_layer.handlers import coordinator_step
from workcenter.service_layer.handlers.coordinator import CoordinatorCommands
from workcenter.service_layer.ports import StoreUnreachable

USAGE = {"total_tokens": 77}


@pytest.fixture
def wc(db_path: Path, clock: FakeClock) -> Iterator[WorkCenter]:
    center = WorkCenter.open(db_path, clock=clock, boot_id=BOOT_ID, coordinator_rules=FakeRules())
    yield center
    center.close()


@pytest.fixture
def respond_away(monkeypatch: pytest.MonkeyPatch) -> Callable[[int, bool], list[str]]:
    """``respond`` fails ``times`` times as a store out of reach would, each failure
    after its write was made if ``made``; the tries are listed."""
    monkeypatch.setattr(coordinator_step, "RESPOND_FIRST_WAIT", 0.01)
    real = CoordinatorCommands.respond

    def arrange(times: int, made: bool) -> list[str]:
        tries: list[str] = []

        def respond(self: CoordinatorCommands, *args: Any) -> None:
            tries.append("try")
            if len(tries) <= times:
                if made:
                    real(self, *args)
                raise StoreUnreachable("the database cannot be reached")
            real(self, *args)

        monkeypatch.setattr(CoordinatorCommands, "respond", respond)
        return tries

    return arrange


@pytest.mark.parametrize("made", [False, True], ids=["not-written", "written-answer-lost"])
def test_a_reply_in_hand_is_recorded_once_the_store_answers(
    wc: WorkCenter, respond_away: Callable[[int, bool], list[str]], made: bool
) -> None:
    item = create_dynamic(wc)
    tries = respond_away(2, made)
    provider = ScriptedProvider([Reply(create_actions(action_spec()), usage=USAGE)])
    [result] = wc.coordinate_once(provider)
    assert result.status == "decided", result
    # A try whose write was made is read back, not sent again (it would be refused).
    assert len(tries) == (1 if made else 3)
    assert len(wc.work_item(item.id).plan) == 1
    [reservation] = wc.ledger(item.id).reservations.values()
    assert (reservation.status, reservation.charged_tokens) == ("reported", 77)
    assert wc.ledger(item.id).coordinator_failures == 0
