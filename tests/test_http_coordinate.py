"""``serve --coordinate``: the Coordinator answers in the server's process. A message
posted through the API is answered (scripted Coordinator) and its reply appears in the
conversation and on the change stream with nothing else running; SIGTERM mid-turn
releases the turn as ``coordinate`` does and stops the server; a provider that raises
fails its turn and the server keeps answering; the CLI end to end."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
from click.testing import CliRunner
from http_client import DYNAMIC, sse_events

from workcenter.adapters.cli import cli
from workcenter.adapters.http.coordinator_loop import CoordinatorLoop
from workcenter.adapters.http.guard import Policy
from workcenter.adapters.http.server import Terminated, serve
from workcenter.adapters.providers.scripted import Reply
from workcenter.adapters.providers.scripted_coordinator import scripted_coordinator
from workcenter.application import WorkCenter
from workcenter.service_layer.handlers.coordinator_step import StepResult
from workcenter.service_layer.ports import CoordinatorProvider

WAIT = 20.0


@pytest.fixture
def wc(db_path: Path) -> Iterator[WorkCenter]:
    with WorkCenter.open(db_path) as center:
        yield center


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_until(check: Callable[[], Any], what: str) -> Any:
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def answering(base: str) -> bool:
    try:
        return httpx.get(base + "/api/work-items", timeout=2).status_code == 200
    except httpx.TransportError:
        return False


@contextmanager
def coordinating_server(
    wc: WorkCenter, provider: CoordinatorProvider, **loop_options: Any
) -> Iterator[tuple[str, CoordinatorLoop]]:
    """``serve`` with the Coordinator's loop, in a thread (stopped through the loop:
    signals are the main thread's)."""
    loop = CoordinatorLoop(wc, provider, poll_seconds=30, **loop_options)
    port = free_port()
    thread = threading.Thread(
        target=serve,
        args=(wc, Policy.for_host("127.0.0.1", token=None), port),
        kwargs={"log_level": "warning", "coordinator": loop},
        daemon=True,
    )
    thread.start()
    base = f"http://127.0.0.1:{port}"
    wait_until(lambda: answering(base), "the server")
    try:
        yield base, loop
    finally:
        loop.stop()
        thread.join(WAIT)
        assert not thread.is_alive()


def assistant_replies(base: str, item_id: str, status: str) -> list[dict[str, Any]]:
    body = httpx.get(f"{base}/api/work-items/{item_id}/conversation", timeout=5).json()
    return [m for m in body["messages"] if m["role"] == "assistant" and m["status"] == status]


def create(base: str) -> str:
    response = httpx.post(base + "/api/work-items", json=DYNAMIC, timeout=10)
    assert response.status_code == 201, response.text
    item_id: str = response.json()["id"]
    return item_id


def post_message(base: str, item_id: str, text: str) -> httpx.Response:
    etag = httpx.get(f"{base}/api/work-items/{item_id}/conversation", timeout=5).headers["ETag"]
    return httpx.post(
        f"{base}/api/work-items/{item_id}/messages",
        json={"text": text},
        headers={"If-Match": etag},
        timeout=10,
    )


def test_a_message_posted_through_the_api_is_answered_with_nothing_else_running(
    wc: WorkCenter,
) -> None:
    steps: list[StepResult] = []
    item_id = str(wc.create_work_item(**_dynamic_kwargs()).id)
    with coordinating_server(wc, scripted_coordinator(), on_step=steps.append) as (base, _):
        # The item's start woke the Coordinator: its first pass answers that at once.
        wait_until(lambda: assistant_replies(base, item_id, "completed"), "the automatic turn")
        head = httpx.get(base + "/api/work-items", timeout=5).json()["position"]
        started = time.monotonic()
        posted = post_message(base, item_id, "Please plan the fix")
        assert posted.status_code == 202, posted.text
        turn_id = posted.json()["turnId"]

        stream = f"{base}/api/work-items/{item_id}/stream?after={head}"
        with httpx.stream("GET", stream, timeout=WAIT) as response:
            kinds = []
            for event in sse_events(response):
                if event.data is None:  # the stream's retry advice
                    continue
                kinds.append(event.data["type"])
                if event.data["type"] == "CoordinatorTurnDecided":
                    break
        # Answered on the nudge, not on the 30-second poll.
        assert time.monotonic() - started < 10
        assert "CoordinatorTurnDecided" in kinds
        body = httpx.get(f"{base}/api/work-items/{item_id}/conversation", timeout=5).json()
        [reply] = [m for m in body["messages"] if m["turnId"] == turn_id and m["role"] != "user"]
        assert reply["status"] == "completed" and reply["text"]
    assert {s.status for s in steps} == {"decided"} and len(steps) == 2


