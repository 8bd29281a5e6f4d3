"""Answers the OpenAPI document promises, found by Schemathesis and pinned here
(ADR-0066): the body is judged before the precondition, a cursor's shape is enough
to page, an integral JSON number is an integer, a 405 names every method of its path."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import refused
from fastapi.testclient import TestClient
from http_client import LINEAR, client

from workcenter.application import WorkCenter
from workcenter.domain.errors import InvalidInput


@pytest.fixture
def wc(db_path: Path) -> Iterator[WorkCenter]:
    with WorkCenter.open(db_path) as center:
        yield center


@pytest.fixture
def api(wc: WorkCenter) -> TestClient:
    return client(wc)


def test_a_body_with_an_unknown_field_is_422_whatever_its_if_match(
    api: TestClient, wc: WorkCenter
) -> None:
    item = api.post("/api/work-items", json=LINEAR).json()
    before = wc.event_count()
    path = f"/api/work-items/{item['id']}/cancel"
    for if_match in ('"0.0"', "not an etag", None):
        headers = {"If-Match": if_match} if if_match is not None else {}
        answer = api.post(path, json={"reason": "x", "why": "unknown"}, headers=headers)
        assert answer.status_code == 422, (if_match, answer.text)
        assert answer.headers["content-type"] == "application/problem+json"
    assert api.post(path, json={"reason": "x"}).status_code == 428
    assert api.post(path, json={"reason": "x"}, headers={"If-Match": "no"}).status_code == 412
    assert wc.event_count() == before


def test_a_cursor_past_any_time_is_the_first_page_not_a_server_error(api: TestClient) -> None:
    api.post("/api/work-items", json=LINEAR)
    for cursor in ("0x1p+99999", "0x51.7dc07203p+7765667", "-0x1p+99999"):
        answer = api.get("/api/work-items", params={"after": cursor + "~" + "0" * 32})
        assert answer.status_code == 200, answer.text
    answer = api.get("/api/work-items", params={"after": "0x1p+99999~" + "0" * 32})
    assert [item["title"] for item in answer.json()["items"]] == [LINEAR["title"]]


def test_an_integral_json_number_is_an_integer(api: TestClient, wc: WorkCenter) -> None:
    item = api.post("/api/work-items", json=LINEAR | {"limits": {"maxTokens": 5000.0}})
    assert item.status_code == 201, item.text
    assert item.json()["executionControl"]["limits"]["maxTokens"] == 5000
    before = wc.event_count()
    half = api.post("/api/work-items", json=LINEAR | {"limits": {"maxTokens": 5000.5}})
    assert half.status_code == 422
    assert wc.event_count() == before


def test_a_405_allows_every_method_of_the_path(api: TestClient) -> None:
    answer = api.request("DELETE", "/api/work-items")
    assert answer.status_code == 405
    assert answer.headers["allow"] == "GET, HEAD, POST"


@pytest.mark.parametrize(
    ("verb", "body"),
    [
        ("finish", {"report": {"outcome": "completed", "evidence": [{"n": 10**30}]}}),
        ("requests/reserve", {"requestId": "r1", "request": {"max_tokens": 10**30}}),
        ("requests/settle", {"requestId": "r1", "usage": {"input_tokens": 1e300}}),
    ],
)
def test_a_number_past_what_json_keeps_is_422_not_a_server_error(
    api: TestClient, wc: WorkCenter, verb: str, body: dict[str, object]
) -> None:
    api.post("/api/work-items", json=LINEAR)
    fence = api.post("/api/worker/claim", json={"worker": "w"}).json()["fence"]
    before = wc.event_count()
    answer = api.post(f"/api/worker/{verb}", json={"fence": fence} | body)
    assert answer.status_code == 422, answer.text
    assert wc.event_count() == before


def test_the_python_api_refuses_a_report_number_past_what_json_keeps(wc: WorkCenter) -> None:
    item = wc.create_work_item(
        title="t", goal="g", acceptance_criteria=["c"], mode="linear", start=True
    )
    claim = wc.claim_next("w", lease_seconds=60)
    assert claim is not None and claim.work_item_id == item.id
    with refused(wc, InvalidInput, "number"):
        wc.finish_run(claim, {"outcome": "completed", "evidence": [{"n": 10**30}]})


def test_free_form_json_nests_objects_but_not_arrays_in_arrays(
    api: TestClient, wc: WorkCenter
) -> None:
    api.post("/api/work-items", json=LINEAR)
    fence = api.post("/api/worker/claim", json={"worker": "w"}).json()["fence"]
    before = wc.event_count()
    nested = {"fence": fence, "requestId": "r1", "request": {"x": [[1]]}}
    assert api.post("/api/worker/requests/reserve", json=nested).status_code == 422
    assert wc.event_count() == before
    deep = {"fence": fence, "requestId": "r2", "request": {"x": [{"y": [1, {"z": None}]}]}}
    answer = api.post("/api/worker/requests/reserve", json=deep)
    assert answer.status_code == 200, answer.text


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"goal": " \u3000 "}, "goal is required"),
        ({"title": ""}, "title is required"),
        ({"stages": ["Triage"]}, "stages.0 must be a lowercase name"),
    ],
)
def test_a_text_refused_by_its_pattern_is_said_in_the_apis_words(
    api: TestClient, change: dict[str, object], said: str
) -> None:
    answer = api.post("/api/work-items", json=LINEAR | change)
    assert answer.status_code == 422
    assert answer.json()["detail"].startswith(said), answer.text
    assert "pattern" not in answer.text


def test_a_linear_item_given_no_stage_is_422_and_the_document_says_at_least_one(
    api: TestClient, wc: WorkCenter
) -> None:
    """An empty ``stages`` list gave a linear item the default stages (the document
    admitted it); left out, they still are the defaults. A dynamic item's empty list
    asks for no stage, as the document's other branch says."""
    before = wc.event_count()
    answer = api.post("/api/work-items", json=LINEAR | {"stages": []})
    assert answer.status_code == 422, answer.text
    assert answer.json()["title"] == "InvalidInput"
    assert "at least one stage" in answer.json()["detail"]
    assert wc.event_count() == before
    schema = api.get("/openapi.json").json()["components"]["schemas"]["CreateWorkItem"]
    assert schema["if"]["properties"]["mode"] == {"const": "linear"}
    assert schema["then"]["properties"]["stages"]["minItems"] == 1
    defaults = {k: v for k, v in LINEAR.items() if k != "stages"}
    assert api.post("/api/work-items", json=defaults).status_code == 201
    dynamic = LINEAR | {"mode": "dynamic", "stages": []}
    assert api.post("/api/work-items", json=dynamic).status_code == 201


def test_every_412_declares_the_etag_it_carries(api: TestClient, wc: WorkCenter) -> None:
    """A 412 carries the item's current versions (http-api.md); the document did not say
    so, and a generated client gave no hint to read them (found by acceptance testing,
    ADR-0140)."""
    document = api.get("/openapi.json").json()
    answers = [
        op["responses"]["412"]
        for path in document["paths"].values()
        for op in path.values()
        if "412" in op.get("responses", {})
    ]
    assert answers and all("ETag" in answer.get("headers", {}) for answer in answers)
    item = wc.create_work_item(title="t", goal="g")
    stale = api.post(f"/api/work-items/{item.id}/cancel", json={}, headers={"If-Match": '"9.9"'})
    assert stale.status_code == 412 and stale.headers["ETag"] == f'"{item.version}.1"'
    # A malformed one too (found by acceptance testing, ADR-0145), a message's included.
    for url, body in (
        (f"/api/work-items/{item.id}/cancel", {}),
        (f"/api/work-items/{item.id}/messages", {"text": "hello"}),
    ):
        garbage = api.post(url, json=body, headers={"If-Match": "garbage"})
        assert garbage.status_code == 412 and garbage.headers["ETag"] == f'"{item.version}.1"'
