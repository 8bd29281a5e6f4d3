"""`worker` and `projections run` started while their database server is down wait for
it, as they wait out an outage while running, and then work (found by acceptance
testing: they exited at once, status 2, so a rolling restart during a failover lost its
workers; ADR-0136). A server's refusal (no such database) still fails at once, and a
stop signal while waiting ends the process as a stop."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
from conftest import create_linear
from private_postgres import free_port, private_server

from workcenter.application import WorkCenter

WORKCENTER = [sys.executable, "-c", "from workcenter.adapters.cli import main; main()"]
WAITING = "waiting for the database (Ctrl-C stops)"


def started(*args: str) -> subprocess.Popen[str]:
    env = os.environ | {"PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [*WORKCENTER, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )


def first_line_of_stderr(process: subprocess.Popen[str]) -> str:
    assert process.stderr is not None
    return process.stderr.readline()


def waits_then_works(db: str, unblock: Callable[[], None]) -> None:
    """A worker started while its store cannot be opened says once that it waits, waits,
    and once ``unblock`` has run does the work (one Run) and exits."""
    worker = started(
        "worker", "--db", db, "--executor", "workcenter.adapters.executors:echo",
        "--exit-when-idle", "--poll", "0.1",
    )  # fmt: skip
    try:
        assert WAITING in first_line_of_stderr(worker)
        time.sleep(1.0)  # it tries again meanwhile, and waits on
        assert worker.poll() is None
        unblock()
        out, err = worker.communicate(timeout=60)
    finally:
        if worker.poll() is None:
            worker.kill()
    assert worker.returncode == 0, err
    assert "finished 1" in out, out


def test_a_worker_started_during_an_outage_waits_then_runs_the_work(tmp_path: Path) -> None:
    with private_server() as server:
        with WorkCenter.open(server.url) as wc:
            item = create_linear(wc, stages=("implement",))
        server.stop()
        waits_then_works(server.url, server.start)
        with WorkCenter.open(server.url) as wc:
            assert wc.work_item(item.id).status == "done"


def test_a_runner_waiting_for_the_database_stops_on_sigterm() -> None:
    url = f"postgresql://postgres@127.0.0.1:{free_port()}/postgres?schema=nobody"
    runner = started("projections", "run", "--db", url)
    try:
        assert WAITING in first_line_of_stderr(runner)
        runner.send_signal(signal.SIGTERM)
        _, err = runner.communicate(timeout=30)
    finally:
        if runner.poll() is None:
            runner.kill()
    assert runner.returncode == 128 + signal.SIGTERM
    assert "interrupted by SIGTERM: stopped while waiting for the database; nothing was done" in err
    assert "Traceback" not in err


def test_serve_started_during_an_outage_waits_then_serves() -> None:
    """`serve` exited 75 at once, to be restarted in a loop during a failover (found by
    acceptance testing, ADR-0142)."""
    with private_server() as server:
        with WorkCenter.open(server.url) as wc:
            create_linear(wc)
        server.stop()
        port = free_port()
        serving = started("serve", "--db", server.url, "--port", str(port))
        try:
            assert WAITING in first_line_of_stderr(serving)
            time.sleep(1.0)
            assert serving.poll() is None
            server.start()
            deadline = time.monotonic() + 60
            answer = None
            while answer is None and time.monotonic() < deadline:
                try:
                    answer = httpx.get(f"http://127.0.0.1:{port}/api/health", timeout=5)
                except httpx.TransportError:
                    time.sleep(0.2)
            assert answer is not None and answer.status_code == 200, answer
            serving.send_signal(signal.SIGTERM)
            _, err = serving.communicate(timeout=30)
        finally:
            if serving.poll() is None:
                serving.kill()
        assert serving.returncode in (0, 143, -signal.SIGTERM), err  # uvicorn re-raises it
        assert "Traceback" not in err


def test_a_servers_refusal_fails_at_once(tmp_path: Path) -> None:
    """No such database: the server answered, and will answer the same."""
    with private_server() as server:
        url = server.url.replace("/postgres?", "/no_such_database?")
        worker = started("worker", "--db", url, "--executor", "workcenter.adapters.executors:echo")
        _, err = worker.communicate(timeout=60)
    assert worker.returncode == 2
    assert err.startswith("StoreUnavailable: cannot open the store at"), err
    assert 'database "no_such_database" does not exist' in err
    assert WAITING not in err
