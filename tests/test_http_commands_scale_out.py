"""A command over HTTP answers with what it did, also where a projection runner keeps
the detail view (the scale-out deployment: writers with inline projections off,
ADR-0116, ADR-0122).

Found by acceptance testing: ``serve`` with ``WORKCENTER_INLINE_PROJECTIONS=0`` answered
every create with 404 "detail (the projection runner is behind)" although the item was
made (a client that retried on it made it twice), and a cancel with the DTO from before
the cancel. Here no runner runs at all: the answers must still be the commands'.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from conftest import BACKENDS, BOOT_ID, FakeClock
from http_client import LINEAR, client

from workcenter.application import WorkCenter


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def writer(location: str, clock: FakeClock) -> Iterator[WorkCenter]:
    with WorkCenter.open(
        location, clock=clock, boot_id=BOOT_ID, inline_projections=False
    ) as center:
        yield center


def test_a_command_answers_with_what_it_did_although_no_runner_keeps_the_view(
    writer: WorkCenter,
) -> None:
    with client(writer) as api:
        created = api.post("/api/work-items", json=LINEAR)
        assert created.status_code == 201, created.text
        item = created.json()
        assert item["title"] == LINEAR["title"] and item["status"] == "ready"
        cancelled = api.post(
            f"/api/work-items/{item['id']}/cancel",
            json={"reason": "not needed"},
            headers={"If-Match": created.headers["ETag"]},
        )
        assert cancelled.status_code == 200, cancelled.text
        assert cancelled.json()["status"] == "cancelled"
        assert cancelled.headers["ETag"] != created.headers["ETag"]
    assert len(writer.list_work_items()) == 1


def test_an_item_made_elsewhere_is_read_although_no_runner_has_reached_it(
    writer: WorkCenter, location: str, clock: FakeClock
) -> None:
    """Another writer makes an item, and no runner runs: the detail read brings the view
    up rather than answer 404 for an item that exists, which the list, progress, budget
    and timeline reads all showed (found by acceptance testing, ADR-0128)."""
    with WorkCenter.open(
        location, clock=clock, boot_id="elsewhere", inline_projections=False, create=False
    ) as elsewhere:
        made = elsewhere.create_work_item(
            title="Made elsewhere",
            goal="Ship",
            acceptance_criteria=["Tests pass"],
            delivery_target="response",
            mode="linear",
            start=True,
        )
    with client(writer) as api:
        read = api.get(f"/api/work-items/{made.id}")
        assert read.status_code == 200, read.text
        assert read.json()["title"] == "Made elsewhere"
        assert api.get(f"/api/work-items/{made.id}/timeline").status_code == 200
    assert writer.detail(made.id)["status"] == "ready"
