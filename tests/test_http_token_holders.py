"""Tokens that name their holder (ADR-0143): a user's or operator's commands over HTTP
are recorded as that person's, and a worker's token claims under its own name only;
tokens without a holder keep doing what they did."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from http_client import DYNAMIC, LINEAR, client

from workcenter.adapters.http.guard import Policy
from workcenter.application import WorkCenter

ALICE = "alice-token-0123456789"
BOB = "bob-operator-token-0123"
ANYONE = "a-user-token-0123456789"
W1 = "worker-one-token-012345"
ANY_WORKER = "any-worker-token-012345"
HOLDERS = (
    ("user", ALICE, "alice"),
    ("operator", BOB, "bob"),
    ("user", ANYONE),
    ("worker", W1, "w-1"),
    ("worker", ANY_WORKER),
)


@pytest.fixture
def api(wc: WorkCenter) -> TestClient:
    return client(wc, Policy.for_host("127.0.0.1", token=None, scoped=HOLDERS))


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def created(api: TestClient, token: str, body: dict[str, Any] = LINEAR) -> tuple[str, str]:
    answer = api.post("/api/work-items", json=body, headers=bearer(token))
    assert answer.status_code == 201, answer.text
    return answer.json()["id"], answer.headers["ETag"]


def actors(api: TestClient, item_id: str, token: str) -> list[tuple[str, str, str]]:
    """(event type, actor kind, actor id) of the item's events, oldest first."""
    audit = api.get(f"/api/work-items/{item_id}/audit", headers=bearer(token))
    assert audit.status_code == 200, audit.text
    rows = sorted(audit.json()["events"], key=lambda row: row["position"])
    return [(row["type"], row["actor"], row["actorId"]) for row in rows]


def test_a_named_users_commands_are_recorded_as_that_user(api: TestClient) -> None:
    item_id, etag = created(api, ALICE)
    cancelled = api.post(
        f"/api/work-items/{item_id}/cancel",
        json={"reason": "not needed"},
        headers=bearer(ALICE) | {"If-Match": etag},
    )
    assert cancelled.status_code == 200, cancelled.text
    recorded = actors(api, item_id, ALICE)
    assert ("WorkItemCreated", "user", "alice") in recorded
    assert ("WorkItemCancelled", "user", "alice") in recorded
    assert {actor for _, actor, _ in recorded} == {"user"}, recorded


def test_a_named_operators_commands_are_recorded_as_that_operator(api: TestClient) -> None:
    item_id, etag = created(api, ANYONE, DYNAMIC)
    extended = api.post(
        f"/api/work-items/{item_id}/budget/extend",
        json={"maxTokens": 1000},
        headers=bearer(BOB) | {"If-Match": etag},
    )
    assert extended.status_code == 200, extended.text
    posted = api.post(
        f"/api/work-items/{item_id}/messages",
        json={"text": "Use the smaller fix"},
        headers=bearer(BOB) | {"If-Match": extended.headers["ETag"]},
    )
    assert posted.status_code == 202, posted.text
    by_bob = {kind for kind, actor, ident in actors(api, item_id, BOB) if actor == "operator"}
    assert by_bob >= {"BudgetExtended", "MailboxEntryEnqueued"}, by_bob
    assert {ident for _, actor, ident in actors(api, item_id, BOB) if actor == "operator"} == {
        "bob"
    }
    # The token without a holder stays the plain user's.
    created_by = [row for row in actors(api, item_id, BOB) if row[0] == "WorkItemCreated"]
    assert created_by == [("WorkItemCreated", "user", "user")]


def test_a_named_worker_token_claims_under_its_name_only(api: TestClient, wc: WorkCenter) -> None:
    item_id, _ = created(api, ALICE)
    before = wc.event_count()
    foreign = api.post("/api/worker/claim", json={"worker": "w-2"}, headers=bearer(W1))
    assert foreign.status_code == 403, foreign.text
    assert foreign.headers["content-type"] == "application/problem+json"
    assert "claims only under the worker name it was given" in foreign.json()["detail"]
    assert wc.event_count() == before, "a refused claim wrote events"
    own = api.post("/api/worker/claim", json={"worker": "w-1"}, headers=bearer(W1))
    assert own.status_code == 200, own.text
    workers = {ident for _, actor, ident in actors(api, item_id, ALICE) if actor == "worker"}
    assert workers and all(ident.startswith("w-1@") for ident in workers), workers


def test_a_worker_token_without_a_holder_claims_under_any_name(api: TestClient) -> None:
    created(api, ALICE)
    claimed = api.post("/api/worker/claim", json={"worker": "w-2"}, headers=bearer(ANY_WORKER))
    assert claimed.status_code == 200, claimed.text
