"""Scoped tokens (ADR-0064): a worker token runs Actions only, a user token steers
items, an operator token also reads raw audit; refused across with nothing written;
tokens from the environment or a file, never shown."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from http_client import LINEAR, client

from workcenter.adapters.http.guard import Policy, UnsafeServer, scoped_tokens
from workcenter.application import WorkCenter

WORKER = "worker-token-0123456789"
USER = "user-token-0123456789ab"
OPERATOR = "operator-token-0123456789"
API = "api-token-0123456789abcd"
SCOPED = (("worker", WORKER), ("user", USER), ("operator", OPERATOR))
PROBLEM = "application/problem+json"


@pytest.fixture
def api(wc: WorkCenter) -> TestClient:
    return client(wc, Policy.for_host("127.0.0.1", token=API, scoped=SCOPED))


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def refused(wc: WorkCenter, response: Any, status: int, before: int) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == PROBLEM
    assert wc.event_count() == before, "a refused request wrote events"


def create(api: TestClient) -> tuple[str, str]:
    created = api.post("/api/work-items", json=LINEAR, headers=bearer(USER))
    assert created.status_code == 201, created.text
    return created.json()["id"], created.headers["ETag"]


def claim(api: TestClient) -> dict[str, Any]:
    claimed = api.post("/api/worker/claim", json={"worker": "w"}, headers=bearer(WORKER))
    assert claimed.status_code == 200, claimed.text
    body: dict[str, Any] = claimed.json()
    return body


def finish_body(claimed: dict[str, Any]) -> dict[str, Any]:
    checks = [
        {"criterion": c, "status": "passed", "evidence": "ok"}
        for c in claimed["acceptanceCriteria"]
    ]
    report = {"outcome": "completed", "evidence": ["ok"], "acceptanceChecks": checks}
    return {"fence": claimed["fence"], "report": report}


def test_a_worker_token_cannot_cancel_an_item_nor_read_one(api: TestClient, wc: WorkCenter) -> None:
    item_id, etag = create(api)
    before = wc.event_count()
    cancel = api.post(
        f"/api/work-items/{item_id}/cancel",
        json={},
        headers=bearer(WORKER) | {"If-Match": etag},
    )
    refused(wc, cancel, 403, before)
    assert cancel.json()["title"] == "Forbidden"
    refused(wc, api.get(f"/api/work-items/{item_id}", headers=bearer(WORKER)), 403, before)
    refused(wc, api.get("/api/stream", headers=bearer(WORKER)), 403, before)


def test_a_user_token_cannot_claim_nor_finish_a_run(api: TestClient, wc: WorkCenter) -> None:
    create(api)
    before = wc.event_count()
    refused(
        wc, api.post("/api/worker/claim", json={"worker": "w"}, headers=bearer(USER)), 403, before
    )
    claimed = claim(api)
    before = wc.event_count()
    for token in (USER, OPERATOR):
        finish = api.post("/api/worker/finish", json=finish_body(claimed), headers=bearer(token))
        refused(wc, finish, 403, before)
    done = api.post("/api/worker/finish", json=finish_body(claimed), headers=bearer(WORKER))
    assert done.status_code == 200, done.text


def test_raw_audit_is_the_operators(api: TestClient, wc: WorkCenter) -> None:
    item_id, _ = create(api)
    raw = f"/api/work-items/{item_id}/audit?raw=true"
    refusal = api.get(raw, headers=bearer(USER))
    assert refusal.status_code == 403 and "operator token" in refusal.json()["detail"]
    assert api.get(raw, headers=bearer(WORKER)).status_code == 403
    for token in (OPERATOR, API):
        assert api.get(raw, headers=bearer(token)).status_code == 200
    assert api.get(f"/api/work-items/{item_id}/audit", headers=bearer(USER)).status_code == 200


def test_the_api_token_keeps_every_scope_and_an_unknown_token_is_401(
    api: TestClient, wc: WorkCenter
) -> None:
    item_id, etag = create(api)
    claim_as_api = api.post("/api/worker/claim", json={"worker": "w"}, headers=bearer(API))
    assert claim_as_api.status_code == 200
    before = wc.event_count()
    for headers, says in (
        ({}, "a bearer token is required"),
        (bearer("not-a-token-of-this-server"), "not one this server takes"),
        ({"Authorization": f"Basic {USER}"}, "not one this server takes"),
    ):
        response = api.get(f"/api/work-items/{item_id}", headers=headers)
        refused(wc, response, 401, before)
        assert response.headers["WWW-Authenticate"].startswith("Bearer")
        assert says in response.json()["detail"]
    for token in (WORKER, USER):
        assert api.get("/openapi.json", headers=bearer(token)).status_code == 200
    assert api.get("/", headers={}).status_code == 200  # the page itself holds no data
    cancelled = api.post(
        f"/api/work-items/{item_id}/cancel", json={}, headers=bearer(API) | {"If-Match": etag}
    )
    assert cancelled.status_code in (200, 412)  # allowed; the claim may have moved the item


def test_a_loopback_server_without_tokens_serves_one_user_everything(wc: WorkCenter) -> None:
    api = client(wc, Policy.for_host("127.0.0.1", token=None, scoped=()))
    create(api)
    claimed = claim(api)
    assert api.post("/api/worker/finish", json=finish_body(claimed)).status_code == 200


def test_tokens_come_from_the_environment_and_a_file(tmp_path: Path) -> None:
    tokens = private_file(
        tmp_path / "tokens", f"# scope token\n\nworker {WORKER}2\n  user   {USER}2  \n"
    )
    environ = {
        "WORKCENTER_WORKER_TOKEN": WORKER,
        "WORKCENTER_OPERATOR_TOKEN": OPERATOR,
        "WORKCENTER_TOKEN_FILE": str(tokens),
    }
    assert scoped_tokens(environ) == [
        ("worker", WORKER, None),
        ("operator", OPERATOR, None),
        ("worker", WORKER + "2", None),
        ("user", USER + "2", None),
    ]
    policy = Policy.for_host("0.0.0.0", token=None, scoped=scoped_tokens(environ))
    assert policy.scoped and not policy.loopback
    assert WORKER not in repr(policy) and OPERATOR not in repr(policy)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (f"admin {WORKER}\n", "line 1: unknown token scope"),
        # Columns swapped: the token was printed as the scope (ADR-0137).
        (f"{WORKER} worker\n", "line 1: unknown token scope"),
        ("worker short\n", "at least 16 characters"),
        (f"worker {WORKER} holder=w-1 x\n", r"line 1: expected SCOPE TOKEN \[holder=NAME\]"),
        # A holder is a worker name's over HTTP, whatever the scope (ADR-0143).
        (f"user {WORKER} holder=zoë\n", "line 1: the holder must be printable ASCII"),
        (f"user {WORKER} holder={'a' * 136}\n", "line 1: the holder must be 1 to 135"),
        # Which of the two would its commands be recorded as?
        (f"user {WORKER} holder=a\nuser {WORKER} holder=b\n", "line 2: its token is given"),
        # Columns swapped: a name of 16 characters or more was taken as the token, and the
        # token recorded as the holder (found by the re-test of ADR-0143).
        (f"user holder=alice@example.com {WORKER}\n", "line 1: the holder is where the token"),
        (f"user alice@example.com {WORKER}\n", "line 1: the third column is holder=NAME"),
        (f"user alice {WORKER}\n", "line 1: its token must have at least 16 characters"),
        # Two lines run together: a token as a holder would be written in the audit.
        (f"user {USER} holder={WORKER}\nworker {WORKER} holder=w\n", "line 2: a token's holder"),
        (f"worker {WORKER}\nuser {USER} holder={WORKER}\n", "line 2: a token's holder is"),
        # Pasted under two scopes, it held both (found by acceptance testing).
        (f"worker {WORKER}\nuser {WORKER}\n", "given both the worker and the user scope"),
    ],
)
def test_a_bad_token_file_refuses_to_serve_without_showing_a_token(
    tmp_path: Path, content: str, message: str
) -> None:
    tokens = private_file(tmp_path / "tokens", content)
    with pytest.raises(UnsafeServer, match=message) as refusal:
        Policy.for_host("127.0.0.1", scoped=scoped_tokens({"WORKCENTER_TOKEN_FILE": str(tokens)}))
    assert WORKER not in str(refusal.value) and "short" not in str(refusal.value)


@pytest.mark.parametrize(
    ("api", "scoped", "message"),
    [
        # The API token keeps every scope: a worker's equal to it could steer.
        (WORKER, [("worker", WORKER)], "given both the API and the worker scope"),
        # A header cannot carry the space: the server started, and refused everyone.
        (USER + " ", [], "WORKCENTER_API_TOKEN has white space around it"),
        (None, [("worker", " " + WORKER)], "a worker token has white space around it"),
    ],
)
def test_a_token_that_would_widen_a_scope_or_never_match_refuses_to_serve(
    api: str | None, scoped: list[tuple[str, str]], message: str
) -> None:
    """Found by acceptance testing (ADR-0133); never naming the token."""
    with pytest.raises(UnsafeServer, match=message) as refusal:
        Policy.for_host("0.0.0.0", token=api, scoped=scoped)
    assert WORKER not in str(refusal.value) and USER not in str(refusal.value)


def private_file(path: Path, content: str) -> Path:
    path.write_text(content)
    path.chmod(0o600)
    return path


@pytest.mark.parametrize("mode", [0o644, 0o604, 0o666, 0o660, 0o620])
def test_a_token_file_other_users_may_read_refuses_to_serve(tmp_path: Path, mode: int) -> None:
    """Written as the docs showed, under the usual umask, every user of the machine could
    read the tokens (found by acceptance testing, ADR-0137); the owner's group may read
    them, not write them (a member could add a token of their own; found by review)."""
    tokens = private_file(tmp_path / "tokens", f"worker {WORKER}\n")
    tokens.chmod(mode)
    refusing = "others may read or write it, or its group write it: chmod 600"
    with pytest.raises(UnsafeServer, match=refusing) as refusal:
        scoped_tokens({"WORKCENTER_TOKEN_FILE": str(tokens)})
    assert WORKER not in str(refusal.value)
    tokens.chmod(0o640)
    assert scoped_tokens({"WORKCENTER_TOKEN_FILE": str(tokens)}) == [("worker", WORKER, None)]


def test_an_unreadable_token_file_refuses_to_serve(tmp_path: Path) -> None:
    with pytest.raises(UnsafeServer, match="cannot read"):
        scoped_tokens({"WORKCENTER_TOKEN_FILE": str(tmp_path / "missing")})


def test_another_host_needs_some_token(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("WORKCENTER_API_TOKEN", "WORKCENTER_TOKEN_FILE", "WORKCENTER_USER_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(UnsafeServer, match="not a loopback address"):
        Policy.for_host("0.0.0.0")
    monkeypatch.setenv("WORKCENTER_USER_TOKEN", USER)
    assert Policy.for_host("0.0.0.0").scoped == (("user", USER, None),)


def test_no_token_reaches_a_log(
    api: TestClient, wc: WorkCenter, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    create(api)
    claim(api)
    api.get("/api/work-items", headers=bearer(WORKER))  # 403
    api.get("/api/work-items", headers=bearer("a-guess-at-a-token-0000"))  # 401
    api.post("/api/worker/claim", json={"worker": "w"}, headers=bearer(USER))  # 403
    assert caplog.records, "nothing was logged: the test would prove nothing"
    for token in (WORKER, USER, OPERATOR, API, "a-guess-at-a-token-0000"):
        assert token not in caplog.text
