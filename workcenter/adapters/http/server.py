"""``workcenter serve``: the application under uvicorn, on one store, and with
``--coordinate`` the Coordinator's loop beside it."""

from __future__ import annotations

import contextlib
import errno
import math
import signal
import socket
import threading
import time
from collections.abc import Iterator
from types import FrameType
from typing import Any

import uvicorn

from workcenter.adapters.http import lease_watch
from workcenter.adapters.http.app import create_app
from workcenter.adapters.http.coordinator_loop import CoordinatorLoop
from workcenter.adapters.http.guard import Policy
from workcenter.adapters.http.stream import HeadWatcher
from workcenter.application import WorkCenter
from workcenter.domain.errors import WorkcenterError

# Change streams end when the server is told to stop; anything still open after this
# long is cut (a browser reconnects with Last-Event-ID and loses nothing).
GRACEFUL_SECONDS = 2
STOP_SECONDS = GRACEFUL_SECONDS + 10


class PortUnavailable(WorkcenterError):
    """The address to serve on cannot be listened on (its port in use, say)."""

    code = "port_unavailable"


class ListeningSocket(socket.socket):
    """A listening socket whose ``accept`` says "nothing waiting" for a while after the
    process ran out of open files, rather than that again. asyncio's accept loop, told
    the files ran out, pauses the socket for a second but goes on trying the rest of its
    backlog (2,048 with uvicorn's), each try a logged traceback and one more timer: at a
    few dozen idle clients past the limit, tens of thousands of tracebacks a second and
    no answer (found by acceptance testing, ADR-0138). Now one a pause."""

    QUIET_SECONDS = 0.5  # less than asyncio's pause (a second), so each pause says it once

    _ran_out_at = -math.inf

    def accept(self) -> tuple[socket.socket, Any]:
        if time.monotonic() - self._ran_out_at < self.QUIET_SECONDS:
            raise BlockingIOError(errno.EAGAIN, "out of open files: paused")
        try:
            return super().accept()
        except OSError as error:
            if error.errno in (errno.EMFILE, errno.ENFILE):
                self._ran_out_at = time.monotonic()
            raise


def bind(host: str, port: int) -> socket.socket:
    """The listening socket, bound as uvicorn binds it, but before the dashboard's
    address is announced: a port in use is one line, not a URL and then a log."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = ListeningSocket(family=family)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as error:
        sock.close()
        raise PortUnavailable(f"cannot serve on {host} port {port}: {error.strerror}") from None
    sock.set_inheritable(True)
    return sock


class Terminated(KeyboardInterrupt):
    """SIGTERM while the Coordinator's loop runs: a shutdown, handled as Ctrl-C is (a
    turn in hand is recorded as interrupted, not counted)."""


def serve(
    wc: WorkCenter,
    policy: Policy,
    port: int,
    *,
    log_level: str = "info",
    coordinator: CoordinatorLoop | None = None,
    sock: socket.socket | None = None,
) -> None:
    """Serve until interrupted by Ctrl-C or SIGTERM (``Terminated`` with a Coordinator),
    on ``sock`` if it is given (bound by ``bind``), else on the policy's host and ``port``."""
    sockets = [sock if sock is not None else bind(policy.host, port)]
    app = create_app(
        wc,
        policy,
        on_message=coordinator.nudge if coordinator else None,
        recover_every=lease_watch.EVERY_SECONDS,
    )
    config = uvicorn.Config(
        app,
        host=policy.host,
        port=port,
        log_level=log_level,
        proxy_headers=False,
        server_header=False,
        timeout_graceful_shutdown=GRACEFUL_SECONDS,
    )
    server = StreamEndingServer(config, app.state.head_watcher)
    if coordinator is None:
        server.run(sockets)
    else:
        serve_beside(server, sockets, coordinator)


def serve_beside(
    server: StreamEndingServer, sockets: list[socket.socket], coordinator: CoordinatorLoop
) -> None:
    """The server in a thread, the Coordinator's loop in this one; whichever ends
    first (a signal, the loop stopped, the server failing) ends the other."""
    http = threading.Thread(target=server.run, args=(sockets,), name="workcenter-http", daemon=True)
    with _terminate_as_interrupt():
        coordinator.wc.recover_coordinator(at_open=True)
        http.start()
        try:
            while not server.started and http.is_alive() and not coordinator.stopping:
                time.sleep(0.02)
            if not server.started:
                if coordinator.stopping:
                    return
                raise SystemExit(1)  # uvicorn has logged why
            coordinator.run(serving=http.is_alive)
            if not (coordinator.stopping or server.should_exit):
                raise SystemExit(1)  # the server ended on its own: uvicorn has logged why
        finally:
            server.stop()
            http.join(STOP_SECONDS)


class StreamEndingServer(uvicorn.Server):
    """A uvicorn server that ends the change streams as soon as it is told to stop."""

    def __init__(self, config: uvicorn.Config, heads: HeadWatcher) -> None:
        super().__init__(config)
        self.heads = heads

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.heads.close()
        super().handle_exit(sig, frame)

    def stop(self) -> None:
        """Stop serving (from another thread: the server runs beside the Coordinator)."""
        self.heads.close()
        self.should_exit = True


@contextlib.contextmanager
def _terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM raises ``Terminated`` in the main thread while the loop runs there
    (signals reach only the main thread; elsewhere, as in tests, nothing changes)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminate(signum: int, frame: FrameType | None) -> None:
        raise Terminated

    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
