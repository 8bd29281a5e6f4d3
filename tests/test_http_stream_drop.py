"""A change-stream client that goes away abruptly (a reset, not a close) costs the
server at most one log line, whether it left while idle, in the middle of a burst of
writes, with a second request pipelined behind its stream, or while the server read
the backlog it resumed from (the case that flooded the log: ADR-0057); the server then
serves the next client as before."""

from __future__ import annotations

import logging
import socket
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from http_client import served

from workcenter.adapters.http import stream
from workcenter.adapters.http.app import create_app
from workcenter.adapters.persistence import StoreUnavailable
from workcenter.application import WorkCenter

STREAM = b"GET /api/stream HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n"


class Recorded(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.INFO:
            self.lines.append(f"{record.name}: {record.getMessage()}")


@pytest.fixture
def log() -> Iterator[Recorded]:
    handler = Recorded()
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


def reset(sock: socket.socket) -> None:
    """Close with a TCP reset, as a killed client or a dropped network does."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def burst(wc: WorkCenter, count: int) -> None:
    for n in range(count):
        wc.create_work_item(title=f"burst {n}", goal="g")


@pytest.mark.parametrize("when", ["idle", "mid-burst", "pipelined"])
def test_an_abruptly_closed_stream_client_costs_at_most_one_log_line(
    db_path: Path, log: Recorded, when: str
) -> None:
    with WorkCenter.open(db_path) as wc, served(create_app(wc)) as base:
        port = int(base.rsplit(":", 1)[1])
        sock = socket.create_connection(("127.0.0.1", port))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)
        request = STREAM + (
            b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" if when == "pipelined" else b""
        )
        sock.sendall(request)
        assert sock.recv(64).startswith(b"HTTP/1.1 200")
        writer = threading.Thread(target=burst, args=(wc, 150))
        if when == "mid-burst":
            writer.start()
            time.sleep(0.3)  # changes are on their way to a client that reads none
        log.lines.clear()
        reset(sock)
        if when != "mid-burst":
            time.sleep(0.2)
            writer.start()
        writer.join()
        time.sleep(0.5)  # the stream's next pages
        after = httpx.get(base + "/api/work-items?limit=1", timeout=10)
        assert after.status_code == 200 and after.json()["total"] == 150
        lines = list(log.lines)
    assert len(lines) <= 1, lines


def test_a_client_reset_while_its_backlog_is_read_costs_at_most_one_line(
    db_path: Path, log: Recorded
) -> None:
    """The case that flooded the log: a client resumes far behind (a page of up to
    1,000 changes to send) and is gone before the page is written. Written change by
    change, every write after the fifth to the lost connection logged a line."""
    with WorkCenter.open(db_path) as wc:
        burst(wc, 700)
        with served(create_app(wc)) as base:
            port = int(base.rsplit(":", 1)[1])
            log.lines.clear()
            for delay in range(8):  # the reset lands at different points of the read
                sock = socket.create_connection(("127.0.0.1", port))
                sock.sendall(STREAM.replace(b"/api/stream", b"/api/stream?after=0"))
                time.sleep(0.01 * delay)
                reset(sock)
                time.sleep(0.4)
            lines = list(log.lines)
    assert len(lines) <= 1, f"{len(lines)} lines, such as {lines[:3]}"


def test_a_stream_open_while_the_store_is_away_waits_and_goes_on(
    db_path: Path, log: Recorded, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store unreachable under an open stream (a database restart): the stream stays
    open, logs nothing, and delivers what is written once the store answers again.
    Before, the head watcher's task died with "Task exception was never retrieved" and
    the stream was cut mid-chunk with a traceback in the log (found by acceptance
    testing, ADR-0128)."""
    monkeypatch.setattr(stream, "UNAVAILABLE_SECONDS", 0.05)
    away = threading.Event()

    def failing(real: Any) -> Any:
        def read(*args: Any, **kwargs: Any) -> Any:
            if away.is_set():
                raise StoreUnavailable("the database cannot be reached")
            return real(*args, **kwargs)

        return read

    with WorkCenter.open(db_path) as wc:
        app = create_app(wc)
        heads = app.state.head_watcher
        monkeypatch.setattr(heads, "read_head", failing(heads.read_head))
        monkeypatch.setattr(wc.changes, "after", failing(wc.changes.after))
        monkeypatch.setattr(wc.changes, "head", failing(wc.changes.head))
        with served(app) as base, httpx.stream("GET", base + "/api/stream", timeout=30) as response:
            assert response.status_code == 200
            lines = response.iter_lines()
            assert next(lines).startswith("retry:")
            log.lines.clear()
            away.set()
            time.sleep(0.5)  # the watcher and the stream each look several times
            away.clear()
            wc.create_work_item(title="after the outage", goal="g")
            seen: list[str] = []
            for line in lines:
                seen.append(line)
                if line.startswith("data:"):
                    break
        assert '"WorkItemCreated"' in seen[-1]
        # Said once each, as comments (the dashboard's badge shows them).
        assert [line for line in seen if line.startswith(": store")] == [
            ": store unavailable",
            ": store available",
        ]
    assert log.lines == []
