"""Issue 24, ADR-0049: a Run's model request is admitted only while the Run is live,
the fence of ``finish_run``: a Run whose lease was lost and whose Action was claimed
again, or whose lease ran out, cannot reserve, and nothing is written."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from conftest import FakeClock, action_spec, claim, create_dynamic, plan, refused
from http_client import client

from workcenter.adapters.metered import MeteredProvider
from workcenter.application import Claim, WorkCenter
from workcenter.domain.errors import CommandRefused, InvalidInput, NotFound, StaleRun

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
    with refused(wc, CommandRefused, f"Run {run.run_id} is not a Run of WorkItem {other.id}"):
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
    the ledger as the request's Run. An id that is no Run of the item is refused as an
    Action of another item is by ``retry`` or ``add_input`` (``CommandRefused``); a string
    that is no UUID names nothing (NotFound, as for every id the API parses)."""
    run = claimed(wc)
    item_id = run.work_item_id
    ledger = wc.ledger(item_id)
    for wrong in (uuid.uuid4(), item_id, run.action_id, str(uuid.uuid4())):
        with refused(wc, CommandRefused, f"is not a Run of WorkItem {item_id}"):
            wc.reserve_request(item_id, request=REQUEST, run_id=wrong)  # type: ignore[arg-type]
    with refused(wc, NotFound, "Run not-a-uuid not found"):
        wc.reserve_request(item_id, request=REQUEST, run_id="not-a-uuid")  # type: ignore[arg-type]
    with refused(wc, InvalidInput, "Run id must be a UUID"):
        wc.reserve_request(item_id, request=REQUEST, run_id=5)  # type: ignore[arg-type]
    assert wc.ledger(item_id) == ledger


def test_a_run_of_another_item_is_refused_alike_by_its_id_and_by_its_claim(
    wc: WorkCenter,
) -> None:
    """The Run exists but is not the item's: by ``run_id`` it was NotFound while by the
    Claim it was InvalidInput. Both are now the refusal every command gives an id of
    another item's Action or Run (``CommandRefused``), in the same words."""
    run = claimed(wc)
    other = create_dynamic(wc, title="Another")
    said = []
    for given in ({"run_id": run.run_id}, {"run": run}, {"run": run.ref}):
        with refused(wc, CommandRefused) as info:
            wc.reserve_request(other.id, request=REQUEST, **given)  # type: ignore[arg-type]
        said.append(str(info.value))
    assert said == [f"Run {run.run_id} is not a Run of WorkItem {other.id}"] * 3


def test_a_worker_fence_naming_another_items_run_is_refused_over_http(
    wc: WorkCenter,
) -> None:
    """The worker protocol takes the item from the fence's Action: a fence whose Run is
    another item's is no fence of that Action (``StaleRun``, a ``CommandRefused``: 409),
    and nothing is written."""
    api = client(wc)
    for title in ("One", "Two"):
        plan(wc, create_dynamic(wc, title=title).id, action_spec())
    fences = [
        api.post("/api/worker/claim", json={"worker": "w1", "bootId": "b"}).json()["fence"]
        for _ in range(2)
    ]
    crossed = fences[0] | {"runId": fences[1]["runId"]}
    before = wc.event_count()
    answer = api.post(
        "/api/worker/requests/reserve",
        json={"fence": crossed, "requestId": "r1", "request": REQUEST},
    )
    assert answer.status_code == 409, answer.text
    assert answer.json()["title"] == "StaleRun"
    assert wc.event_count() == before


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
