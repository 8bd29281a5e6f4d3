"""A body past the limit is answered 413 on a live server, also on a connection the
client reused (ADR-0140): the server answered while the client still sent, closed the
connection on unread data, and the client saw it reset in most tries, not the 413 (a
worker then sent its too large finish again until its lease ended). A request no token
vouches for is not read on; a body sent a byte at a time has 30 s in all."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from live_server import environment, serving

from workcenter.adapters.http import guard
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


TOKEN = "a-token-of-the-body-limit-test"


def test_a_public_path_without_a_token_reads_no_body(db_path: Path) -> None:
    """Public paths skip the token: a peer without one made the server read 64 MiB, or
    wait 5 s, a request (found by acceptance testing, ADR-0140)."""
    with serving(db_path, environment(WORKCENTER_API_TOKEN=TOKEN), token=TOKEN) as url:
        host, port = url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=10) as peer:
            peer.sendall(
                b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 10000000000\r\n\r\n"
            )
            started = time.monotonic()
            answer = b""
            while chunk := peer.recv(4096):
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 413") and time.monotonic() - started < 1
        assert b"a request without a token carries no body" in answer


def test_a_body_sent_a_byte_at_a_time_is_408_once_its_time_is_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A body that never ends held its connection (and a file) for as long as the client
    went on (found by acceptance testing, ADR-0140)."""
    monkeypatch.setattr(guard, "BODY_SECONDS", 0.3)
    reached: list[object] = []

    async def app(scope: object, receive: object, send: object) -> None:
        reached.append(scope)

    async def trickle() -> dict[str, object]:
        await asyncio.sleep(0.1)
        return {"type": "http.request", "body": b"{", "more_body": True}

    sent: list[dict[str, object]] = []

    async def send(message: dict[str, object]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/api/work-items",
        "headers": [(b"host", b"127.0.0.1"), (b"content-type", b"application/json")],
    }
    wrapped = guard.Guard(app, guard.Policy.for_host("127.0.0.1"))
    started = time.monotonic()
    asyncio.run(wrapped(scope, trickle, send))  # type: ignore[arg-type]
    assert sent[0]["status"] == 408 and not reached
    assert 0.3 <= time.monotonic() - started < 2
