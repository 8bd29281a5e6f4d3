"""Heartbeats and ledger writes keep the detail view at the head with a marker
(ADR-0076): workers that renew and reserve interleaved never leave the view behind for
each other, and a rebuild stores the rows the saves stored."""

from __future__ import annotations

from typing import Any
from uuid import UUID

import pytest
from conftest import (
    BACKENDS,
    FakeClock,
    claim,
    create_dynamic,
    create_linear,
    detail_built,
    plan,
    report,
    stored_detail,
    stored_details,
)

from workcenter.application import WorkCenter
from workcenter.projections.detail import DEFERRED, Detail

REQUEST = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 64}


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _marker(wc: WorkCenter, item_id: UUID) -> bool:
    return stored_detail(wc, item_id) == DEFERRED


def test_another_workers_renewal_leaves_the_view_at_the_head(
    wc: WorkCenter, location: str, clock: FakeClock
) -> None:
    """Before ADR-0076 a renewal left the view behind, and the next save of any other
    item found it so: on PostgreSQL its one-exchange write was sent back to two
    exchanges, most cycles with four workers."""
    first = create_linear(wc, title="first", stages=("implement",))
    second = create_linear(wc, title="second", stages=("implement",))
    clock.advance(1)
    other = WorkCenter.open(location, clock=clock, boot_id="other-worker", create=False)
    try:
        mine = claim(wc)
        theirs = claim(other, "worker-2")
        assert {mine.work_item_id, theirs.work_item_id} == {first.id, second.id}
        other.renew_lease(theirs)
        assert _marker(wc, theirs.work_item_id)
        other.reserve_request(theirs.work_item_id, request=REQUEST, run_id=theirs.run_id)
        assert wc.projections.position(Detail.name) == wc.event_count()
        wc.finish_run(mine, report())
        assert not _marker(wc, mine.work_item_id)
        assert getattr(wc.store.recorder, "fallbacks", 0) == 0
        assert wc.detail(mine.work_item_id)["status"] == "done"  # type: ignore[index]
        theirs_read = wc.detail(theirs.work_item_id)
        assert theirs_read is not None and theirs_read["status"] == "running"
        live = stored_details(wc)
        wc.maintenance.rebuild_projection(Detail.name)
        assert stored_details(wc) == live
    finally:
        other.close()


@pytest.mark.parametrize("last", ["renewal", "reservation", "finish", "claim"])
def test_a_rebuild_stores_the_rows_the_saves_stored(
    wc: WorkCenter, clock: FakeClock, last: str
) -> None:
    """Marker or DTO is decided by the item's last event in a batch, so the view's rows
    do not depend on how the events were batched: one command at a time live, many at a
    time in a rebuild."""
    item = create_linear(wc, stages=("implement",))
    clock.advance(1)
    claimed = claim(wc)
    steps: dict[str, Any] = {
        "renewal": lambda: wc.renew_lease(claimed),
        "reservation": lambda: wc.reserve_request(item.id, request=REQUEST, run_id=claimed.run_id),
        "finish": lambda: wc.finish_run(claimed, report()),
    }
    if last != "claim":
        clock.advance(1)
        wc.renew_lease(claimed)
        clock.advance(1)
        steps[last]()
    live = stored_details(wc)
    assert _marker(wc, item.id) == (last in ("renewal", "reservation", "claim"))
    read = wc.detail(item.id)
    wc.maintenance.rebuild_projection(Detail.name)
    assert stored_details(wc) == live
    assert wc.detail(item.id) == read


def test_a_claim_leaves_a_marker_read_as_the_dto_it_would_have_stored(
    wc: WorkCenter, clock: FakeClock
) -> None:
    """ADR-0086: a Run's first heartbeat replaced the claim's DTO by a marker anyway, so
    the claim stores the marker itself; a read builds the DTO the claim stored before,
    and the Run's finish stores its DTO."""
    item = create_linear(wc, stages=("implement",))
    clock.advance(1)
    claimed = claim(wc)
    assert _marker(wc, item.id)
    as_stored_before = detail_built(wc, item.id, wc.history(item.id)[-1].timestamp)
    assert wc.detail(item.id) == as_stored_before
    assert as_stored_before["actions"][0]["status"] == "running"
    assert _marker(wc, item.id)  # the read wrote nothing
    clock.advance(1)
    wc.finish_run(claimed, report())
    assert not _marker(wc, item.id)
    assert getattr(wc.store.recorder, "fallbacks", 0) == 0


def test_a_dynamic_items_finished_run_stores_its_dto(wc: WorkCenter, clock: FakeClock) -> None:
    """A dynamic item goes back to ``running`` (a ``StatusChanged``) when its Run ends:
    that is no Run's start, so the finish stores the DTO (ADR-0086)."""
    item = create_dynamic(wc)
    clock.advance(1)
    plan(wc, item.id)
    claimed = claim(wc)
    assert _marker(wc, item.id)
    clock.advance(1)
    wc.finish_run(claimed, report())
    assert wc.work_item(item.id).status == "running"
    assert not _marker(wc, item.id)
    live = stored_details(wc)
    wc.maintenance.rebuild_projection(Detail.name)
    assert stored_details(wc) == live


def test_a_claim_by_a_process_that_never_read_the_items_conversation_writes_at_once(
    wc: WorkCenter, other: WorkCenter, clock: FakeClock
) -> None:
    """A claim's marker is built from no stream, so its write assumes none: on
    PostgreSQL another process's claim of an item with a conversation it never loaded
    is not sent back to the two-exchange write (ADR-0086)."""
    item = create_linear(wc, stages=("implement",))
    wc.post_user_message(item.id, "Please keep the summary short")
    clock.advance(1)
    claimed = claim(other, "worker-2")
    assert claimed.work_item_id == item.id
    assert _marker(other, item.id)
    assert getattr(other.store.recorder, "fallbacks", 0) == 0
    assert other.detail(item.id)["actions"][0]["status"] == "running"
