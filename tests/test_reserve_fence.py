"""Issue 24, ADR-0049: a Run's model request is admitted only while the Run is live,
the fence of ``finish_run``: a Run whose lease was lost and whose Action was claimed
again, or whose lease ran out, cannot reserve, and nothing is written."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import FakeClock, action_spec, claim, create_dynamic, plan, refused

from workcenter.adapters.metered import MeteredProvider
from workcenter.application import Claim, WorkCenter
from workcenter.domain.errors import InvalidInput, StaleRun

REQUEST: dict[str, Any] = {"messages": [{"role": "user", "content": "Go"}], "max_tokens": 50}


def claimed(wc: WorkCenter) -> Claim:
    plan(wc, create_dynamic(wc).id, action_spec(maxAttempts=3))
    return claim(wc, lease_seconds=60)


def test_a_live_run_reserves(wc: WorkCenter) -> None:
    run = claimed(wc)
    admission = wc.reserve_request(run.work_item_id, request=REQUEST, run=run)
    assert admission.allowed
    assert wc.ledger(run.work_item_id).reservations[admission.request_id].run_id == run.run_id


def test_a_run_claimed_again_cannot_reserve(wc: WorkCenter, clock: FakeClock) -> None:
    stale = claimed(wc)
    clock.advance(61)
    assert wc.recover() == [stale.run_id]
    again = claim(wc)
    assert again.action_id == stale.action_id and again.lease_epoch == stale.lease_epoch + 1
    ledger = wc.ledger(stale.work_item_id)
    with refused(wc, StaleRun):
        wc.reserve_request(stale.work_item_id, request=REQUEST, run=stale)
    with refused(wc, StaleRun):
        wc.reserve_request(stale.work_item_id, request=REQUEST, run=stale.ref)
    calls: list[object] = []
    with refused(wc, StaleRun):
        MeteredProvider.for_claim(wc, stale, provider=calls.append)(REQUEST)
    assert calls == []  # never sent
    assert wc.ledger(stale.work_item_id) == ledger
    assert wc.reserve_request(again.work_item_id, request=REQUEST, run=again).allowed


def test_a_run_whose_lease_ran_out_cannot_reserve(wc: WorkCenter, clock: FakeClock) -> None:
    run = claimed(wc)
    clock.advance(60)  # not recovered yet: the lease alone has run out
    with refused(wc, StaleRun):
        wc.reserve_request(run.work_item_id, request=REQUEST, run=run)


def test_a_run_of_another_item_or_a_coordinator_request_is_refused(wc: WorkCenter) -> None:
    run = claimed(wc)
    other = create_dynamic(wc, title="Another")
    with refused(wc, InvalidInput, "not a Run of WorkItem"):
        wc.reserve_request(other.id, request=REQUEST, run=run)
    with refused(wc, InvalidInput, "kind action"):
        wc.reserve_request(run.work_item_id, request=REQUEST, run=run, kind="coordinator")
    with refused(wc, InvalidInput, "kind action"):
        wc.reserve_request(run.work_item_id, request=REQUEST, run=run, run_id=other.id)
    with refused(wc, InvalidInput, "Claim or a RunRef"):
        wc.reserve_request(run.work_item_id, request=REQUEST, run=run.run_id)  # type: ignore[arg-type]


@pytest.mark.parametrize("how", ["cancel", "interrupt"])
def test_an_ended_run_cannot_reserve(wc: WorkCenter, how: str) -> None:
    run = claimed(wc)
    if how == "cancel":  # the item's denial, as before: nothing written either
        wc.cancel(run.work_item_id)
        before = wc.event_count()
        assert not wc.reserve_request(run.work_item_id, request=REQUEST, run=run).allowed
        assert wc.event_count() == before
        return
    wc.interrupt(run, reason="stopped")
    with refused(wc, StaleRun):
        wc.reserve_request(run.work_item_id, request=REQUEST, run=run)
