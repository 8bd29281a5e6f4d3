"""The HTTP API through FastAPI's TestClient: every endpoint, its ETag, the problem
documents (404, 409, 412, 413, 415, 421, 422, 428, 401, 403) and, for every refused
command, an event count left unchanged."""

from __future__ import annotations

import resource
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import pytest
from click.testing import CliRunner
from conftest import action_spec
from fastapi.testclient import TestClient
from http_client import DYNAMIC, LINEAR, client, versions_of

from workcenter.adapters import cli_serve
from workcenter.adapters.cli import cli
from workcenter.adapters.executors import echo
from workcenter.adapters.http import reads, server
from workcenter.adapters.http.guard import Policy, UnsafeServer
from workcenter.adapters.http.preconditions import Seen
from workcenter.adapters.worker import run_worker
from workcenter.application import WorkCenter

TOKEN = "s3cret-token-for-the-tests"
PROBLEM = "application/problem+json"


@pytest.fixture
def wc(db_path: Path) -> Iterator[WorkCenter]:
    with WorkCenter.open(db_path) as center:
        yield center


@pytest.fixture
def api(wc: WorkCenter) -> TestClient:
    return client(wc)


def create(api: TestClient, **changes: Any) -> dict[str, Any]:
    response = api.post("/api/work-items", json=LINEAR | changes)
    assert response.status_code == 201, response.text
    return response.json() | {"etag": response.headers["ETag"]}


