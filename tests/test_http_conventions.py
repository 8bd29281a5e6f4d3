"""HTTP's conventions and errors in the project's words: HEAD on every read,
If-None-Match answered 304, a JSON key named twice refused (422, nothing written), and
no error body (of the API or the CLI) naming a validation library's class, its codes,
a URL or the input it refused."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient
from http_client import LINEAR, client

from workcenter.adapters.cli import cli
from workcenter.adapters.http.conventions import matches
from workcenter.adapters.wording import plain
from workcenter.application import WorkCenter
from workcenter.domain.errors import InvalidInput

SECRET = "sk-live-abcdefghijklmnopqrstuvwxyz0123"
# What a validation library's own error text carries: its class names, error codes,
# echoed input and documentation links.
LIBRARY = re.compile(
    r"pydantic|validation error|https?://|input_value|input_type|\[type=|"
    r"\b(Limits|Stage|CreateWorkItem|Body|Retry|Guide|Cancel|PostMessage|str|int)\b"
)


@pytest.fixture
def wc(db_path: Path) -> Iterator[WorkCenter]:
    with WorkCenter.open(db_path) as center:
        yield center


@pytest.fixture
def api(wc: WorkCenter) -> TestClient:
    return client(wc)


def created(api: TestClient, **changes: Any) -> tuple[str, str]:
    response = api.post("/api/work-items", json=LINEAR | changes)
    assert response.status_code == 201, response.text
    return response.json()["id"], response.headers["ETag"]


BAD_CREATES: list[dict[str, Any]] = [
    {"limits": {"maxTokens": "many"}},
    {"limits": {"maxTokens": -5}},
    {"limits": {"maxTokens": 0, "maxRequests": 2**60}},
    {"limits": {"max_tokens": 5}},
    {"limits": 5},
    {"limits": {"maxTokens": 1.5}},
    {"stages": [{"type": 1}]},
    {"stages": [{"type": "a", "maxAttempts": "x"}]},
    {"mode": "graph"},
    {"title": 5},
    {"title": ""},
    {"acceptanceCriteria": "one"},
    {"start": "yes"},
    {"apiKey": SECRET},
    {"title": SECRET * 20},
]


@pytest.mark.parametrize("change", BAD_CREATES)
def test_no_error_body_names_a_library_class_a_url_or_the_input(
    api: TestClient, wc: WorkCenter, change: dict[str, Any]
) -> None:
    before = wc.event_count()
    response = api.post("/api/work-items", json=LINEAR | change)
    assert response.status_code == 422, response.text
    assert wc.event_count() == before
    body = response.json()
    assert body["title"] == "InvalidInput"
    assert not LIBRARY.search(response.text), response.text
    assert SECRET not in response.text and "many" not in response.text
    for field in body.get("errors", []):
        assert field["loc"][0] == "body" and "_" not in "".join(field["loc"][1:2])


def test_field_names_are_the_apis(api: TestClient, wc: WorkCenter) -> None:
    response = api.post("/api/work-items", json=LINEAR | {"limits": {"maxTokens": -5}})
    assert response.json()["detail"] == "limits.maxTokens must be greater than 0"
    response = api.post("/api/work-items", json=LINEAR | {"limits": {"max_tokens": 5}})
    assert response.json()["detail"] == "limits.max_tokens is not a field of this request"
    item_id, etag = created(api)
    response = api.post(
        f"/api/work-items/{item_id}/budget/extend",
        json={"maxActionAttempts": 2**53 - 1},
        headers={"If-Match": etag},
    )
    assert response.status_code == 422
    # The service says max_action_attempts; the API's caller sent maxActionAttempts.
    assert response.json()["detail"] == "maxActionAttempts would exceed 9007199254740991"


def test_bad_json_and_bad_queries_say_so_plainly(api: TestClient) -> None:
    broken = api.post(
        "/api/work-items", content=b'{"title": ', headers={"Content-Type": "application/json"}
    )
    assert broken.json()["detail"] == "the body is not valid JSON (at character 10)"
    assert api.get("/api/work-items?limit=abc").json()["detail"] == "limit must be an integer"
    assert not LIBRARY.search(api.get("/api/work-items?limit=0").text)


def test_the_python_api_refuses_bad_limits_in_its_own_words(wc: WorkCenter) -> None:
    with pytest.raises(InvalidInput) as refused:
        wc.create_work_item(title="t", goal="g", limits={"max_tokens": -5})
    assert str(refused.value) == "limits.max_tokens must be a positive integer, not -5"
    with pytest.raises(InvalidInput, match="'tokens' is not a limit"):
        wc.create_work_item(title="t", goal="g", limits={"tokens": 5})


def test_plain_drops_what_a_library_adds() -> None:
    said = (
        "invalid limits: 1 validation error for Limits\nmax_tokens\n  Input should be greater"
        " than 0 [type=greater_than, input_value=-5, input_type=int]\n    For further"
        " information visit https://errors.pydantic.dev/2.14/v/greater_than"
    )
    assert plain(said) == "invalid limits: max_tokens Input should be greater than 0"
    assert plain("see http://x.example/?token=abc now") == "see [link removed] now"
    assert plain("no server at http://127.0.0.1:9/v1", links=True).endswith("/v1")


def test_cli_refusals_name_no_library_class_or_url(db_path: Path, wc: WorkCenter) -> None:
    item = wc.create_work_item(**{"title": "t", "goal": "g", "mode": "linear", "stages": ["a"]})
    runner = CliRunner()
    for options in (["--tokens", "-5"], ["--tokens", str(2**60)], ["--requests", "0"]):
        extend = ["--db", str(db_path), "budget", "extend", str(item.id), "--expected-version"]
        result = runner.invoke(cli, [*extend, "1", *options])
        assert result.exit_code == 2, result.output
        assert result.output.startswith("InvalidInput: "), result.output
        assert not LIBRARY.search(result.output), result.output


# --- HEAD and If-None-Match --------------------------------------------------------

READS = ["", "/progress", "/budget", "/timeline", "/audit", "/conversation"]


@pytest.mark.parametrize("suffix", READS)
def test_every_read_answers_head_and_if_none_match(api: TestClient, suffix: str) -> None:
    item_id, _ = created(api)
    path = f"/api/work-items/{item_id}{suffix}"
    full = api.get(path)
    assert full.status_code == 200 and full.content
    etag = full.headers["ETag"]
    head = api.head(path)
    assert head.status_code == 200 and head.content == b""
    assert head.headers["ETag"] == etag
    assert head.headers["Content-Length"] == str(len(full.content))
    same = api.get(path, headers={"If-None-Match": etag})
    assert same.status_code == 304 and same.content == b""
    assert same.headers["ETag"] == etag and same.headers["Cache-Control"] == "no-cache"
    assert api.get(path, headers={"If-None-Match": f'W/{etag}, "x"'}).status_code == 304
    assert api.head(path, headers={"If-None-Match": etag}).status_code == 304
    assert api.get(path, headers={"If-None-Match": '"0.0"'}).status_code == 200


def test_the_list_answers_304_until_something_is_written(api: TestClient) -> None:
    first = api.get("/api/work-items")
    etag = first.headers["ETag"]
    assert api.get("/api/work-items", headers={"If-None-Match": etag}).status_code == 304
    assert api.head("/api/work-items").headers["ETag"] == etag
    created(api)
    changed = api.get("/api/work-items", headers={"If-None-Match": etag})
    assert changed.status_code == 200 and changed.headers["ETag"] != etag


ITEM_READS = ("", "/progress", "/budget", "/timeline", "/audit", "/conversation")


def shown(read: Any) -> Any:
    """What a read shows of the store: its body without the timeline's clock (``now``)."""
    body = read.json()
    return {key: value for key, value in body.items() if key != "now"}


