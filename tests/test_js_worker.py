"""The reference JavaScript worker (examples/worker.mjs) against a live
``workcenter serve``: it runs a linear item to ``done`` through the worker protocol,
a claim whose answer is lost is sent again and answers the same Run (ADR-0114), and,
killed mid-Run, its Run is recovered once the lease lapses and its late finish is
refused with nothing written (ADR-0065)."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import IO, Any
from uuid import UUID

import httpx
import pytest
from http_client import LINEAR
from live_server import environment, serving

from workcenter.application import WorkCenter

ROOT = Path(__file__).resolve().parents[1]
WORKER = ROOT / "examples" / "worker.mjs"
NODE = shutil.which("node")
pytestmark = pytest.mark.skipif(NODE is None, reason="Node 20 is not installed")


@pytest.fixture
def server(db_path: Path) -> Iterator[str]:
    with serving(db_path, environment()) as url:
        yield url


def node(url: str, *args: str) -> subprocess.Popen[str]:
    assert NODE is not None
    return subprocess.Popen(
        [NODE, str(WORKER), "--url", url, "--name", "js", *args],
        env=environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def lines_until(stream: IO[str], event: str, timeout: float) -> dict[str, Any]:
    """The worker's JSON lines, read until the first ``event`` (its line returned)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = stream.readline()
        if not line:
            break
        record: dict[str, Any] = json.loads(line)
        if record["event"] == event:
            return record
    raise AssertionError(f"the worker never said {event!r}")


def test_the_javascript_worker_runs_an_item_to_done(server: str, db_path: Path) -> None:
    item = httpx.post(server + "/api/work-items", json=LINEAR).json()
    worker = node(server, "--exit-when-idle", "--wait", "1", "--lease", "5")
    out, err = worker.communicate(timeout=120)
    assert worker.returncode == 0, err
    events = [json.loads(line) for line in out.splitlines()]
    finished = [e for e in events if e["event"] == "finished"]
    assert [e["outcome"] for e in finished] == ["completed"] * 3
    detail = httpx.get(f"{server}/api/work-items/{item['id']}").json()
    assert detail["status"] == "done"
    with WorkCenter.open(db_path, create=False) as wc:
        ledger = wc.ledger(UUID(item["id"]))
        assert ledger.request_count == 3
        assert all(r.status == "reported" for r in ledger.reservations.values())
        claims = wc.audit(UUID(item["id"]), type="RunClaimed")
        assert {r.actor_id for r in claims} == {f"js@{events[0]['bootId']}"}


@contextmanager
def losing_first_claim(upstream: str) -> Iterator[str]:
    """A proxy to ``upstream`` that drops the connection of the first claim the server
    answered with a Run, as a timeout or a broken proxy would: the Run is claimed, and
    the worker never hears of it."""
    dropped = threading.Event()

    class Forward(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", 0)))
            headers = {"content-type": self.headers.get("content-type", "application/json")}
            answer = httpx.post(upstream + self.path, content=body, headers=headers, timeout=60)
            if self.path.endswith("/claim") and answer.status_code == 200 and not dropped.is_set():
                dropped.set()
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            self.send_response(answer.status_code)
            for name in ("content-type", "content-length"):
                if name in answer.headers:
                    self.send_header(name, answer.headers[name])
            self.end_headers()
            self.wfile.write(answer.content)

        def log_message(self, *args: Any) -> None:
            pass

    proxy = ThreadingHTTPServer(("127.0.0.1", 0), Forward)
    thread = threading.Thread(target=proxy.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{proxy.server_address[1]}"
        assert dropped.is_set(), "no claim answer was dropped"
    finally:
        proxy.shutdown()
        proxy.server_close()


def test_a_claim_whose_answer_is_lost_is_sent_again_and_answers_the_same_run(
    server: str, db_path: Path
) -> None:
    """Before ADR-0114 the retry got a second Run, and the first held its Action until
    its lease lapsed: the item waited, and that Run spent one of its Action's attempts."""
    item = httpx.post(server + "/api/work-items", json=LINEAR).json()
    with losing_first_claim(server) as proxy:
        worker = node(proxy, "--exit-when-idle", "--wait", "1", "--lease", "30")
        out, err = worker.communicate(timeout=120)
    assert worker.returncode == 0, err
    events = [json.loads(line) for line in out.splitlines()]
    claimed = [e for e in events if e["event"] == "claimed"]
    assert [e["replayed"] for e in claimed] == [True, False, False]
    assert [e["outcome"] for e in events if e["event"] == "finished"] == ["completed"] * 3
    with WorkCenter.open(db_path, create=False) as wc:
        claims = wc.audit(UUID(item["id"]), type="RunClaimed")
        assert len(claims) == 3, "the retried claim made a second Run"
    detail = httpx.get(f"{server}/api/work-items/{item['id']}").json()
    assert detail["status"] == "done"


def test_the_javascript_worker_decides_the_reviews_it_runs(server: str) -> None:
    """A linear item's default stages include a review, and a completed review must
    decide: the reference worker approved none, so every review it ran failed and its
    item needed attention (found by acceptance testing, ADR-0107)."""
    item = httpx.post(server + "/api/work-items", json=LINEAR | {"stages": None}).json()
    worker = node(server, "--exit-when-idle", "--wait", "1", "--lease", "5")
    out, err = worker.communicate(timeout=120)
    assert worker.returncode == 0, err
    finished = [json.loads(line) for line in out.splitlines()]
    outcomes = [e["outcome"] for e in finished if e["event"] == "finished"]
    assert outcomes == ["completed"] * 4
    detail = httpx.get(f"{server}/api/work-items/{item['id']}").json()
    assert detail["status"] == "done"


def test_a_killed_javascript_worker_is_fenced_off_and_its_run_recovered(
    server: str, db_path: Path
) -> None:
    item = httpx.post(server + "/api/work-items", json=LINEAR).json()
    worker = node(server, "--lease", "2", "--work-ms", "60000")
    assert worker.stdout is not None
    claimed = lines_until(worker.stdout, "claimed", 30)
    assert claimed["workItemId"] == item["id"]
    lines_until(worker.stdout, "renewed", 10)  # it renews while it works
    worker.kill()  # no goodbye: the lease is all that ends its Run
    worker.wait()
    fence = claimed["fence"]
    time.sleep(2.5)  # the lease lapses
    # The next idle claim recovers the Run and claims its Action again.
    again = httpx.post(
        server + "/api/worker/claim",
        json={"worker": "py", "bootId": "py-1", "waitSeconds": 5},
        timeout=30,
    )
    assert again.status_code == 200, again.text
    assert again.json()["fence"]["actionId"] == fence["actionId"]
    assert again.json()["fence"]["leaseEpoch"] == fence["leaseEpoch"] + 1
    with WorkCenter.open(db_path, create=False) as wc:
        run = wc.action(UUID(fence["actionId"])).run(UUID(fence["runId"]))
        assert run is not None and run.status == "interrupted"
        assert run.end_reason is not None and "lease" in run.end_reason
        before = wc.event_count()
        report = {
            "outcome": "completed",
            "evidence": ["late"],
            "acceptanceChecks": [
                {"criterion": c, "status": "passed"} for c in LINEAR["acceptanceCriteria"]
            ],
        }
        late = httpx.post(server + "/api/worker/finish", json={"fence": fence, "report": report})
        assert late.status_code == 409 and late.json()["title"] == "StaleRun"
        assert wc.event_count() == before, "the late finish wrote events"
        live = wc.action(UUID(fence["actionId"]))
        assert live.status == "running" and isinstance(live.current_run_id, UUID)
