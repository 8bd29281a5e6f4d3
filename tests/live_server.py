"""``workcenter serve`` as an operator starts it, on a free loopback port, for the tests
that drive a live server from another process (the JavaScript worker, Schemathesis).

Test modules import it with ``from live_server import ...`` (pytest puts this
directory on ``sys.path``)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import httpx

TOKEN_ENVS = (
    "WORKCENTER_API_TOKEN",
    "WORKCENTER_TOKEN_FILE",
    "WORKCENTER_WORKER_TOKEN",
    "WORKCENTER_USER_TOKEN",
    "WORKCENTER_OPERATOR_TOKEN",
)
WORKCENTER = str(Path(sys.executable).with_name("workcenter"))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def environment(**tokens: str) -> dict[str, str]:
    """This process's environment without the caller's tokens, with ``tokens`` set."""
    kept = {k: v for k, v in os.environ.items() if k not in TOKEN_ENVS}
    return kept | tokens


@contextmanager
def serving(db_path: Path, env: Mapping[str, str], token: str | None = None) -> Iterator[str]:
    """``workcenter serve --create`` on ``db_path`` until the block ends (SIGINT, as
    Ctrl-C); yields its base URL once it answers."""
    port = free_port()
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    # The log goes to a file, read only if serve fails: a pipe nobody reads could fill.
    with tempfile.TemporaryFile() as log:
        command = [WORKCENTER, "--db", str(db_path), "serve", "--create", "--port", str(port)]
        process = subprocess.Popen(
            [*command, "--log-level", "warning"],
            env=dict(env),
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(url + "/api/work-items", headers=headers, timeout=1).is_success:
                    break
            except httpx.TransportError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                log.seek(0)
                raise RuntimeError(f"serve did not start: {log.read()!r}")
            time.sleep(0.1)
        try:
            yield url
        finally:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