def test_an_item_read_answers_304_only_while_its_bytes_are_the_same(api: TestClient) -> None:
    """A user message (the conversation's events) and a Run's reservation and settlement
    (the ledger's usage) change no version a command expects, but they change what the
    item's reads show: a read's ETag names its bytes too, so one read before them
    earns a 200 with a new ETag, never a 304 for a body that changed (ADR-0079); a
    read whose bytes are the same but for the timeline's own clock still earns a 304."""
    item_id, _ = created(api)
    base = f"/api/work-items/{item_id}"
    fence = api.post("/api/worker/claim", json={"worker": "w", "bootId": "b"}).json()["fence"]
    before = {path: api.get(base + path) for path in ITEM_READS}
    for path, read in before.items():
        same = api.get(base + path, headers={"If-None-Match": read.headers["ETag"]})
        assert same.status_code == 304, path
    request = {"messages": [{"role": "user", "content": "hi"}]}
    reserved = api.post(
        "/api/worker/requests/reserve", json={"fence": fence, "requestId": "q1", "request": request}
    )
    assert reserved.status_code == 200 and reserved.json()["allowed"], reserved.text
    usage = {"input_tokens": 500, "output_tokens": 100}
    settled = api.post(
        "/api/worker/requests/settle", json={"fence": fence, "requestId": "q1", "usage": usage}
    )
    assert settled.status_code == 200, settled.text
    etag = api.get(base).headers["ETag"]
    posted = api.post(
        base + "/messages", json={"text": "how is it going?"}, headers={"If-Match": etag}
    )
    assert posted.status_code == 202, posted.text
    changed = set()
    for path, old in before.items():
        again = api.get(base + path, headers={"If-None-Match": old.headers["ETag"]})
        now = api.get(base + path)
        if shown(now) == shown(old):
            assert again.status_code == 304, path
        else:
            assert again.status_code == 200 and again.headers["ETag"] != old.headers["ETag"], path
            changed.add(path)
    assert {"", "/budget", "/audit", "/conversation"} <= changed


