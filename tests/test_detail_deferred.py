"""A WorkItem that only its create wrote has its detail DTO built when read (ADR-0073):
the row holds a marker, a read builds the DTO the create would have stored and
writes nothing, the next command that changes the item stores its DTO, and a
rebuild stores the same rows as the live view."""

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
    stored_detail,
    stored_details,
)

from workcenter.application import WorkCenter
from workcenter.projections.detail import DEFERRED, Detail


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _event_count(wc: WorkCenter) -> int:
    return int(wc.changes.head())


def _as_a_create_stored_it(wc: WorkCenter, item_id: UUID) -> dict[str, Any]:
    """The DTO the view stored for a create before ADR-0073: built from the states after
    it, its ``now`` the time of the create's events."""
    return detail_built(wc, item_id, wc.work_item(item_id).created_at)


@pytest.mark.parametrize(
    "create",
    [
        lambda wc: create_linear(wc),
        lambda wc: create_dynamic(wc),
        lambda wc: create_linear(wc, start=False),
    ],
    ids=["linear", "dynamic", "draft"],
)
def test_a_created_item_is_read_as_the_dto_its_create_would_have_stored(
    wc: WorkCenter, create: Any
) -> None:
    item = create(wc)
    assert stored_detail(wc, item.id) == DEFERRED
    before = _event_count(wc)
    assert wc.detail(item.id) == _as_a_create_stored_it(wc, item.id)
    # The read wrote nothing: no event, and the row is still the marker.
    assert _event_count(wc) == before
    assert stored_detail(wc, item.id) == DEFERRED


def test_the_next_command_on_the_item_stores_its_dto(wc: WorkCenter, clock: FakeClock) -> None:
    item = create_linear(wc)
    other = create_linear(wc, title="Another item")
    clock.advance(1)
    claimed = claim(wc)
    assert claimed.work_item_id == item.id
    assert stored_detail(wc, item.id) == DEFERRED  # a Run's start leaves a marker (ADR-0086)
    clock.advance(1)
    wc.update_contract(item.id, expected_version=wc.work_item(item.id).version, title="Renamed")
    assert stored_detail(wc, item.id) != DEFERRED
    assert wc.detail(item.id)["actions"][0]["status"] == "running"
    assert stored_detail(wc, other.id) == DEFERRED  # a command on one item builds no other's DTO


def test_a_command_at_the_creation_time_leaves_the_marker(wc: WorkCenter) -> None:
    """The rule reads the events' times only (a clock that did not move since the create),
    so a live view and a rebuild paged anyhow decide alike; the DTO read is the one that
    command would have stored."""
    item = create_linear(wc)
    claim(wc)
    assert stored_detail(wc, item.id) == DEFERRED
    assert wc.detail(item.id)["actions"][0]["status"] == "running"
    assert wc.detail(item.id) == _as_a_create_stored_it(wc, item.id)


def test_a_rebuild_stores_the_rows_the_live_view_stored(wc: WorkCenter, clock: FakeClock) -> None:
    worked = create_linear(wc, title="Claimed")
    created = create_linear(wc, title="Only created")
    draft = create_dynamic(wc, start=False, title="A draft")
    clock.advance(1)
    claim(wc)
    wc.update_contract(worked.id, expected_version=wc.work_item(worked.id).version, title="Worked")
    live = stored_details(wc)
    assert live[worked.id.hex][1] != DEFERRED
    assert live[created.id.hex][1] == DEFERRED and live[draft.id.hex][1] == DEFERRED
    details = {i: wc.detail(i) for i in (created.id, worked.id, draft.id)}
    wc.maintenance.rebuild_projection(Detail.name)
    assert stored_details(wc) == live
    assert {i: wc.detail(i) for i in details} == details