def problem(response: Any, status: int, title: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == PROBLEM
    body: dict[str, Any] = response.json()
    assert body["title"] == title and body["status"] == status
    assert body["type"].startswith("urn:workcenter:problem:")
    return body


def refused(wc: WorkCenter, response: Any, status: int, title: str, before: int) -> dict[str, Any]:
    body = problem(response, status, title)
    assert wc.event_count() == before, "a refused command wrote events"
    return body


def fail_current_action(wc: WorkCenter) -> str:
    claim = wc.claim_next("w1")
    assert claim is not None
    wc.finish_run(claim, {"outcome": "failed", "summary": "broke", "error": "boom"})
    return str(claim.action_id)


# --- reads ---------------------------------------------------------------------


def test_the_list_pages_summaries_with_goal_progress_and_a_position(
    api: TestClient, wc: WorkCenter
) -> None:
    empty = api.get("/api/work-items")
    assert empty.status_code == 200
    assert empty.json() == {"items": [], "total": 0, "limit": 50, "next": None, "position": 0}
    first = create(api, title="first")
    create(api, title="second", start=False)
    head = wc.event_count()
    page = api.get("/api/work-items", params={"limit": 1})  # newest first
    assert page.headers["ETag"] == f'"p{head}"'
    body = page.json()
    assert (body["total"], body["position"], len(body["items"])) == (2, head, 1)
    assert body["items"][0]["title"] == "second"
    assert body["items"][0]["goalProgress"] == {
        "completedCriteriaCount": 0,
        "totalCriteriaCount": 3,
        "deliveryStatus": "unmet",
    }
    ready = api.get("/api/work-items", params={"status": "ready"}).json()
    assert [row["id"] for row in ready["items"]] == [first["id"]]
    assert "actionStats" in ready["items"][0]  # the summary DTO of read-models.md 2.3


@pytest.mark.parametrize(
    "params",
    [{"status": "bogus"}, {"limit": 0}, {"limit": 101}, {"after": "5"}, {"q": "x" * 201}],
)
def test_bad_list_parameters_are_422(api: TestClient, params: dict[str, Any]) -> None:
    problem(api.get("/api/work-items", params=params), 422, "InvalidInput")


def test_the_detail_dto_carries_the_versions_to_echo_as_its_etag(
    api: TestClient, wc: WorkCenter
) -> None:
    item = create(api)
    response = api.get(f"/api/work-items/{item['id']}")
    assert response.status_code == 200
    dto = response.json()
    state = wc.work_item(dto_id := dto["id"])  # type: ignore[arg-type]
    control = wc.ledger(state.id).control_version
    assert versions_of(response.headers["ETag"]) == f'"{state.version}.{control}"'
    assert response.headers["ETag"] == item["etag"]  # the same bytes as the create's
    assert dto_id == item["id"] and dto["goalProgress"]["totalCriteriaCount"] == 3


@pytest.mark.parametrize("suffix", ["", "/progress", "/budget", "/timeline", "/audit"])
def test_every_item_read_is_404_for_an_unknown_item(api: TestClient, suffix: str) -> None:
    create(api)
    for unknown in (str(uuid4()), "not-an-id", "zzzz"):
        body = problem(api.get(f"/api/work-items/{unknown}{suffix}"), 404, "NotFound")
        assert unknown not in body["detail"]  # a refused input is never echoed (ADR-0057)


def test_progress_budget_and_timeline_after_a_worker_finished(
    api: TestClient, wc: WorkCenter
) -> None:
    item = create(api)
    run_worker(wc, echo, worker="w1", exit_when_idle=True, poll_seconds=0.01)
    etag = api.get(f"/api/work-items/{item['id']}").headers["ETag"]
    progress = api.get(f"/api/work-items/{item['id']}/progress")
    assert versions_of(progress.headers["ETag"]) == versions_of(etag)
    goal = progress.json()["goalProgress"]
    assert [c["status"] for c in goal["criteria"]] == ["passed"] * 3
    assert all(c["evidenceRunIds"] for c in goal["criteria"])
    assert goal["delivery"]["status"] == "passed"
    budget = api.get(f"/api/work-items/{item['id']}/budget")
    assert versions_of(budget.headers["ETag"]) == versions_of(etag)
    control = budget.json()["executionControl"]
    assert control["limits"]["maxTokens"] == 2_000_000 and "usage" in control
    timeline = api.get(f"/api/work-items/{item['id']}/timeline").json()
    assert [a["type"] for a in timeline["actions"]] == ["triage", "implement", "deliver"]
    for action in timeline["actions"]:
        (run,) = action["runs"]
        assert run["status"] == "completed" and run["endedAt"] >= run["startedAt"]
        assert set(run) <= {"id", "ordinal", "generation", "attempt", "status", "worker",
                            "startedAt", "endedAt", "deferred", "leaseExpired"}  # fmt: skip
        assert run["worker"] == "w1"


SECRET = "token=hunter2hunter2hunter2"


def test_audit_filters_and_the_state_at_a_version(api: TestClient, wc: WorkCenter) -> None:
    item = create(api, title=f"Deploy with {SECRET}")
    run_worker(wc, echo, worker="w1", exit_when_idle=True, poll_seconds=0.01)
    url = f"/api/work-items/{item['id']}/audit"
    everything = api.get(url).json()["events"]
    assert [e["position"] for e in everything] == sorted(e["position"] for e in everything)
    assert everything[0]["type"] == "WorkItemCreated"
    assert "hunter2" not in str(everything)  # sanitised by default
    finished = api.get(url, params={"type": "RunFinished"}).json()["events"]
    assert len(finished) == 3 and {e["type"] for e in finished} == {"RunFinished"}
    action = finished[0]["actionId"]
    only = api.get(url, params={"action": action}).json()["events"]
    assert only and {e["actionId"] for e in only} == {action}
    assert len(api.get(url, params={"limit": 2}).json()["events"]) == 2
    at = api.get(url, params={"at": 1}).json()
    assert at["state"]["item"]["status"] == "draft" and at["state"]["actions"] == []
    problem(api.get(url, params={"at": 1, "atTime": "2026-01-01"}), 422, "InvalidInput")
    problem(api.get(url, params={"atTime": "yesterday"}), 422, "InvalidInput")
    problem(api.get(url, params={"action": "x"}), 422, "InvalidInput")
    problem(api.get(url, params={"type": "RunFinishd"}), 422, "InvalidInput")


def test_the_audit_says_when_older_events_were_left_and_keeps_within_its_budget(
    api: TestClient, wc: WorkCenter, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A long-lived item's newest 100 audit rows were 1.9 MB, fetched by the dashboard
    at every look, and a cut audit said nothing of what it left (found by acceptance
    testing, ADR-0136): ``more`` says older events match, and the newest rows that fit
    the budget (512 KiB; 100 KB here, for a small item) are kept."""
    item = create(api)
    url = f"/api/work-items/{item['id']}/audit"
    assert api.get(url).json()["more"] is False
    assert api.get(url, params={"limit": 2}).json()["more"] is True

    def big(claim: Any) -> dict[str, Any]:
        return echo(claim) | {"response": "r" * 60_000}

    run_worker(wc, big, worker="w1", exit_when_idle=True, poll_seconds=0.01)
    monkeypatch.setattr(reads, "MAX_DTO_BYTES", 100_000)
    answer = api.get(url)
    body = answer.json()
    assert len(answer.content) <= 100_000 and body["more"] is True
    every = wc.audit(UUID(item["id"]))
    kept = [e["position"] for e in body["events"]]
    assert kept == [r.position for r in every][-len(kept) :]  # the newest, in order
    assert 0 < len(kept) < len(every)


def test_raw_audit_needs_the_token_presented(wc: WorkCenter) -> None:
    local = client(wc)
    item = create(local, title=f"Deploy with {SECRET}")
    url = f"/api/work-items/{item['id']}/audit"
    problem(local.get(url, params={"raw": True}), 403, "Forbidden")  # no token configured
    guarded = client(wc, Policy.for_host("127.0.0.1", token=TOKEN))
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    assert "hunter2" not in str(guarded.get(url, headers=bearer).json())
    raw = guarded.get(url, params={"raw": True}, headers=bearer).json()["events"]
    assert SECRET in raw[0]["payload"]["title"]


# --- commands ------------------------------------------------------------------


def test_create_answers_201_with_location_and_etag(api: TestClient, wc: WorkCenter) -> None:
    response = api.post(
        "/api/work-items",
        json=LINEAR
        | {
            "stages": ["triage", {"type": "implement", "maxAttempts": 3}],
            "limits": {"maxTokens": 5000},
        },
    )
    assert response.status_code == 201
    dto = response.json()
    assert response.headers["Location"] == f"/api/work-items/{dto['id']}"
    assert versions_of(response.headers["ETag"]) == f'"{dto["planRevision"]}.1"'
    assert dto["status"] == "ready" and dto["executionControl"]["limits"]["maxTokens"] == 5000
    assert wc.work_item(dto["id"]).max_attempts_for("implement") == 3


def test_a_create_sent_again_with_its_request_id_answers_the_first_item(
    api: TestClient, wc: WorkCenter
) -> None:
    first = create(api, requestId="form-1")
    before = wc.event_count()
    again = create(api, requestId="form-1")
    assert again["id"] == first["id"] and again["etag"] == first["etag"]
    assert wc.event_count() == before
    other = api.post("/api/work-items", json=LINEAR | {"requestId": "form-1", "title": "Other"})
    said = refused(wc, other, 409, "RequestIdUsed", before)
    assert said["type"].endswith("request_id_used")
    assert "a new WorkItem needs a new requestId" in said["detail"]  # the API's name
    assert create(api, requestId="form-2")["id"] != first["id"]


@pytest.mark.parametrize(
    ("body", "title"),
    [
        ({"goal": "no title"}, "InvalidInput"),
        (LINEAR | {"requestId": " "}, "InvalidInput"),
        (LINEAR | {"surprise": 1}, "InvalidInput"),
        (LINEAR | {"start": "yes"}, "InvalidInput"),
        (LINEAR | {"title": "   "}, "InvalidInput"),
        (LINEAR | {"title": "x" * 100_000}, "InvalidInput"),
        (LINEAR | {"mode": "graph"}, "InvalidInput"),
        (LINEAR | {"limits": {"maxTokens": -1}}, "InvalidInput"),
        (LINEAR | {"stages": ["Not A Slug"]}, "InvalidInput"),
    ],
)
def test_a_refused_create_writes_nothing(
    api: TestClient, wc: WorkCenter, body: dict[str, Any], title: str
) -> None:
    create(api)
    before = wc.event_count()
    refused(wc, api.post("/api/work-items", json=body), 422, title, before)


def test_commands_need_json_and_bounded_bodies(api: TestClient, wc: WorkCenter) -> None:
    before = wc.event_count()
    form = api.post("/api/work-items", content=b"title=x", headers={"Content-Type": "text/plain"})
    refused(wc, form, 415, "UnsupportedMediaType", before)
    huge = api.post(
        "/api/work-items",
        content=b'{"title": "' + b"x" * (1024 * 1024) + b'"}',
        headers={"Content-Type": "application/json"},
    )
    refused(wc, huge, 413, "PayloadTooLarge", before)
    broken = api.post("/api/work-items", content=b"{", headers={"Content-Type": "application/json"})
    refused(wc, broken, 422, "InvalidInput", before)


def test_cancel_needs_the_current_etag(api: TestClient, wc: WorkCenter) -> None:
    item = create(api)
    url = f"/api/work-items/{item['id']}/cancel"
    before = wc.event_count()
    refused(wc, api.post(url, json={}), 428, "PreconditionRequired", before)
    refused(wc, api.post(url, json={}, headers={"If-Match": "*"}), 428, "PreconditionRequired",
            before)  # fmt: skip
    refused(wc, api.post(url, json={}, headers={"If-Match": "W/\"4.1\""}), 412,
            "PreconditionFailed", before)  # fmt: skip
    run_worker(wc, echo, worker="w1", max_runs=1, poll_seconds=0.01)  # the item moves on
    before = wc.event_count()
    stale = api.post(url, json={"reason": "too late"}, headers={"If-Match": item["etag"]})
    body = refused(wc, stale, 412, "PreconditionFailed", before)
    current = api.get(f"/api/work-items/{item['id']}").headers["ETag"]
    assert stale.headers["ETag"] == versions_of(current) and versions_of(current) in body["detail"]
    done = api.post(url, json={"reason": "enough"}, headers={"If-Match": current})
    assert done.status_code == 200 and done.json()["status"] == "cancelled"
    assert done.headers["ETag"] != current
    missing = api.post(f"/api/work-items/{uuid4()}/cancel", json={}, headers={"If-Match": current})
    refused(wc, missing, 404, "NotFound", wc.event_count())


def test_resume_a_cancelled_item_and_refuse_resuming_a_live_one(
    api: TestClient, wc: WorkCenter
) -> None:
    item = create(api)
    url = f"/api/work-items/{item['id']}"
    before = wc.event_count()
    live = api.post(f"{url}/resume", json={}, headers={"If-Match": item["etag"]})
    refused(wc, live, 409, "CommandRefused", before)
    cancelled = api.post(f"{url}/cancel", json={}, headers={"If-Match": item["etag"]})
    resumed = api.post(f"{url}/resume", json={}, headers={"If-Match": cancelled.headers["ETag"]})
    assert resumed.status_code == 200 and resumed.json()["status"] == "ready"


def test_a_command_another_beat_to_the_item_is_412_with_the_current_etag(
    api: TestClient, wc: WorkCenter, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two people resume one cancelled item at the same moment: both pass the If-Match
    check, one resumes, and the other's resume, refused by the service for a state its
    sender never saw, was 409 CommandRefused ("only a cancelled or stopped WorkItem can be
    resumed"); where the versions clashed in the write, 412 without the ETag to retry
    with (found by acceptance testing, ADR-0138). Either is 412 with the current ETag."""
    item = create(api)
    url = f"/api/work-items/{item['id']}"
    cancelled = api.post(f"{url}/cancel", json={}, headers={"If-Match": item["etag"]})
    check = Seen.check

    written: list[int] = []

    def beaten(self: Seen, center: WorkCenter, work_item_id: UUID) -> None:
        check(self, center, work_item_id)
        center.resume(  # the other person's, between this check and this command
            work_item_id,
            expected_version=self.item_version,
            expected_ledger_version=self.control_version,
        )
        written.append(center.event_count())

    monkeypatch.setattr(Seen, "check", beaten)
    lost = api.post(f"{url}/resume", json={}, headers={"If-Match": cancelled.headers["ETag"]})
    body = refused(wc, lost, 412, "PreconditionFailed", written[0])
    current = versions_of(api.get(url).headers["ETag"])
    assert lost.headers["ETag"] == current and current in body["detail"]


def test_extend_budget_raises_limits_under_if_match(api: TestClient, wc: WorkCenter) -> None:
    item = create(api)
    url = f"/api/work-items/{item['id']}/budget/extend"
    before = wc.event_count()
    refused(wc, api.post(url, json={"maxTokens": 1000}), 428, "PreconditionRequired", before)
    empty = api.post(url, json={}, headers={"If-Match": item["etag"]})
    refused(wc, empty, 422, "InvalidInput", before)
    typo = api.post(url, json={"max_tokenz": 5}, headers={"If-Match": item["etag"]})
    refused(wc, typo, 422, "InvalidInput", before)
    raised = api.post(url, json={"maxTokens": 1000}, headers={"If-Match": item["etag"]})
    assert raised.status_code == 200
    assert raised.json()["executionControl"]["limits"]["maxTokens"] == 2_001_000
    again = api.post(url, json={"maxTokens": 1000}, headers={"If-Match": item["etag"]})
    refused(wc, again, 412, "PreconditionFailed", wc.event_count())  # the ETag moved on


def test_retry_and_guide_an_action(api: TestClient, wc: WorkCenter) -> None:
    item = create(api)
    action_id = fail_current_action(wc)
    base = f"/api/work-items/{item['id']}"
    etag = api.get(base).headers["ETag"]
    before = wc.event_count()
    no_text = api.post(f"{base}/actions/{action_id}/guide", json={}, headers={"If-Match": etag})
    refused(wc, no_text, 422, "InvalidInput", before)
    stranger = api.post(f"{base}/actions/{uuid4()}/retry", json={}, headers={"If-Match": etag})
    refused(wc, stranger, 404, "NotFound", before)
    wrong_generation = api.post(
        f"{base}/actions/{action_id}/retry",
        json={"expectedGeneration": 7},
        headers={"If-Match": etag},
    )
    refused(wc, wrong_generation, 409, "CommandRefused", before)
    retried = api.post(
        f"{base}/actions/{action_id}/retry",
        json={"answer": "try again", "expectedGeneration": 1},
        headers={"If-Match": etag},
    )
    assert retried.status_code == 200, retried.text
    replacement = retried.json()["currentActionId"]
    assert replacement != action_id  # a linear item replaces the retried Action
    assert wc.action(action_id).status == "superseded"  # type: ignore[arg-type]
    assert wc.action(replacement).status == "ready"  # type: ignore[arg-type]
    etag = retried.headers["ETag"]
    guided = api.post(
        f"{base}/actions/{replacement}/guide",
        json={"guidance": "use the other import"},
        headers={"If-Match": etag},
    )
    assert guided.status_code == 200, guided.text
    assert guided.json()["currentActionId"] not in (action_id, replacement)


def test_input_to_a_ready_action_and_to_a_running_ones_run(api: TestClient, wc: WorkCenter) -> None:
    response = api.post("/api/work-items", json=DYNAMIC)
    assert response.status_code == 201, response.text
    item = response.json()
    wc.plan_actions(
        UUID(item["id"]),
        expected_version=wc.work_item(UUID(item["id"])).version,
        actions=[action_spec(objective="a"), action_spec(objective="b")],
    )
    first, second = (e.action_id for e in wc.work_item(UUID(item["id"])).plan)
    running = wc.claim_next("w1")
    assert running is not None and running.action_id == first
    base = f"/api/work-items/{item['id']}"
    etag = api.get(base).headers["ETag"]
    before = wc.event_count()
    url = f"{base}/actions/{second}/input"
    blank = api.post(url, json={"text": " ", "expectedGeneration": 1}, headers={"If-Match": etag})
    refused(wc, blank, 422, "InvalidInput", before)
    no_generation = api.post(url, json={"text": "x"}, headers={"If-Match": etag})
    refused(wc, no_generation, 422, "InvalidInput", before)
    ready = api.post(
        url, json={"text": "Check Windows too", "expectedGeneration": 1}, headers={"If-Match": etag}
    )
    assert ready.status_code == 200, ready.text
    assert wc.action(second).generation == 2
    etag = ready.headers["ETag"]
    url = f"{base}/actions/{first}/input"
    stale_run = api.post(
        url,
        json={"text": "x", "expectedGeneration": 1, "expectedRunId": str(uuid4())},
        headers={"If-Match": etag},
    )
    refused(wc, stale_run, 409, "CommandRefused", wc.event_count())
    queued = api.post(
        url,
        json={"text": "Use the staging data", "expectedGeneration": 1,
              "expectedRunId": str(running.run_id)},
        headers={"If-Match": etag},
    )  # fmt: skip
    assert queued.status_code == 200, queued.text
    assert [i.text for i in wc.pending_input(running)] == ["Use the staging data"]


# --- the guard -------------------------------------------------------------------


def test_a_token_guards_every_request_but_the_static_page(wc: WorkCenter) -> None:
    api = client(wc, Policy.for_host("0.0.0.0", token=TOKEN), base_url="http://example.org")
    missing = problem(api.get("/api/work-items"), 401, "Unauthorized")
    assert "token" in missing["detail"]
    assert api.get("/api/work-items").headers["WWW-Authenticate"].startswith("Bearer")
    wrong = api.get("/api/work-items", headers={"Authorization": f"Bearer {TOKEN}x"})
    problem(wrong, 401, "Unauthorized")
    basic = api.get("/api/work-items", headers={"Authorization": f"Basic {TOKEN}"})
    problem(basic, 401, "Unauthorized")
    before = wc.event_count()
    refused(wc, api.post("/api/work-items", json=LINEAR), 401, "Unauthorized", before)
    assert api.get("/api/work-items", headers={"Authorization": f"Bearer {TOKEN}"}).is_success
    page = api.get("/")
    assert page.status_code == 200 and "Content-Security-Policy" in page.headers
    assert api.get("/static/dashboard.js").status_code == 200
    # The page names its icon, so a browser does not ask for /favicon.ico (a 404 it
    # logged as a console error on every load).
    assert '<link rel="icon" href="/static/favicon.svg"' in page.text
    icon = api.get("/static/favicon.svg")
    assert icon.status_code == 200 and icon.headers["content-type"] == "image/svg+xml"


def test_a_loopback_server_answers_loopback_hosts_only(wc: WorkCenter) -> None:
    rebound = client(wc, base_url="http://attacker.example:8765")
    problem(rebound.get("/api/work-items"), 421, "MisdirectedRequest")
    for host in ("http://localhost:8765", "http://[::1]:8765", "http://127.0.0.1"):
        assert client(wc, base_url=host).get("/api/work-items").status_code == 200


@pytest.mark.parametrize(
    ("host", "token", "safe"),
    [
        ("127.0.0.1", None, True),
        ("localhost", None, True),
        ("::1", None, True),
        ("0.0.0.0", None, False),
        ("192.168.1.5", None, False),
        ("0.0.0.0", "short", False),
        ("0.0.0.0", TOKEN, True),
    ],
)
def test_the_policy_refuses_other_hosts_without_a_token(
    host: str, token: str | None, safe: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("WORKCENTER_API_TOKEN", raising=False)
    if safe:
        assert Policy.for_host(host, token=token).host == host
    else:
        with pytest.raises(UnsafeServer):
            Policy.for_host(host, token=token)


def test_unknown_routes_and_methods_are_problems(api: TestClient) -> None:
    problem(api.get("/api/nothing"), 404, "NotFound")
    problem(api.delete("/api/work-items"), 405, "MethodNotAllowed")


def test_openapi_documents_every_route(api: TestClient) -> None:
    paths = set(api.get("/openapi.json").json()["paths"])
    item = "/api/work-items/{item_id}"
    assert paths == {
        "/api/work-items",
        "/api/stream",
        item,
        *(item + suffix for suffix in ("/progress", "/budget", "/timeline", "/audit")),
        item + "/conversation",
        item + "/decisions",
        item + "/messages",
        *(item + suffix for suffix in ("/start", "/cancel", "/resume", "/budget/extend")),
        item + "/stream",
        item + "/actions/{action_id}/retry",
        item + "/actions/{action_id}/guide",
        item + "/actions/{action_id}/input",
        *(
            "/api/worker/" + verb
            for verb in ("claim", "renew", "finish", "interrupt", "defer", "input")
        ),
        "/api/worker/input/consume",
        "/api/worker/requests/reserve",
        "/api/worker/requests/settle",
        "/api/health",
        "/api/status",
    }


# --- workcenter serve --------------------------------------------------------------


def test_serve_refuses_another_host_without_a_token(
    wc: WorkCenter, db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("WORKCENTER_API_TOKEN", raising=False)
    result = CliRunner().invoke(cli, ["serve", "--db", str(db_path), "--host", "0.0.0.0"])
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.startswith("UnsafeServer: serving on 0.0.0.0")
    assert "WORKCENTER_API_TOKEN" in result.stderr and len(result.stderr.splitlines()) == 1


def test_serve_on_a_port_in_use_says_so_in_one_line_and_shows_no_address(db_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = CliRunner().invoke(
            cli, ["serve", "--db", str(db_path), "--create", "--port", str(port)]
        )
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.startswith(f"PortUnavailable: cannot serve on 127.0.0.1 port {port}")
    assert len(result.stderr.splitlines()) == 1


@pytest.mark.parametrize(("soft", "hard", "refused"), [(12, 12, True), (12, 2048, False)])
def test_serve_raises_its_open_files_limit_or_refuses_too_few(
    db_path: Path, monkeypatch: pytest.MonkeyPatch, soft: int, hard: int, refused: bool
) -> None:
    """Under a dozen open files (ulimit -n) it said it served and answered nothing, its
    log filling with accept()'s tracebacks (found by acceptance testing, ADR-0138): it
    raises its soft limit as far as the hard one lets, and refuses under 64."""
    limits = {resource.RLIMIT_NOFILE: (soft, hard)}
    monkeypatch.setattr(resource, "getrlimit", lambda which: limits[which])
    monkeypatch.setattr(resource, "setrlimit", lambda which, to: limits.__setitem__(which, to))
    monkeypatch.setattr(server, "serve", lambda *args, **kwargs: None)
    result = CliRunner().invoke(cli, ["serve", "--db", str(db_path), "--create"])
    if refused:
        assert result.exit_code == 2 and result.stdout == ""
        assert result.stderr == (
            "TooFewOpenFiles: serve needs at least 64 open files and may open 12 (ulimit -n):"
            " raise the limit\n"
        )
    else:
        assert result.exit_code == 0, result.output
        assert limits[resource.RLIMIT_NOFILE] == (1024, 2048)


def test_serve_says_how_to_install_the_web_extra(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(__import__("sys").modules, "workcenter.adapters.http.server", None)
    result = CliRunner().invoke(cli, ["serve", "--db", str(db_path)])
    assert result.exit_code == 2
    assert cli_serve.INSTALL_HINT in result.output and "Traceback" not in result.output


@pytest.mark.parametrize(
    "path", ["/", "/static/index.html", "/static/dashboard.js", "/static/dashboard.css"]
)
def test_the_dashboards_files_carry_the_pages_security_headers(wc: WorkCenter, path: str) -> None:
    """``/static/index.html`` is the page too, and was served without its headers: another
    site could frame it and trick a click into steering work (found by acceptance testing,
    ADR-0137). Every file of the dashboard carries the page's headers."""
    answer = client(wc).get(path)
    assert answer.status_code == 200
    assert "frame-ancestors 'none'" in answer.headers["Content-Security-Policy"]
    assert answer.headers["X-Content-Type-Options"] == "nosniff"


@pytest.mark.parametrize("path", ["/docs", "/redoc", "/openapi.json", "/api/work-items"])
def test_no_answer_may_be_framed_by_another_site(wc: WorkCenter, path: str) -> None:
    """`/docs` (Swagger UI sends requests for its user on a click) could be framed and
    clicked through on a loopback server without a token (found by acceptance testing,
    ADR-0137)."""
    answer = client(wc).get(path)
    assert answer.status_code == 200
    assert answer.headers["X-Frame-Options"] == "DENY"
    assert answer.headers["X-Content-Type-Options"] == "nosniff"
