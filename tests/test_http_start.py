"""``start`` wherever a user works: ``POST /api/work-items/{id}/start`` under If-Match,
and ``workcenter start ID --expected-version N``; a stale version, a started item and
an unknown one are refused and write nothing."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient
from http_client import DYNAMIC, LINEAR, client, versions_of

from workcenter.adapters.cli import cli
from workcenter.application import WorkCenter


@pytest.fixture
def wc(db_path: Path) -> Iterator[WorkCenter]:
    with WorkCenter.open(db_path) as center:
        yield center


@pytest.fixture
def api(wc: WorkCenter) -> TestClient:
    return client(wc)


def draft(api: TestClient, body: dict[str, object]) -> tuple[str, str]:
    response = api.post("/api/work-items", json=body | {"start": False})
    assert response.status_code == 201 and response.json()["status"] == "draft"
    return response.json()["id"], response.headers["ETag"]


def test_start_a_linear_draft_over_http(api: TestClient, wc: WorkCenter) -> None:
    item_id, etag = draft(api, LINEAR)
    before = wc.event_count()
    missing = api.post(f"/api/work-items/{item_id}/start", json={})
    assert missing.status_code == 428 and wc.event_count() == before
    stale = api.post(f"/api/work-items/{item_id}/start", json={}, headers={"If-Match": '"9.1"'})
    assert stale.status_code == 412 and stale.headers["ETag"] == versions_of(etag)
    assert wc.event_count() == before
    started = api.post(f"/api/work-items/{item_id}/start", json={}, headers={"If-Match": etag})
    assert started.status_code == 200, started.text
    assert started.json()["status"] == "ready" and started.headers["ETag"] != etag
    assert wc.work_item(item_id).status == "ready"  # type: ignore[arg-type]
    events = wc.event_count()
    again = api.post(
        f"/api/work-items/{item_id}/start", json={}, headers={"If-Match": started.headers["ETag"]}
    )
    # Its first stage is ready: starting again is a no-op (lifecycle.md 3.1).
    assert again.status_code == 200 and wc.event_count() == events
    cancelled = api.post(
        f"/api/work-items/{item_id}/cancel", json={}, headers={"If-Match": again.headers["ETag"]}
    )
    events = wc.event_count()
    refused = api.post(
        f"/api/work-items/{item_id}/start", json={}, headers={"If-Match": cancelled.headers["ETag"]}
    )
    assert refused.status_code == 409 and refused.json()["title"] == "CommandRefused"
    assert wc.event_count() == events


def test_start_a_dynamic_draft_over_http_and_refusals_write_nothing(
    api: TestClient, wc: WorkCenter
) -> None:
    item_id, etag = draft(api, DYNAMIC)
    started = api.post(f"/api/work-items/{item_id}/start", json={}, headers={"If-Match": etag})
    assert started.status_code == 200 and started.json()["status"] == "running"
    before = wc.event_count()
    twice = api.post(
        f"/api/work-items/{item_id}/start", json={}, headers={"If-Match": started.headers["ETag"]}
    )
    assert twice.status_code == 409 and wc.event_count() == before
    unknown = api.post(
        "/api/work-items/00000000-0000-0000-0000-000000000000/start",
        json={},
        headers={"If-Match": '"1.1"'},
    )
    assert unknown.status_code == 404 and wc.event_count() == before
    extra = api.post(
        f"/api/work-items/{item_id}/start", json={"now": True}, headers={"If-Match": '"1.1"'}
    )
    assert extra.status_code == 422 and wc.event_count() == before


def test_openapi_documents_start(api: TestClient) -> None:
    paths = api.get("/openapi.json").json()["paths"]
    assert "post" in paths["/api/work-items/{item_id}/start"]


def test_cli_start_with_the_version_seen(db_path: Path, wc: WorkCenter) -> None:
    item = wc.create_work_item(
        title="t", goal="g", mode="linear", stages=["a"], acceptance_criteria=["c"]
    )
    runner = CliRunner()
    base = ["--db", str(db_path), "start", str(item.id)[:8]]
    before = wc.event_count()
    stale = runner.invoke(cli, [*base, "--expected-version", str(item.version + 3)])
    assert stale.exit_code == 2 and stale.output.startswith("VersionConflict: "), stale.output
    assert wc.event_count() == before
    no_version = runner.invoke(cli, base)
    assert no_version.exit_code == 2 and "--expected-version" in no_version.output
    done = runner.invoke(cli, [*base, "--expected-version", str(item.version), "--json"])
    assert done.exit_code == 0, done.output
    started = json.loads(done.output)
    assert started["item"]["status"] == "ready" and started["changed"] is True
    # Started again: nothing is written, and the CLI does not say it started anything.
    events = wc.event_count()
    version = ["--expected-version", str(started["item"]["version"])]
    again = runner.invoke(cli, [*base, *version])
    assert again.exit_code == 0 and again.output.startswith(
        "already started (nothing written): WorkItem is ready"
    )
    assert json.loads(runner.invoke(cli, [*base, *version, "--json"]).output)["changed"] is False
    assert wc.event_count() == events
    wc.cancel(item.id)
    events = wc.event_count()
    latest = wc.work_item(item.id).version
    refused_start = runner.invoke(cli, [*base, "--expected-version", str(latest)])
    assert refused_start.exit_code == 2, refused_start.output
    assert refused_start.output.startswith(
        "CommandRefused: Cannot start a WorkItem that is cancelled"
    )
    assert wc.event_count() == events


def test_cli_start_of_a_dynamic_draft_says_what_happens_next(db_path: Path, wc: WorkCenter) -> None:
    item = wc.create_work_item(title="t", goal="g", acceptance_criteria=["c"])
    result = CliRunner().invoke(
        cli,
        ["--db", str(db_path), "start", str(item.id), "--expected-version", str(item.version)],
    )
    assert result.exit_code == 0, result.output
    assert result.output.startswith("started: WorkItem is running")
    assert "coordinate" in result.output
