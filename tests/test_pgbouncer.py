"""Workcenter through PgBouncer in session mode, as deployment.md says to put a pooler
between the processes and the server (ADR-0115).

A PgBouncer of the test's own, on a free port, in front of the test server. Before
ADR-0115 no connection got through: every one asked for its schema by the ``options``
startup parameter, which PgBouncer refuses, and a store failed to open after its pool's
30 s. Here a store opens through it, claims hold their candidates (session advisory
locks), a worker drains the queue, the chain verifies, and a claim frozen past its hold
timeout loses its holds (ADR-0111) through the pooler too. Without PgBouncer installed
the tests skip with that reason, except in CI, where they fail: CI installs it
(``.ci/run``).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import postgres
import pytest
from click.testing import CliRunner
from conftest import create_linear
from private_postgres import OS_USER, free_port

from workcenter.adapters.cli import cli
from workcenter.adapters.executors import echo
from workcenter.adapters.http import problems
from workcenter.adapters.persistence import StoreUnavailable
from workcenter.adapters.postgres_connection import Outage, PoolBusy, StoreDisconnected, busy
from workcenter.adapters.worker import run_worker
from workcenter.application import WorkCenter
from workcenter.projections.runner import ProjectionRunner

CLI = [sys.executable, "-c", "from workcenter.adapters.cli import main; main()"]
PGBOUNCER = Path(os.environ.get("WORKCENTER_PGBOUNCER", "/usr/sbin/pgbouncer"))


@pytest.fixture
def backend() -> str:
    return "postgresql"


def require_pgbouncer() -> None:
    if PGBOUNCER.exists():
        return
    reason = f"no PgBouncer at {PGBOUNCER} (apt-get install pgbouncer)"
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture
def bouncer() -> Iterator[int]:
    """A PgBouncer in session mode in front of the test server: its port."""
    with running_bouncer("session") as port:
        yield port


@contextmanager
def running_bouncer(mode: str) -> Iterator[int]:
    """A PgBouncer pooling by ``mode`` in front of the test server: its port."""
    bouncer = Bouncer(mode)
    try:
        bouncer.start()
        yield bouncer.port
    finally:
        bouncer.stop()
        shutil.rmtree(bouncer.directory, ignore_errors=True)


class Bouncer:
    """A PgBouncer of the test's own on a free port, started and stopped at will (the
    port kept), in front of the test server."""

    def __init__(self, mode: str) -> None:
        require_pgbouncer()
        postgres.require_server()
        self.directory = Path(tempfile.mkdtemp(prefix="wc-pgbouncer-"))
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        (self.directory / "users.txt").write_text(f'"{postgres.USER}" ""\n')
        (self.directory / "pgbouncer.ini").write_text(
            "[databases]\n"
            f"{postgres.DBNAME} = host={postgres.HOST} port={postgres.PORT}"
            f" dbname={postgres.DBNAME} user={postgres.USER}\n"
            "[pgbouncer]\n"
            f"listen_addr = 127.0.0.1\nlisten_port = {self.port}\nunix_socket_dir =\n"
            f"auth_type = trust\nauth_file = {self.directory}/users.txt\n"
            f"pool_mode = {mode}\nmax_client_conn = 200\ndefault_pool_size = 50\n"
            f"logfile = {self.directory}/pgbouncer.log\n"
        )

    def start(self) -> None:
        as_user: list[str] = []
        if os.geteuid() == 0:  # PgBouncer refuses to run as root
            for path in (self.directory, *self.directory.iterdir()):
                shutil.chown(path, user=OS_USER)
            as_user = ["runuser", "-u", OS_USER, "--"]
        listening = _log(self.directory).count("listening on")
        ini = str(self.directory / "pgbouncer.ini")
        self.process = subprocess.Popen([*as_user, str(PGBOUNCER), ini])
        deadline = time.monotonic() + 10
        while _log(self.directory).count("listening on") == listening:
            assert self.process.poll() is None, f"PgBouncer ended: {_log(self.directory)}"
            assert time.monotonic() < deadline, f"no listening: {_log(self.directory)}"
            time.sleep(0.05)

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(10)
            self.process = None


@contextmanager
def bounced_store(prefix: str) -> Iterator[tuple[Bouncer, str]]:
    """A fresh store's schema and a session-mode PgBouncer of the test's own in front of
    the server, started (stopped and started again at will): the bouncer and the store's
    URL through it."""
    bouncer = Bouncer("session")
    with postgres.fresh_schema(prefix) as direct:
        try:
            bouncer.start()
            yield bouncer, direct.replace(f":{postgres.PORT}/", f":{bouncer.port}/", 1)
        finally:
            bouncer.stop()
            shutil.rmtree(bouncer.directory, ignore_errors=True)


def _log(directory: Path) -> str:
    try:
        return (directory / "pgbouncer.log").read_text()
    except FileNotFoundError:
        return ""


@pytest.fixture
def through(bouncer: int) -> Iterator[str]:
    """A fresh store's URL through the bouncer."""
    with postgres.fresh_schema("wcpgb") as url:
        yield url.replace(f":{postgres.PORT}/", f":{bouncer}/", 1)