def test_a_reads_etag_and_its_versions_alone_both_serve_as_if_match(
    api: TestClient, wc: WorkCenter
) -> None:
    """A command checks only the versions an ETag names: a read's full ETag and the
    two versions alone are both accepted, and a message posted since (which moves no
    version) does not make either stale (ADR-0030, ADR-0079)."""
    item_id, _ = created(api)
    read = api.get(f"/api/work-items/{item_id}").headers["ETag"]
    item = wc.work_item(item_id)  # type: ignore[arg-type]
    versions = f'"{item.version}.{wc.ledger(item.id).control_version}"'
    assert read.startswith(versions[:-1] + ".")
    posted = api.post(
        f"/api/work-items/{item_id}/messages", json={"text": "hello"}, headers={"If-Match": read}
    )
    assert posted.status_code == 202, posted.text
    for tag in (read, versions):
        count = wc.event_count()
        stale = api.post(
            f"/api/work-items/{item_id}/cancel", json={}, headers={"If-Match": tag + "x"}
        )
        assert stale.status_code == 412 and wc.event_count() == count
    cancelled = api.post(f"/api/work-items/{item_id}/cancel", json={}, headers={"If-Match": read})
    assert cancelled.status_code == 200, cancelled.text


def test_a_refused_query_or_empty_body_is_said_with_its_subject_and_never_echoed(
    api: TestClient, wc: WorkCenter
) -> None:
    """ADR-0057's rules for the reads' parameters too: a refusal names what it refuses in
    the API's own words (``at``, ``atTime``, the body) and never repeats the input."""
    item_id, _ = created(api)
    too_big, not_a_time, past = "9007199254740992", "2222222222222", "99999999999999999999999"
    count = wc.event_count()
    for response, says in (
        (api.get(f"/api/work-items/{item_id}/audit", params={"at": too_big}), "at must be"),
        (api.get(f"/api/work-items/{item_id}/audit", params={"atTime": not_a_time}), "atTime"),
        (api.get("/api/stream", params={"after": past}), "past the head"),
        (api.post("/api/work-items", headers={"content-type": "application/json"}), "the body"),
    ):
        assert response.status_code == 422, response.text
        detail = response.json()["detail"]
        assert detail.startswith(says) or says in detail, detail
        assert not any(given in detail for given in (too_big, not_a_time, past)), detail
    assert wc.event_count() == count
    audit = api.get("/openapi.json").json()["paths"]["/api/work-items/{item_id}/audit"]["get"]
    (at,) = [p for p in audit["parameters"] if p["name"] == "at"]
    assert at["schema"]["maximum"] == 2**53 - 1


