"""Helpers for the HTTP tests: an app on a store, a real uvicorn server in a thread,
and a Server-Sent Events reader.

Test modules import them with ``from http_client import ...`` (pytest puts this
directory on ``sys.path``)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import orjson
import uvicorn
from fastapi import FastAPI
from fastapi.testclient import TestClient

from workcenter.adapters.http.app import create_app
from workcenter.adapters.http.guard import Policy
from workcenter.application import WorkCenter

LOCAL = "http://127.0.0.1:8765"
LINEAR = {
    "title": "Fix the failing import",
    "goal": "The suite passes again",
    "acceptanceCriteria": ["The suite passes", "The import is fixed", "Docs say so"],
    "deliveryTarget": "response",
    "mode": "linear",
    "stages": ["triage", "implement", "deliver"],
    "start": True,
}
DYNAMIC = {
    "title": "Fix the failing import",
    "goal": "The suite passes again",
    "acceptanceCriteria": ["The suite passes"],
    "deliveryTarget": "response",
    "start": True,
}


def versions_of(etag: str) -> str:
    """The versions an item's ETag names, ``"<item version>.<control version>"``: what a
    command checks, and what reads of one item share (each adds its own digest)."""
    return '"' + ".".join(etag.strip('"').split(".")[:2]) + '"'


def client(wc: WorkCenter, policy: Policy | None = None, base_url: str = LOCAL) -> TestClient:
    return TestClient(create_app(wc, policy), base_url=base_url, raise_server_exceptions=False)


@contextmanager
def served(app: FastAPI) -> Iterator[str]:
    """``app`` under a real uvicorn on 127.0.0.1 (a free port), in a thread."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=2)
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        app.state.head_watcher.close()
        server.should_exit = True
        thread.join(20)
        sock.close()


@dataclass(frozen=True)
class Event:
    id: int | None
    kind: str
    data: dict[str, Any] | None


def sse_events(response: httpx.Response) -> Iterator[Event]:
    """The events of a streaming response, as a browser's EventSource parses them."""
    fields: dict[str, list[str]] = {}
    for line in response.iter_lines():
        if line == "":
            if fields:
                raw_id = fields.get("id", [None])[-1]
                data = fields.get("data")
                yield Event(
                    int(raw_id) if raw_id is not None else None,
                    fields.get("event", ["message"])[-1],
                    orjson.loads("\n".join(data)) if data else None,
                )
            fields = {}
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        fields.setdefault(name, []).append(value.removeprefix(" "))