def test_a_store_works_through_pgbouncer_in_session_mode(through: str) -> None:
    with WorkCenter.open(through) as wc, WorkCenter.open(through, create=False) as other:
        items = [create_linear(wc, stages=("implement",), title=f"Item {n}") for n in range(6)]
        actions = [item.current_action_id for item in items]
        # A claim in flight holds the oldest Action: another claim passes it over.
        with other._runs.claim_candidates(16) as candidates:
            assert candidates is not None
            assert next(candidates).action_id == actions[0]
            claim = wc.claim_next("w1")
            assert claim is not None and claim.action_id == actions[1]
        wc.finish_run(claim, echo(claim))
        stats = run_worker(other, echo, worker="w2", exit_when_idle=True, poll_seconds=0.1)
        assert stats.finished == 5 and stats.errors == 0
        assert wc.claim_next("w1") is None
        assert wc.maintenance.verify_history().ok


def test_a_frozen_claim_loses_its_holds_through_pgbouncer(
    through: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WORKCENTER_POSTGRES_CLAIM_HOLD_TIMEOUT", "1")
    with WorkCenter.open(through) as wc, WorkCenter.open(through, create=False) as other:
        first = create_linear(wc, stages=("implement",)).current_action_id
        with (
            pytest.raises(StoreDisconnected),
            other._runs.claim_candidates(16) as candidates,
        ):
            assert candidates is not None
            assert next(candidates).action_id == first
            time.sleep(2.5)
            claim = wc.claim_next("w1")
            assert claim is not None and claim.action_id == first


class Pool:
    """What ``busy`` reads of a pool that gave up: its size and timeout, and the arguments
    it connects with."""

    def __init__(self, port: int) -> None:
        self.max_size, self.timeout = 4, 30.0
        self.kwargs = {"host": "127.0.0.1", "port": port, "user": "postgres", "dbname": "test"}


def test_a_pool_that_could_make_no_connection_says_why() -> None:
    """Every connection refused (before ADR-0115, PgBouncer refused each one's startup
    parameter; or the server is away): the failure names the refusal, not a pool whose
    connections were all in use, whatever the pool counts as its own (it counts those
    it is still trying to make, ADR-0121)."""
    closed = free_port()
    failure = busy(Pool(closed))
    said = str(failure)
    assert "no connection to the database could be made within 30 s" in said
    assert str(closed) in said  # the driver's words name the address it tried
    assert "were all in use" not in said
    assert isinstance(failure, StoreDisconnected) and not isinstance(failure, PoolBusy)
    # A pool of a server that answers, its connections all in use: busy, as before.
    postgres.require_server()
    assert "every one was in use" in str(busy(Pool(int(postgres.PORT))))


def test_a_lost_connection_is_an_outage_only_if_none_can_be_made() -> None:
    """A lost connection makes the process try one (ADR-0121): refused (nothing
    listens), commands fail at once until one is made; made, it is no outage (one
    session ended alone, as a claim's frozen past its timeout is), and commands go on."""
    away = Outage(Pool(free_port()))
    away.lost()
    with pytest.raises(StoreDisconnected, match="the database cannot be reached"):
        away.check()
    postgres.require_server()
    answering = Outage(Pool(int(postgres.PORT)))
    answering.lost()
    answering.check()  # no outage: this raised nothing


def test_a_remote_client_is_not_told_the_databases_address() -> None:
    """The driver's words (host and port) are the operator's: a 503 over HTTP says only
    what failed (found by acceptance testing: a worker token's holder read them)."""
    port = free_port()
    away = Outage(Pool(port))
    away.lost()
    with pytest.raises(StoreDisconnected) as failure:
        away.check()
    for error, said in (
        (failure.value, "the database cannot be reached"),
        (busy(Pool(port)), "no connection to the database could be made within 30 s"),
    ):
        assert str(port) in str(error)  # the log's and the command line's words
        answer = problems.from_error(error)
        body = json.loads(bytes(answer.body))
        assert (answer.status_code, body["detail"]) == (503, said)


def test_commands_fail_at_once_while_the_server_is_away_and_go_on_when_it_is_back() -> None:
    """The server (here the PgBouncer in front of it) gone: every command fails with
    ``StoreDisconnected`` in seconds, in the words of the refusal, not after the pool's
    30 s at each of the recorders' ten tries (five minutes, which held a stopped worker
    and an HTTP read that long; ADR-0121); back, the next command works without waiting
    out the pool's tries to reconnect."""
    with bounced_store("wcpgbo") as (bouncer, through), WorkCenter.open(through) as wc:
        create_linear(wc, stages=("implement",))
        events = wc.event_count()
        bouncer.stop()
        for _ in range(3):
            started = time.monotonic()
            with pytest.raises(StoreDisconnected) as failure:
                create_linear(wc, stages=("implement",))
            assert time.monotonic() - started < 10
            assert "in use" not in str(failure.value)
        bouncer.start()
        deadline = time.monotonic() + 10
        while True:
            try:
                item = create_linear(wc, stages=("implement",), title="After")
                break
            except StoreDisconnected:
                assert time.monotonic() < deadline, "not back within 10 s"
                time.sleep(0.2)
        assert wc.detail(item.id)["title"] == "After"
        assert wc.event_count() > events
        assert wc.maintenance.verify_history().ok


def test_a_runner_follows_new_events_through_pgbouncer(through: str) -> None:
    """The runner is woken by the library's LISTEN/NOTIFY subscription through the
    pooler: with no polling to fall back on within the test's wait, the views reach each
    new head only if the notifications arrive. A stop ends it at once."""
    with WorkCenter.open(through, inline_projections=False) as wc:
        create_linear(wc, stages=("implement",))
        runner = ProjectionRunner(wc, poll=600).start()
        try:
            runner.wait(wc.store.recorder.max_notification_id(), timeout=30)  # the backlog
            for n in range(3):
                create_linear(wc, stages=("implement",), title=f"New {n}")
                runner.wait(wc.store.recorder.max_notification_id(), timeout=10)
            assert runner.running and runner.error is None
        finally:
            follower = runner._thread
            runner.stop()
        # Woken by the subscription's end, not at its next poll: before, the stop gave up
        # on it after 10 s and left it waiting out the 600.
        assert follower is not None and not follower.is_alive()


@pytest.mark.parametrize("mode", ["transaction", "statement"])
def test_a_pooler_that_shares_sessions_is_refused_by_name_and_nothing_is_made(
    mode: str,
) -> None:
    """Through a pooler by transaction or by statement a store's session locks and its
    schema, set once per connection, would be other clients' (ADR-0120). Before, by
    transaction the store failed to open after its retries in psycopg's words about a
    prepared statement ("_pg3_0 already exists"), and a pooler that carries prepared
    statements would have let it open. Now the open is refused at once, naming the
    pooling; no schema is made, and a store already there is left as it was."""
    with postgres.fresh_schema("wcpgbt") as direct, running_bouncer(mode) as port:
        through = direct.replace(f":{postgres.PORT}/", f":{port}/", 1)
        schema = direct.rpartition("schema=")[2]
        refused = "shares server sessions between clients.*pool_mode = session"
        started = time.monotonic()
        with pytest.raises(StoreUnavailable, match=refused):
            WorkCenter.open(through)
        assert time.monotonic() - started < 10  # not the pool's 30 s, nor retries
        assert not _schema_exists(schema)
        with WorkCenter.open(direct) as wc:
            create_linear(wc, stages=("implement",))
            events = wc.event_count()
        for create in (True, False):
            with pytest.raises(StoreUnavailable, match=refused):
                WorkCenter.open(through, create=create)
        result = CliRunner().invoke(cli, ["--db", through, "list"])
        assert result.exit_code == 2, result.output
        assert "pool_mode = session" in result.output and "Traceback" not in result.output
        with WorkCenter.open(direct, create=False) as wc:
            assert wc.event_count() == events


def _schema_exists(schema: str) -> bool:
    with postgres.connect() as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_namespace WHERE nspname = %s", (schema,)
        ).fetchone()
    return row is not None and row[0] == 1


