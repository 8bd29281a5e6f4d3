"""The reference JavaScript worker (examples/worker.mjs) against a live
``workcenter serve``: it runs a linear item to ``done`` through the worker protocol,
a claim whose answer is lost is sent again and answers the same Run (ADR-0114), and,
killed mid-Run, its Run is recovered once the lease lapses and its late finish is
refused with nothing written (ADR-0065)."""

from __future__ import annotations

import json
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping
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


# What a faulty network does to a request (``faulty``): "down" closes the connection
# unanswered and forwards nothing (a server away); "page" answers a proxy's 502 page and
# forwards nothing; "lost" forwards it and closes unanswered; "cut" forwards it and
# sends half its answer; "hang" forwards nothing and answers nothing (a server stopped).
Fault = Callable[[str], str | None]
PROXY_PAGE = b"<html><body><h1>502 Bad Gateway</h1></body></html>"


@contextmanager
def faulty(upstream: str, fault: Fault) -> Iterator[str]:
    """A proxy to ``upstream`` that does to each request what ``fault(verb)`` names, or
    forwards it (None); the verb is the path's last part (``claim``, ``finish``...)."""

    released = threading.Event()

    class Forward(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", 0)))
            what = fault(self.path.rsplit("/", 1)[-1])
            if what == "hang":
                released.wait(60)
                return self._close()
            if what == "down":
                return self._close()
            if what == "page":
                return self._answer(502, "text/html", PROXY_PAGE)
            headers = {"content-type": self.headers.get("content-type", "application/json")}
            answer = httpx.post(upstream + self.path, content=body, headers=headers, timeout=60)
            if what == "lost":
                return self._close()
            content_type = answer.headers.get("content-type", "application/json")
            if what == "cut":
                self._answer(answer.status_code, content_type, answer.content, cut=True)
                return self._close()
            self._answer(answer.status_code, content_type, answer.content)

        def _answer(self, status: int, content_type: str, body: bytes, cut: bool = False) -> None:
            self.send_response(status)
            self.send_header("content-type", content_type)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body[: len(body) // 2] if cut else body)
            self.wfile.flush()

        def _close(self) -> None:
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)

        def log_message(self, *args: Any) -> None:
            pass

    proxy = ThreadingHTTPServer(("127.0.0.1", 0), Forward)
    thread = threading.Thread(target=proxy.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{proxy.server_address[1]}"
    finally:
        released.set()
        proxy.shutdown()
        proxy.server_close()


def first_of(faults: Mapping[str, str]) -> Fault:
    """Each verb's first request meets its fault; the rest go through."""
    met: set[str] = set()

    def fault(verb: str) -> str | None:
        if verb in faults and verb not in met:
            met.add(verb)
            return faults[verb]
        return None

    return fault


def run_to_done(server: str, proxy: str, *args: str) -> list[dict[str, Any]]:
    """The worker's JSON lines, once it ran an item to done through ``proxy`` and left."""
    item = httpx.post(server + "/api/work-items", json=LINEAR).json()
    worker = node(proxy, "--exit-when-idle", "--wait", "1", *args)
    out, err = worker.communicate(timeout=120)
    assert worker.returncode == 0, err
    detail = httpx.get(f"{server}/api/work-items/{item['id']}").json()
    assert detail["status"] == "done"
    return [json.loads(line) | {"item": item["id"]} for line in out.splitlines()]


def test_a_claim_whose_answer_is_lost_is_sent_again_and_answers_the_same_run(
    server: str, db_path: Path
) -> None:
    """Before ADR-0114 the retry got a second Run, and the first held its Action until
    its lease lapsed: the item waited, and that Run spent one of its Action's attempts."""
    with faulty(server, first_of({"claim": "lost"})) as proxy:
        events = run_to_done(server, proxy, "--lease", "30")
    claimed = [e for e in events if e["event"] == "claimed"]
    assert [e["replayed"] for e in claimed] == [True, False, False]
    assert [e["outcome"] for e in events if e["event"] == "finished"] == ["completed"] * 3
    with WorkCenter.open(db_path, create=False) as wc:
        claims = wc.audit(UUID(events[0]["item"]), type="RunClaimed")
        assert len(claims) == 3, "the retried claim made a second Run"


def ran_cleanly(db_path: Path, events: list[dict[str, Any]]) -> None:
    """Three Runs, each finished completed once, none given up, every request settled."""
    assert [e["outcome"] for e in events if e["event"] == "finished"] == ["completed"] * 3
    assert not [e for e in events if e["event"] in ("error", "lost", "unsettled")], events
    assert events[-1] == events[-1] | {
        "event": "stopped",
        "runs": 3,
        "finished": 3,
        "unfinished": 0,
    }
    with WorkCenter.open(db_path, create=False) as wc:
        item_id = UUID(events[0]["item"])
        assert len(wc.audit(item_id, type="RunClaimed")) == 3
        assert not wc.audit(item_id, type="RunInterrupted")
        ledger = wc.ledger(item_id)
        assert [r.status for r in ledger.reservations.values()] == ["reported"] * 3


def test_answers_cut_short_or_replaced_by_a_proxys_page_are_sent_again(
    server: str, db_path: Path
) -> None:
    """Before ADR-0140 an answer that was not JSON was not retried: a proxy's 502 page on
    a finish threw the report away and interrupted the Run, a claim's answer cut short
    ended the worker with the Run held for its lease, a renewal's cut short gave up a
    Run whose lease had been extended (found by acceptance testing)."""
    faults = {
        "claim": "cut",
        "renew": "cut",
        "reserve": "page",
        "settle": "lost",
        "finish": "page",
        "input": "down",
    }
    with faulty(server, first_of(faults)) as proxy:
        events = run_to_done(server, proxy, "--lease", "3", "--work-ms", "1500")
    ran_cleanly(db_path, events)
    assert any(e["event"] == "renewed" for e in events)


def test_a_server_away_for_seconds_is_waited_for_with_the_run_in_hand(
    server: str, db_path: Path
) -> None:
    """The server restarted as the first finish was sent: before ADR-0140 the worker
    tried for about 2 s, threw the report away and, idle, exited 1."""
    away_until: list[float] = []

    def restart(verb: str) -> str | None:
        if verb == "finish" and not away_until:
            away_until.append(time.monotonic() + 4)
        return "down" if away_until and time.monotonic() < away_until[0] else None

    with faulty(server, restart) as proxy:
        events = run_to_done(server, proxy, "--lease", "30")
    ran_cleanly(db_path, events)
    said = [e["event"] for e in events if e["event"] in ("unreachable", "reachable")]
    assert said == ["unreachable", "reachable"]


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


def test_a_stop_while_the_server_hangs_ends_within_its_deadline(server: str) -> None:
    """SIGTERM with a Run in hand and a server that answers nothing: the interrupt was
    tried for the 30 s of its first try, past the stop's 5 s (found by acceptance
    testing, ADR-0140), and no last line counted the Runs."""
    httpx.post(server + "/api/work-items", json=LINEAR)
    hanging = threading.Event()
    with faulty(server, lambda verb: "hang" if hanging.is_set() else None) as proxy:
        worker = node(proxy, "--lease", "30", "--work-ms", "60000")
        assert worker.stdout is not None
        lines_until(worker.stdout, "claimed", 30)
        hanging.set()
        started = time.monotonic()
        worker.send_signal(signal.SIGTERM)
        out, _ = worker.communicate(timeout=30)
        took = time.monotonic() - started
    assert worker.returncode == 143 and took < 10, took
    last = json.loads(out.splitlines()[-1])
    assert (last["event"], last["unfinished"], last["signal"]) == ("stopped", 1, "SIGTERM")


@pytest.mark.parametrize("url", ["http://admin:Sup3rSecretPW@127.0.0.1:9", "ftp://127.0.0.1", "x"])
def test_a_url_fetch_cannot_send_is_refused_at_once_and_its_password_unsaid(url: str) -> None:
    """A URL with credentials was retried for ever as a failure on the way, its password
    in every line (found by acceptance testing, ADR-0140)."""
    worker = node(url)
    out, _ = worker.communicate(timeout=30)
    assert worker.returncode == 1
    [line] = [json.loads(text) for text in out.splitlines()]
    assert line["event"] == "failed" and "Sup3rSecretPW" not in out


def test_a_long_run_renewed_often_leaves_no_listeners_behind(server: str) -> None:
    """Each renewal's wait left a listener on the Run's stop signal: past ten, Node
    warned of a leak on stderr (found in review, ADR-0140)."""
    httpx.post(server + "/api/work-items", json=LINEAR | {"stages": ["implement"]})
    worker = node(server, "--exit-when-idle", "--wait", "1", "--lease", "1", "--work-ms", "5000")
    out, err = worker.communicate(timeout=60)
    assert worker.returncode == 0, err
    renewals = [line for line in out.splitlines() if '"renewed"' in line]
    assert len(renewals) > 11 and "MaxListenersExceededWarning" not in err, err
