"""The projections runner survives its database (found by acceptance testing: a server
restart ended ``projections run`` with a traceback, and the views then fell behind while
the workers went on). A private PostgreSQL is restarted, and then stopped for a while,
under a running runner: it waits the database out, catches the views up and follows on;
the views equal a rebuild."""

from __future__ import annotations

import time

from conftest import create_dynamic
from private_postgres import private_server
from test_restart import views_equal_a_rebuild

from workcenter.application import WorkCenter
from workcenter.domain.errors import WorkcenterError
from workcenter.projections.runner import ProjectionRunner


def test_the_runner_waits_out_a_restart_and_an_outage_then_catches_up() -> None:
    with (
        private_server() as server,
        WorkCenter.open(server.url, boot_id="writer", inline_projections=False) as wc,
    ):
        create_dynamic(wc)
        runner = ProjectionRunner(wc, poll=0.05).start()
        try:
            runner.wait(wc.store.recorder.max_notification_id(), timeout=30)
            server.restart()
            create_made(wc)
            runner.wait(wc.store.recorder.max_notification_id(), timeout=60)
            server.stop()
            time.sleep(1.0)  # the runner tries again meanwhile, and fails
            server.start()
            create_made(wc)
            runner.wait(wc.store.recorder.max_notification_id(), timeout=60)
            assert runner.running and runner.error is None
        finally:
            runner.stop()
        views_equal_a_rebuild(wc)


def create_made(wc: WorkCenter) -> None:
    """A create, tried again while the server is not back yet."""
    deadline = time.monotonic() + 60
    while True:
        try:
            create_dynamic(wc)
            return
        except WorkcenterError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
