"""A PostgreSQL server of a test's own, to restart under running workers.

The shared test server (``postgres.py``) is never restarted: other tests use it.
This one is made by ``initdb`` in a temporary directory and run by ``pg_ctl`` on a
free port, from ``WORKCENTER_PG_BIN`` (default PostgreSQL 15's directory). ``initdb``
refuses to run as root, so as root (as CI runs) both run as the ``postgres`` OS user.
Without the binaries the tests skip with that reason, except in CI, where they fail.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

BIN = Path(os.environ.get("WORKCENTER_PG_BIN", "/usr/lib/postgresql/15/bin"))
OS_USER = "postgres"


def _as_server_user() -> list[str]:
    """The prefix that runs a command as the server's OS user (nothing unless root)."""
    if os.geteuid() != 0:
        return []
    return ["runuser", "-u", OS_USER, "--"]


def require_binaries() -> None:
    missing = [name for name in ("initdb", "pg_ctl") if not (BIN / name).exists()]
    if os.geteuid() == 0:
        try:
            pwd.getpwnam(OS_USER)
        except KeyError:
            missing.append(f"an OS user {OS_USER!r} to run them as")
    if not missing:
        return
    reason = f"a private PostgreSQL needs {', '.join(missing)} (in {BIN})"
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PrivateServer:
    """A throw-away cluster: started, restarted and removed by the test."""

    def __init__(self, directory: Path, port: int) -> None:
        self.directory, self.port = directory, port
        self.data = directory / "data"
        self.log = directory / "server.log"
        self.url = f"postgresql://postgres@127.0.0.1:{port}/postgres?schema=wcrestart"

    def _run(self, *args: str) -> None:
        subprocess.run([*_as_server_user(), *args], check=True, capture_output=True, timeout=120)

    def init(self) -> None:
        self._run(
            str(BIN / "initdb"),
            "-D",
            str(self.data),
            "-U",
            "postgres",
            "--auth=trust",
            "--no-sync",
        )

    def _ctl(self, verb: str) -> None:
        options = f"-p {self.port} -k {self.directory} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run(
            str(BIN / "pg_ctl"), verb, "-D", str(self.data), "-l", str(self.log),
            "-o", options, "-w", "-m", "fast",
        )  # fmt: skip

    def start(self) -> None:
        self._ctl("start")

    def restart(self) -> None:
        self._ctl("restart")

    def stop(self) -> None:
        self._run(str(BIN / "pg_ctl"), "stop", "-D", str(self.data), "-w", "-m", "immediate")


@contextmanager
def private_server() -> Iterator[PrivateServer]:
    require_binaries()
    directory = Path(tempfile.mkdtemp(prefix="wc-private-pg-"))
    if os.geteuid() == 0:
        shutil.chown(directory, user=OS_USER)
    server = PrivateServer(directory, free_port())
    try:
        server.init()
        server.start()
        yield server
    finally:
        with contextlib.suppress(subprocess.CalledProcessError):  # not running
            server.stop()
        shutil.rmtree(directory, ignore_errors=True)
