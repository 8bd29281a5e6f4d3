"""Issue 24, ADR-0049: a Run's model request is admitted only while the Run is live,
the fence of ``finish_run``: a Run whose lease was lost and whose Action was claimed
again, or whose lease ran out, cannot reserve, and nothing is written."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from conftest import FakeClock, action_spec, claim, create_dynamic, plan, refused

from workcenter.adapters.metered import MeteredProvider
from workcenter.application import Claim, WorkCenter
from workcenter.domain.errors import InvalidInput, NotFound, StaleRun

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


# --- a request named by its Run's id alone (``run_id=``) -----------------------------


def test_a_run_id_that_names_no_run_of_the_item_is_refused(wc: WorkCenter) -> None:
    """``run_id`` once took any UUID (a made-up one, the item's own id) and recorded it on
    the ledger as the request's Run. An id that is no Run of the item is NotFound, the
    README's rule for an id of the wrong kind; a malformed one is NotFound too, as for
    every id the API looks up (``work_item("not-a-uuid")``)."""
    run = claimed(wc)
    item_id = run.work_item_id
    ledger = wc.ledger(item_id)
    for wrong in (uuid.uuid4(), item_id, run.action_id, str(uuid.uuid4()), "not-a-uuid"):
        with refused(wc, NotFound, "Run"):
            wc.reserve_request(item_id, request=REQUEST, run_id=wrong)  # type: ignore[arg-type]
    with refused(wc, InvalidInput, "Run id must be a UUID"):
        wc.reserve_request(item_id, request=REQUEST, run_id=5)  # type: ignore[arg-type]
    assert wc.ledger(item_id) == ledger


def test_a_run_id_of_another_item_is_refused(wc: WorkCenter) -> None:
    """The item's ledger holds its own Runs' requests only: from another item, a Run is
    one it does not have (NotFound, nothing written)."""
    run = claimed(wc)
    other = create_dynamic(wc, title="Another")
    with refused(wc, NotFound, str(run.run_id)):
        wc.reserve_request(other.id, request=REQUEST, run_id=run.run_id)


def test_a_coordinator_request_names_no_run(wc: WorkCenter) -> None:
    """As with ``run=``: a Run's request is of kind action (a Coordinator request with a
    Run's id was counted against that Run's requests)."""
    run = claimed(wc)
    with refused(wc, InvalidInput, "kind action"):
        wc.reserve_request(run.work_item_id, request=REQUEST, run_id=run.run_id, kind="coordinator")


def test_a_run_id_of_the_item_reserves_whether_the_run_is_live_or_ended(
    wc: WorkCenter,
) -> None:
    """Named by its id alone the Run is not fenced (``run=`` is the fence): any Run of the
    item, of any of its Actions, may be named."""
    item_id = create_dynamic(wc).id
    plan(wc, item_id, action_spec(maxAttempts=3), action_spec("test", "Run it"))
    first = claim(wc)
    wc.interrupt(first, reason="stopped")
    later = [claim(wc), claim(wc)]
    for run_id in (first.run_id, *(c.run_id for c in later), str(later[0].run_id)):
        admission = wc.reserve_request(item_id, request=REQUEST, run_id=run_id)  # type: ignore[arg-type]
        assert wc.ledger(item_id).reservations[admission.request_id].run_id == uuid.UUID(
            str(run_id)
        )
