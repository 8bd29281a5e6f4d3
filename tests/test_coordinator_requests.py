"""Coordinator provider turns in the ledger: hidden retries are new requests, and
settling a turn ends every earlier request unknown (resource-ledger.md 3)."""

from __future__ import annotations

import pytest

from workcenter.application import WorkCenter
from workcenter.domain import resource_ledger as rl
from workcenter.service_layer.handlers.resource_ledger import BudgetCommands

REQUEST = {"messages": [{"role": "user", "content": "Decide"}], "max_tokens": 100}  # 117


def _item(wc: WorkCenter, **limits: int):  # type: ignore[no-untyped-def]
    return wc.create_work_item(title="t", goal="g", limits=limits or None)


def test_first_dispatch_reserves_the_turn_id(wc: WorkCenter, budget: BudgetCommands) -> None:
    item = _item(wc)
    admission = budget.reserve_coordinator_request(item.id, turn_id="turn-1", request=REQUEST)
    assert admission.allowed and admission.request_id == "turn-1"
    row = wc.ledger(item.id).reservations["turn-1"]
    assert (row.kind, row.run_id, row.estimated_tokens, row.status) == (
        "coordinator",
        None,
        117,
        "reserved",
    )


def test_a_hidden_retry_is_a_second_request_and_the_first_ends_unknown(
    wc: WorkCenter, budget: BudgetCommands
) -> None:
    item = _item(wc)
    budget.reserve_coordinator_request(item.id, turn_id="turn-1", request=REQUEST)
    retry = budget.reserve_coordinator_request(item.id, turn_id="turn-1", request=REQUEST)
    assert retry.allowed and retry.request_id.startswith("turn-1:retry:")
    ledger = wc.ledger(item.id)
    assert ledger.request_count == 2
    first = ledger.reservations["turn-1"]
    assert first.status == "unknown" and first.charged_tokens == 117
    assert ledger.reservations[retry.request_id].status == "reserved"
    assert rl.turn_request_ids(ledger, "turn-1") == ["turn-1", retry.request_id]


def test_settling_a_turn_reports_the_newest_and_keeps_the_rest_charged(
    wc: WorkCenter, budget: BudgetCommands
) -> None:
    item = _item(wc)
    budget.reserve_coordinator_request(item.id, turn_id="turn-1", request=REQUEST)
    retry = budget.reserve_coordinator_request(item.id, turn_id="turn-1", request=REQUEST)
    assert budget.settle_coordinator_turn(
        item.id, "turn-1", usage={"input_tokens": 30, "output_tokens": 20}
    )
    ledger = wc.ledger(item.id)
    newest = ledger.reservations[retry.request_id]
    assert (newest.status, newest.charged_tokens) == ("reported", 50)
    assert ledger.reservations["turn-1"].charged_tokens == 117
    assert ledger.charged_tokens == 167


def test_settling_an_unknown_turn_writes_nothing(wc: WorkCenter, budget: BudgetCommands) -> None:
    item = _item(wc)
    before = wc.event_count()
    assert not budget.settle_coordinator_turn(item.id, "no-such-turn", usage=None)
    assert wc.event_count() == before


def test_a_retry_past_the_request_limit_is_denied_and_stops(
    wc: WorkCenter, budget: BudgetCommands
) -> None:
    item = _item(wc, max_requests=1)
    budget.reserve_coordinator_request(item.id, turn_id="turn-1", request=REQUEST)
    denied = budget.reserve_coordinator_request(item.id, turn_id="turn-1", request=REQUEST)
    assert not denied.allowed and denied.code == "work_item_requests_exhausted"
    ledger = wc.ledger(item.id)
    assert ledger.request_count == 1
    assert ledger.stop_reason is not None
    assert ledger.stop_reason.code == "work_item_requests_exhausted"
    assert wc.work_item(item.id).stopped == "work_item_requests_exhausted"


@pytest.mark.parametrize("complete", [True, False])
def test_an_incomplete_turn_stays_unknown_at_its_estimate(
    wc: WorkCenter, budget: BudgetCommands, complete: bool
) -> None:
    item = _item(wc)
    budget.reserve_coordinator_request(item.id, turn_id="turn-1", request=REQUEST)
    budget.settle_coordinator_turn(
        item.id, "turn-1", usage={"output_tokens": 10}, complete=complete
    )
    row = wc.ledger(item.id).reservations["turn-1"]
    if complete:
        assert (row.status, row.charged_tokens) == ("reported", 10)
    else:
        assert (row.status, row.charged_tokens) == ("unknown", 117)
