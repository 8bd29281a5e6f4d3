"""The conversation over HTTP: read it with its ETag, post a user message under If-Match,
a repeated client message id that writes nothing, every refusal a problem document
that writes nothing, the Coordinator's reply in the next read, and the change stream
naming the conversation's events."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
from conftest import budget_commands
from fastapi.testclient import TestClient
from http_client import DYNAMIC, LINEAR, client, versions_of
from test_http_api import problem, refused

from workcenter.adapters.providers.scripted import ScriptedProvider, permanent
from workcenter.adapters.providers.scripted_coordinator import scripted_coordinator
from workcenter.application import WorkCenter

SECRET = "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789"


@pytest.fixture
def wc(db_path: Path) -> Iterator[WorkCenter]:
    with WorkCenter.open(db_path) as center:
        yield center


@pytest.fixture
def api(wc: WorkCenter) -> TestClient:
    return client(wc)


def create(api: TestClient, **changes: Any) -> tuple[str, str]:
    response = api.post("/api/work-items", json=DYNAMIC | changes)
    assert response.status_code == 201, response.text
    return response.json()["id"], response.headers["ETag"]


def post(api: TestClient, item_id: str, etag: str | None, **body: Any) -> Any:
    headers = {"If-Match": etag} if etag is not None else {}
    return api.post(f"/api/work-items/{item_id}/messages", json=body, headers=headers)


def test_an_item_without_messages_has_an_empty_conversation_with_its_etag(
    api: TestClient,
) -> None:
    item_id, etag = create(api)
    response = api.get(f"/api/work-items/{item_id}/conversation")
    assert response.status_code == 200
    detail = api.get(f"/api/work-items/{item_id}").headers["ETag"]
    assert versions_of(response.headers["ETag"]) == versions_of(etag) == versions_of(detail)
    body = response.json()
    assert (body["workItemId"], body["messages"], body["turns"]) == (item_id, [], [])
    assert body["thinking"] is False and body["pendingWakes"] == 1  # the start woke it
    problem(api.get(f"/api/work-items/{uuid4()}/conversation"), 404, "NotFound")
    problem(api.get("/api/work-items/not-an-id/conversation"), 404, "NotFound")


def test_a_message_begins_a_turn_the_coordinator_answers(api: TestClient, wc: WorkCenter) -> None:
    item_id, etag = create(api)
    posted = post(api, item_id, etag, text="Please plan it", clientMessageId="k-1")
    assert posted.status_code == 202, posted.text
    assert posted.headers["Location"] == f"/api/work-items/{item_id}/conversation"
    answer = posted.json()
    assert answer["workItemId"] == item_id and answer["duplicate"] is False
    thinking = api.get(f"/api/work-items/{item_id}/conversation").json()
    assert thinking["thinking"] is True
    assert [(m["role"], m["status"]) for m in thinking["messages"]] == [
        ("user", "completed"),
        ("assistant", "thinking"),
    ]
    assert thinking["turns"][0]["id"] == answer["turnId"]
    assert thinking["turns"][0]["userOriginated"] is True

    steps = wc.coordinate_once(scripted_coordinator())
    assert next(str(s.turn_id) for s in steps if s.status == "decided") == answer["turnId"]
    after = api.get(f"/api/work-items/{item_id}/conversation")
    body = after.json()
    reply = body["messages"][1]
    assert reply["status"] == "completed" and reply["decision"]["kind"] == "create_actions"
    # The scripted Coordinator plans one stage at a time: the diagnosis first.
    assert len(reply["decision"]["affectedActionIds"]) == 1 and reply["text"]
    assert body["turns"][0]["status"] == "decided"
    assert body["turns"][0]["attempts"] == [{"attempt": 1, "status": "responded"}]
    assert after.headers["ETag"] != etag  # the plan moved the item
    detail = api.get(f"/api/work-items/{item_id}").headers["ETag"]
    assert versions_of(after.headers["ETag"]) == versions_of(detail)


def test_a_repeated_client_message_id_answers_the_first_turn_and_writes_nothing(
    api: TestClient, wc: WorkCenter
) -> None:
    item_id, etag = create(api)
    first = post(api, item_id, etag, text="Please plan it", clientMessageId="k-1")
    assert first.status_code == 202
    before = wc.event_count()
    again = post(api, item_id, etag, text="Please plan it", clientMessageId="k-1")
    assert again.status_code == 202 and wc.event_count() == before
    assert again.json() == first.json() | {"duplicate": True}
    wc.coordinate_once(scripted_coordinator())  # the item moves on: the ETag is stale
    before = wc.event_count()
    late = post(api, item_id, etag, text="Please plan it", clientMessageId="k-1")
    assert late.status_code == 202 and wc.event_count() == before
    assert late.json()["turnId"] == first.json()["turnId"]
    stale = post(api, item_id, etag, text="Another thing", clientMessageId="k-2")
    refused(wc, stale, 412, "PreconditionFailed", before)


def test_refused_messages_are_problems_that_write_nothing(api: TestClient, wc: WorkCenter) -> None:
    item_id, etag = create(api)
    before = wc.event_count()
    refused(wc, post(api, item_id, None, text="hi"), 428, "PreconditionRequired", before)
    refused(wc, post(api, item_id, '"9.9"', text="hi"), 412, "PreconditionFailed", before)
    refused(wc, post(api, item_id, etag, text="   "), 422, "InvalidInput", before)
    refused(wc, post(api, item_id, etag), 422, "InvalidInput", before)
    refused(wc, post(api, item_id, etag, text="hi", extra=1), 422, "InvalidInput", before)
    refused(wc, post(api, item_id, etag, text=7), 422, "InvalidInput", before)
    refused(wc, post(api, str(uuid4()), etag, text="hi"), 404, "NotFound", before)
    plain = api.post(
        f"/api/work-items/{item_id}/messages",
        content=b'{"text": "hi"}',
        headers={"If-Match": etag, "Content-Type": "text/plain"},
    )
    refused(wc, plain, 415, "UnsupportedMediaType", before)

    assert post(api, item_id, etag, text="first").status_code == 202
    before = wc.event_count()
    busy = refused(wc, post(api, item_id, etag, text="second"), 409, "CommandRefused", before)
    assert "in progress" in busy["detail"]


def test_a_done_or_stopped_item_refuses_a_message_by_the_typed_error(
    api: TestClient, wc: WorkCenter
) -> None:
    cancelled_id, etag = create(api)
    cancelled = api.post(
        f"/api/work-items/{cancelled_id}/cancel", json={}, headers={"If-Match": etag}
    )
    before = wc.event_count()
    gone = post(api, cancelled_id, cancelled.headers["ETag"], text="hi")
    refused(wc, gone, 409, "CommandRefused", before)

    stopped_id, _ = create(api, start=False)
    for n in range(3):  # the Coordinator's failure limit stops the item
        budget_commands(wc).record_coordinator_failure(stopped_id, turn_id=f"t{n}")  # type: ignore[arg-type]
    etag = api.get(f"/api/work-items/{stopped_id}").headers["ETag"]
    before = wc.event_count()
    stop = refused(wc, post(api, stopped_id, etag, text="hi"), 409, "ResourceStopError", before)
    assert stop["stopCode"]


def test_the_conversation_dto_masks_secrets_and_sends_no_provider_bodies(
    api: TestClient, wc: WorkCenter
) -> None:
    item_id, etag = create(api)
    said = f"use the key {SECRET} from /home/alice/notes"
    assert post(api, item_id, etag, text=said).status_code == 202
    wc.coordinate_once(scripted_coordinator())
    response = api.get(f"/api/work-items/{item_id}/conversation")
    raw = response.text
    assert SECRET not in raw and "/home/alice" not in raw and "use the key" in raw
    kept = {"requestHash", "response", "responseHash", "claimOwner", "claimEpoch", "trigger"}
    assert not keys(response.json()) & kept


def keys(value: Any) -> set[str]:
    if isinstance(value, dict):
        return set(value) | {k for v in value.values() for k in keys(v)}
    if isinstance(value, list):
        return {k for v in value for k in keys(v)}
    return set()


def test_the_change_stream_names_the_conversations_events(api: TestClient, wc: WorkCenter) -> None:
    item_id, etag = create(api)
    start = wc.changes.head()
    post(api, item_id, etag, text="Please plan it")
    changes = wc.changes.after(start, work_item_id=item_id).changes  # type: ignore[arg-type]
    assert changes and {c.aggregate for c in changes} == {"conversation"}
    assert "CoordinatorTurnBegun" in {c.type for c in changes}
    # A feed that never saw the conversation open still finds its item.
    fresh = type(wc.changes)(wc.changes.repo, wc.changes.read_events_after)
    again = fresh.after(start, work_item_id=item_id).changes  # type: ignore[arg-type]
    assert [c.json() for c in again] == [c.json() for c in changes]


def test_the_conversation_says_when_only_a_message_can_plan_the_item(
    api: TestClient, wc: WorkCenter
) -> None:
    """A turn that failed for good leaves a dynamic item running with nothing planned
    and nothing due: the read says a message is needed (ADR-0129), as `show` does."""
    item_id, _ = create(api)
    read = lambda: api.get(f"/api/work-items/{item_id}/conversation").json()  # noqa: E731
    assert read()["planWait"] == "due"  # the start woke the Coordinator
    steps = wc.coordinate_once(ScriptedProvider([permanent()]))
    assert [step.status for step in steps] == ["failed"]
    failed = read()
    assert (failed["planWait"], failed["pendingWakes"]) == ("failed", 0)
    assert failed["status"] == "running"
    posted = post(api, item_id, api.get(f"/api/work-items/{item_id}").headers["ETag"], text="Go on")
    assert posted.status_code == 202, posted.text
    assert read()["planWait"] == "due"
    wc.coordinate_once(scripted_coordinator())
    assert read()["planWait"] is None  # planned: an Action is ready
    linear = api.post("/api/work-items", json=LINEAR)
    assert linear.status_code == 201, linear.text
    assert api.get(f"/api/work-items/{linear.json()['id']}/conversation").json()["planWait"] is None
