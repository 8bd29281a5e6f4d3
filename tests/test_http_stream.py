"""The change stream: Server-Sent Events against a real uvicorn on 127.0.0.1.

A client that disconnects mid-stream while workers write, and reconnects with
``Last-Event-ID``, receives every event of the sequence exactly once, in order; a
stream of one item carries that item's events only. The change feed below it
learns which item each Action and ledger stream belongs to, even when it starts
reading half-way through the sequence.
"""

from __future__ import annotations

import asyncio
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from http_client import LINEAR, Event, served, sse_events

from workcenter.adapters.executors import echo
from workcenter.adapters.http.app import create_app
from workcenter.adapters.http.stream import HeadWatcher
from workcenter.adapters.worker import run_worker
from workcenter.application import WorkCenter
from workcenter.domain.errors import InvalidInput, NotFound

TIMEOUT = httpx.Timeout(30.0)
CLI = "from workcenter.adapters.cli import main; main()"


@pytest.fixture
def wc(db_path: Path) -> Iterator[WorkCenter]:
    with WorkCenter.open(db_path) as center:
        yield center


def create(http: httpx.Client, **changes: Any) -> str:
    response = http.post("/api/work-items", json=LINEAR | changes)
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def read_changes(
    http: httpx.Client,
    path: str,
    *,
    last_event_id: int | None = None,
    after: int | None = None,
    count: int | None = None,
    until: int | None = None,
) -> list[Event]:
    """Changes from one connection: ``count`` of them, or up to position ``until``;
    then the client hangs up."""
    headers = {"Last-Event-ID": str(last_event_id)} if last_event_id is not None else {}
    params = {"after": after} if after is not None else {}
    seen: list[Event] = []
    with http.stream("GET", path, headers=headers, params=params) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        for event in sse_events(response):
            if event.kind != "change":
                continue
            seen.append(event)
            if count is not None and len(seen) >= count:
                break
            if until is not None and event.id is not None and event.id >= until:
                break
    return seen


def test_a_client_that_reconnects_with_last_event_id_sees_every_event_once(
    wc: WorkCenter, db_path: Path
) -> None:
    with served(create_app(wc)) as base, httpx.Client(base_url=base, timeout=TIMEOUT) as http:
        for n in range(3):
            create(http, title=f"item {n}")
        # Workers write while the client comes and goes: a separate store handle,
        # like a worker process beside the server.
        with WorkCenter.open(db_path) as worker_wc:
            worker = threading.Thread(
                target=run_worker,
                args=(worker_wc, echo),
                kwargs={"worker": "w1", "exit_when_idle": True, "poll_seconds": 0.01},
            )
            worker.start()
            received: list[Event] = read_changes(http, "/api/stream", after=0, count=5)
            for _ in range(4):  # disconnect mid-stream, reconnect where it stopped
                last = received[-1].id
                received += read_changes(http, "/api/stream", last_event_id=last, count=7)
            worker.join(60)
            assert not worker.is_alive()
        create(http, title="after the workers")
        head = wc.event_count()
        received += read_changes(http, "/api/stream", last_event_id=received[-1].id, until=head)
    positions = [event.id for event in received]
    assert positions == list(range(1, head + 1))  # every event, once, in order
    done = [e.data for e in received if e.data and e.data["type"] == "WorkItemCompleted"]
    assert len(done) == 3
    first = received[0].data
    assert first is not None and first["type"] == "WorkItemCreated"
    assert set(first) == {"position", "workItemId", "aggregate", "aggregateId", "version",
                          "type", "at", "actor"}  # fmt: skip


def test_an_item_stream_carries_that_items_changes_only(wc: WorkCenter) -> None:
    with served(create_app(wc)) as base, httpx.Client(base_url=base, timeout=TIMEOUT) as http:
        mine = create(http, title="mine")
        create(http, title="other")
        run_worker(wc, echo, worker="w1", exit_when_idle=True, poll_seconds=0.01)
        expected = [row.position for row in wc.audit(mine, limit=None)]  # type: ignore[arg-type]
        path = f"/api/work-items/{mine}/stream"
        first = read_changes(http, path, after=0, count=4)
        rest = read_changes(http, path, last_event_id=first[-1].id, until=expected[-1])
        assert http.get(f"/api/work-items/{'0' * 32}/stream").status_code == 404
        bad = http.get("/api/stream", headers={"Last-Event-ID": "yesterday"})
        assert bad.status_code == 422
        future = http.get("/api/stream", headers={"Last-Event-ID": str(expected[-1] + 10_000)})
        assert future.status_code == 422 and "past the head" in future.json()["detail"]
    received = first + rest
    assert [e.id for e in received] == expected
    assert {e.data["workItemId"] for e in received if e.data} == {mine}
    kinds = {e.data["aggregate"] for e in received if e.data}
    assert kinds == {"work_item", "action", "ledger"}