def test_a_runner_stopped_while_the_server_is_away_says_its_summary() -> None:
    """`projections run` stopped by SIGTERM while the server is away: its reports say
    the status is unknown, and it ends with its summary and exit 143, the positions
    unknown (it exited 2 with a one-line error and no summary: found by acceptance
    testing)."""
    with bounced_store("wcpgbr") as (bouncer, through):
        with WorkCenter.open(through) as wc:
            create_linear(wc, stages=("implement",))
        runner = subprocess.Popen(
            [*CLI, "--db", through, "projections", "run", "--json", "--report", "0.2"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        # Following once it reports (a fixed wait let a loaded CI machine stop the server
        # before the runner had opened the store).
        assert runner.stdout is not None
        first = runner.stdout.readline()
        assert first, runner.communicate(timeout=60)
        bouncer.stop()
        time.sleep(1.5)  # a report or two while the server is away
        runner.send_signal(signal.SIGTERM)
        out, err = runner.communicate(timeout=60)
    assert runner.returncode == 143, (out, err)
    lines = [json.loads(line) for line in [first, *out.splitlines()]]
    assert lines[-1]["stopped"] == "SIGTERM" and lines[-1]["positions"] is None, lines[-1]
    assert any(line.get("unavailable") for line in lines[:-1]), lines
    assert "Traceback" not in err
