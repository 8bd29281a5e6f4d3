"""``serve`` out of open files (ADR-0138): idle clients past the process's limit left
accept() without a file. asyncio's accept loop paused the socket but went on trying the
rest of uvicorn's backlog, each try a logged traceback and one more timer: tens of
thousands of tracebacks a second, filling the disk (found by acceptance testing). The
server now says it once a pause, and answers again once the clients leave."""

from __future__ import annotations

import os
import resource
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import httpx
from live_server import WORKCENTER, free_port


def test_clients_past_the_open_files_limit_are_said_once_a_pause(tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/api/work-items"

    def few_files() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))

    with tempfile.TemporaryFile() as log:
        server = subprocess.Popen(
            [
                WORKCENTER,
                "--db",
                str(tmp_path / "s.db"),
                "serve",
                "--create",
                "--port",
                str(port),
                "--log-level",
                "warning",
            ],
            preexec_fn=few_files,
            stdout=subprocess.DEVNULL,
            stderr=log,
            env=dict(os.environ),
        )
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    if httpx.get(url, timeout=1).is_success:
                        break
                except httpx.TransportError:
                    assert time.monotonic() < deadline and server.poll() is None
                    time.sleep(0.1)
            idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(70)]
            time.sleep(2)
            for client in idle:
                client.close()
            time.sleep(1.5)
            assert httpx.get(url, timeout=5).is_success  # it answers again
        finally:
            server.terminate()
            server.wait(20)
        log.seek(0)
        said = log.read().decode(errors="replace")
    ran_out = said.count("Too many open files")
    assert 1 <= ran_out <= 10, f"{ran_out} tracebacks of accept() out of files"