def test_without_a_position_the_stream_starts_now(wc: WorkCenter) -> None:
    with served(create_app(wc)) as base, httpx.Client(base_url=base, timeout=TIMEOUT) as http:
        create(http, title="before")
        head = wc.event_count()
        result: list[Event] = []
        reader = threading.Thread(
            target=lambda: result.extend(read_changes(http, "/api/stream", count=1))
        )
        reader.start()
        # The reader is connected once the server has answered it; then write.
        while reader.is_alive() and not result:
            create(http, title="after")
            reader.join(0.5)
    assert result and result[0].id is not None and result[0].id > head


def test_the_change_feed_learns_owners_when_it_starts_half_way(
    wc: WorkCenter, db_path: Path
) -> None:
    item = wc.create_work_item(
        title="t", goal="g", acceptance_criteria=["c"], mode="linear", stages=["a"], start=True
    )
    created_at = wc.event_count()
    run_worker(wc, echo, worker="w1", exit_when_idle=True, poll_seconds=0.01)
    wc.extend_budget(item.id, expected_version=1, additions={"max_tokens": 10})
    with WorkCenter.open(db_path) as fresh:  # knows no stream yet
        page = fresh.changes.after(created_at, limit=1000)
        assert page.position == fresh.event_count()
        assert page.changes and {c.work_item_id for c in page.changes} == {item.id}
        assert {c.aggregate for c in page.changes} >= {"action", "ledger"}
        only = fresh.changes.after(0, limit=3, work_item_id=item.id)
        assert [c.position for c in only.changes] == [1, 2, 3] and only.position == 3
        with pytest.raises(InvalidInput):
            fresh.changes.after(-1)
        with pytest.raises(InvalidInput):
            fresh.changes.after(0, limit=0)
        # Past the head: handed back, it would skip what comes up to it (ADR-0145).
        assert fresh.changes.after(fresh.event_count()).position == fresh.event_count()
        with pytest.raises(InvalidInput, match="past the head"):
            fresh.changes.after(fresh.event_count() + 1)
        with pytest.raises(NotFound):
            fresh.changes.after(0, work_item_id="not an id")  # type: ignore[arg-type]


def test_serve_ends_its_streams_and_stops_on_sigterm(wc: WorkCenter, db_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    base = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(
        [sys.executable, "-c", CLI, "serve", "--db", str(db_path), "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(base + "/api/work-items", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                assert time.monotonic() < deadline and server.poll() is None
                time.sleep(0.1)
        with httpx.Client(base_url=base, timeout=TIMEOUT) as http:
            create(http)
            with http.stream("GET", "/api/stream", params={"after": 0}) as response:
                lines = response.iter_lines()
                assert next(line for line in lines if line.startswith("id: ")) == "id: 1"
                server.send_signal(signal.SIGTERM)
                # uvicorn stops gracefully, then ends by the signal it was given.
                assert server.wait(timeout=15) in (0, -signal.SIGTERM)
                list(lines)  # the stream ended
        output = server.communicate()[0].decode()
        assert "Finished server process" in output and "Traceback" not in output
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


def test_the_head_is_read_only_while_a_stream_waits() -> None:
    """An idle ``serve`` read the head ten times a second for as long as it ran, once any
    stream had been opened, with no client left (found by acceptance testing, ADR-0137):
    the watcher reads it while a stream waits on it, and stops when none does."""
    reads: list[int] = []

    def read_head() -> int:
        reads.append(1)
        return 7

    async def scenario() -> tuple[int, int]:
        heads = HeadWatcher(read_head, poll=0.01)
        assert not await heads.wait_past(7, timeout=0.2)  # a stream waits, nothing moves
        waited = len(reads)
        await asyncio.sleep(0.3)  # no stream
        idle = len(reads) - waited
        assert not await heads.wait_past(7, timeout=0.1)  # a stream again: reads again
        again = len(reads) - waited - idle
        await heads.stop()
        return idle, again

    idle, again = asyncio.run(scenario())
    assert idle <= 1 and again >= 3
