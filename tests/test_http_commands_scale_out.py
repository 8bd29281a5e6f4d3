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
