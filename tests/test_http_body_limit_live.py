"""A body past the limit is answered 413 on a live server, also on a connection the
client reused (ADR-0140): the server answered while the client still sent, closed the
connection on unread data, and the client saw it reset in most tries, not the 413 (a
worker then sent its too large finish again until its lease ended)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from live_server import environment, serving

from workcenter.adapters.http.guard import MAX_BODY_BYTES


@pytest.fixture
def server(db_path: Path) -> Iterator[str]:
    with serving(db_path, environment()) as url:
        yield url


def test_a_body_past_the_limit_is_413_on_a_reused_connection(server: str) -> None:
    too_large = b'{"title": "' + b"x" * (MAX_BODY_BYTES + 512 * 1024) + b'"}'
    statuses = []
    with httpx.Client(base_url=server, timeout=30) as client:
        for _ in range(10):
            assert client.get("/api/work-items").status_code == 200  # the connection reused
            answer = client.post(
                "/api/work-items",
                content=too_large,
                headers={"content-type": "application/json"},
            )
            statuses.append((answer.status_code, answer.json()["title"]))
    assert statuses == [(413, "PayloadTooLarge")] * 10