class Blocking:
    """A provider that sends its request and then waits (a slow model), until released."""

    def __init__(self) -> None:
        self.asked = threading.Event()
        self.release = threading.Event()

    def answer(self, request: Any, before_request: Callable[[], None]) -> Reply:
        before_request()
        self.asked.set()
        self.release.wait(WAIT)
        raise AssertionError("not interrupted")


def test_sigterm_mid_turn_releases_the_turn_and_stops_the_server(
    wc: WorkCenter,
) -> None:
    assert threading.current_thread() is threading.main_thread()
    item = wc.create_work_item(**_dynamic_kwargs())
    provider = Blocking()
    port = free_port()
    loop = CoordinatorLoop(wc, cast(CoordinatorProvider, provider), poll_seconds=0.05)

    def terminate_when_asked() -> None:
        if provider.asked.wait(WAIT):
            assert answering(f"http://127.0.0.1:{port}")  # the server serves meanwhile
            os.kill(os.getpid(), signal.SIGTERM)

    killer = threading.Thread(target=terminate_when_asked, daemon=True)
    killer.start()
    previous = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Terminated):
        serve(wc, Policy.for_host("127.0.0.1", token=None), port, coordinator=loop)
    killer.join(WAIT)
    provider.release.set()
    assert signal.getsignal(signal.SIGTERM) == previous  # our handler is gone again
    assert not answering(f"http://127.0.0.1:{port}")
    state = wc.conversation(item.id)
    assert state is not None
    [message] = [m for m in state.messages if m.role == "assistant"]
    assert (message.status, message.error) == ("failed", "shutdown")
    assert [(e.kind, e.status) for e in state.entries] == [("work_item_started", "pending")]
    assert wc.ledger(item.id).coordinator_failures == 0  # an interruption is not counted


class Raising:
    def __init__(self) -> None:
        self.calls = 0

    def answer(self, request: Any, before_request: Callable[[], None]) -> Reply:
        self.calls += 1
        before_request()
        raise RuntimeError("the model's client broke")


def test_a_provider_that_raises_fails_its_turn_and_the_server_keeps_answering(
    wc: WorkCenter,
) -> None:
    provider = Raising()
    item_id = str(wc.create_work_item(**_dynamic_kwargs()).id)
    with coordinating_server(wc, cast(CoordinatorProvider, provider)) as (base, _):
        [failed] = wait_until(lambda: assistant_replies(base, item_id, "failed"), "a failure")
        assert failed["error"] == "provider error: RuntimeError"
        assert answering(base)
        posted = post_message(base, item_id, "Try again please")
        assert posted.status_code == 202, posted.text
        wait_until(lambda: len(assistant_replies(base, item_id, "failed")) == 2, "2 failures")
        assert answering(base) and provider.calls == 2


def test_an_error_in_a_pass_is_reported_and_the_next_pass_runs(wc: WorkCenter) -> None:
    class Flaky(WorkCenter):
        passes = 0

        def coordinate_once(self, *args: Any, **kwargs: Any) -> list[StepResult]:
            Flaky.passes += 1
            if Flaky.passes == 1:
                raise OSError("disk I/O error at /home/alice/store.db")
            return []

    errors: list[str] = []
    flaky = cast(WorkCenter, object.__new__(Flaky))
    loop = CoordinatorLoop(flaky, scripted_coordinator(), poll_seconds=0.01, on_error=errors.append)
    loop.run(serving=lambda: Flaky.passes < 3)
    assert Flaky.passes == 3
    assert errors == ["OSError: disk I/O error at [path redacted]"]


def test_the_cli_serves_with_the_coordinator_and_exits_143_on_sigterm(db_path: Path) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-c", "from workcenter.adapters.cli import main; main()"]
    command += ["serve", "--db", str(db_path), "--create"]
    command += ["--port", str(port), "--coordinate", "--provider", "scripted"]
    env = os.environ | {"PYTHONPATH": str(Path(__file__).parent.parent)}
    server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        wait_until(lambda: answering(base) or server.poll() is not None, "the CLI's server")
        assert server.poll() is None, server.stderr.read() if server.stderr else ""
        item_id = create(base)
        wait_until(lambda: assistant_replies(base, item_id, "completed"), "the answer")
        server.send_signal(signal.SIGTERM)
        out, err = server.communicate(timeout=WAIT)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    assert server.returncode == 143, err
    assert b"with the Coordinator" in out and b"coordinator: decided" in out


def test_a_provider_without_coordinate_is_a_usage_error(db_path: Path) -> None:
    result = CliRunner().invoke(cli, ["serve", "--db", str(db_path), "--provider", "scripted"])
    assert result.exit_code == 2 and "--provider needs --coordinate" in result.output


def _dynamic_kwargs() -> dict[str, Any]:
    return {
        "title": DYNAMIC["title"],
        "goal": DYNAMIC["goal"],
        "acceptance_criteria": DYNAMIC["acceptanceCriteria"],
        "delivery_target": DYNAMIC["deliveryTarget"],
        "start": True,
    }