def test_head_on_a_missing_item_is_404_without_a_body(api: TestClient) -> None:
    missing = api.head("/api/work-items/00000000-0000-0000-0000-000000000000")
    assert missing.status_code == 404 and missing.content == b""


def test_streams_are_not_reads_and_commands_ignore_if_none_match(
    api: TestClient, wc: WorkCenter
) -> None:
    assert api.head("/api/stream").status_code == 405
    item_id, etag = created(api)
    cancelled = api.post(
        f"/api/work-items/{item_id}/cancel",
        json={},
        headers={"If-Match": etag, "If-None-Match": "*"},
    )
    assert cancelled.status_code == 200


def test_if_none_match_compares_weakly() -> None:
    assert matches('"1.2"', '"1.2"') and matches('W/"1.2"', '"1.2"') and matches("*", '"p3"')
    assert matches('"a", "1.2"', '"1.2"') and not matches('"1.20"', '"1.2"')


# --- duplicate keys ----------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        b'{"title": "a", "title": "b", "goal": "g"}',
        b'{"title": "a", "goal": "g", "limits": {"maxTokens": 5, "maxTokens": 900}}',
    ],
)
def test_a_key_named_twice_is_refused_and_writes_nothing(
    api: TestClient, wc: WorkCenter, body: bytes
) -> None:
    before = wc.event_count()
    response = api.post(
        "/api/work-items", content=body, headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 422, response.text
    assert "twice" in response.json()["detail"]
    assert wc.event_count() == before


@pytest.mark.parametrize("token", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity_are_not_json_numbers(api: TestClient, wc: WorkCenter, token: str) -> None:
    # Python's parser takes them; they reached the bounds and read as out of range.
    created(api)
    before = wc.event_count()
    response = api.post(
        "/api/worker/claim",
        content=b'{"worker": "w", "leaseSeconds": ' + token.encode() + b"}",
        headers={"Content-Type": "application/json"},
    )
    assert response.status_code == 422, response.text
    assert response.json()["detail"] == f"the body holds {token}, which is not a JSON number"
    assert wc.event_count() == before


@pytest.mark.parametrize(
    ("request_", "says"),
    [
        ({"a": 1e20}, "request.a must be at most 9007199254740991"),
        ({"a": {"b": -1e17}}, "request.a.b must be at least -9007199254740991"),
        (
            {"a": [[1]]},
            "request.a.0 must be a string, true or false, an integer, a valid number or an object",
        ),
    ],
    ids=["number", "inside an object", "a list in a list"],
)
def test_free_form_json_is_refused_for_one_reason(
    api: TestClient, wc: WorkCenter, request_: dict[str, Any], says: str
) -> None:
    # Each member of the JSON union said what it wanted: "must be a string; must be true
    # or false; must be an integer; must be at most 9007199254740991.0; ...".
    created(api)
    fence = api.post("/api/worker/claim", json={"worker": "w"}).json()["fence"]
    before = wc.event_count()
    response = api.post(
        "/api/worker/requests/reserve",
        json={"fence": fence, "requestId": "r", "request": request_},
    )
    assert response.status_code == 422, response.text
    assert response.json()["detail"] == says
    assert wc.event_count() == before


def test_a_command_with_a_key_named_twice_is_refused(api: TestClient, wc: WorkCenter) -> None:
    item_id, etag = created(api)
    before = wc.event_count()
    response = api.post(
        f"/api/work-items/{item_id}/budget/extend",
        content=b'{"maxTokens": 5, "maxTokens": 5000000}',
        headers={"Content-Type": "application/json", "If-Match": etag},
    )
    assert response.status_code == 422
    assert response.json()["detail"] == "the body names 'maxTokens' twice: give each field once"
    assert wc.event_count() == before
