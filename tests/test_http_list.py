"""The item list at a few hundred items: newest first, paged by a cursor so that items
created while a user pages shift no page but the first, filtered by status and searched
over title and goal, on the API."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from http_client import client

from workcenter.application import WorkCenter

ITEMS = 500


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[WorkCenter, list[str]]]:
    """500 items, every fifth started, every seventh's goal naming a parser."""
    path = tmp_path_factory.mktemp("list") / "list.db"
    with WorkCenter.open(path) as wc:
        ids = []
        for n in range(ITEMS):
            item = wc.create_work_item(
                title=f"Item {n:03d}",
                goal="Fix the Parser" if n % 7 == 0 else "Keep things tidy",
                mode="linear",
                stages=["work"],
                start=n % 5 == 0,
            )
            ids.append(str(item.id))
        yield wc, ids


def page(api: TestClient, **params: Any) -> dict[str, Any]:
    response = api.get("/api/work-items", params=params)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def walk(api: TestClient, between: Any = None, **params: Any) -> list[str]:
    """Every id the list shows, page by page, calling ``between`` after each page."""
    seen: list[str] = []
    cursor = None
    while True:
        body = page(api, **params, **({"after": cursor} if cursor else {}))
        seen += [row["id"] for row in body["items"]]
        cursor = body["next"]
        if between is not None:
            between()
        if cursor is None:
            return seen


def test_newest_first_and_every_item_once_across_pages(
    store: tuple[WorkCenter, list[str]],
) -> None:
    wc, ids = store
    api = client(wc)
    first = page(api, limit=100)
    assert first["total"] == ITEMS and first["items"][0]["id"] == ids[-1]
    assert first["items"][0]["title"] == "Item 499"
    assert walk(api, limit=100) == ids[::-1]


def test_a_cursor_goes_in_a_query_string_as_it_was_given(
    store: tuple[WorkCenter, list[str]],
) -> None:
    # A "+" in the cursor, unencoded, read as a space and was refused.
    wc, ids = store
    api = client(wc)
    cursor = page(api, limit=3)["next"]
    response = api.get(f"/api/work-items?limit=3&after={cursor}")
    assert response.status_code == 200, response.text
    assert [row["id"] for row in response.json()["items"]] == ids[-4:-7:-1]


def test_pages_stay_put_while_items_are_created(store: tuple[WorkCenter, list[str]]) -> None:
    wc, ids = store
    api = client(wc)
    created: list[str] = []

    def insert() -> None:  # three new items between every two pages
        for _ in range(3):
            response = api.post("/api/work-items", json={"title": "new", "goal": "g"})
            assert response.status_code == 201
            created.append(response.json()["id"])

    try:
        shown = walk(api, between=insert, limit=64)
        assert shown == ids[::-1]  # nothing repeated, nothing skipped
        fresh = page(api, limit=100)
        assert [row["id"] for row in fresh["items"][: len(created)]] == created[::-1]
        assert fresh["total"] == ITEMS + len(created)
    finally:
        for item_id in created:  # the other tests count 500
            wc.cancel(item_id)  # type: ignore[arg-type]


def test_filter_by_status_and_page_it(store: tuple[WorkCenter, list[str]]) -> None:
    wc, ids = store
    api = client(wc)
    ready = [item for n, item in enumerate(ids) if n % 5 == 0][::-1]
    assert walk(api, status="ready", limit=30) == ready
    assert page(api, status="ready", limit=1)["total"] == len(ready)
    drafts = walk(api, status="draft", limit=100)
    assert len(drafts) == ITEMS - len(ready) and drafts[0] == ids[-1]


def test_search_title_and_goal_case_insensitively(store: tuple[WorkCenter, list[str]]) -> None:
    wc, ids = store
    api = client(wc)
    parser = [item for n, item in enumerate(ids) if n % 7 == 0][::-1]
    assert walk(api, q="parser", limit=20) == parser
    assert (
        walk(api, q="PARSER", status="ready", limit=5)
        == [item for n, item in enumerate(ids) if n % 35 == 0][::-1]
    )
    by_title = page(api, q="item 042")
    assert [row["id"] for row in by_title["items"]] == [ids[42]] and by_title["next"] is None
    assert page(api, q="nothing like it")["items"] == []


def test_a_cursor_from_elsewhere_is_refused(store: tuple[WorkCenter, list[str]]) -> None:
    wc, _ = store
    api = client(wc)
    for bad in ("12", "0x1p+0~" + "g" * 32, "x" * 65):
        response = api.get("/api/work-items", params={"after": bad})
        assert response.status_code == 422, response.text
        assert response.json()["title"] == "InvalidInput"
