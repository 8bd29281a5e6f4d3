"""Each outage of the database is said once by each process, and its end once (ADR-0137,
ADR-0138): a second outage soon after the first (a failover 18 s after a restart) was
not said at all, within the 30 s during which a loss counted as the last outage's (found
by acceptance testing)."""

from __future__ import annotations

import contextlib
import logging
import time

import postgres
import pytest
from conftest import create_linear

from workcenter.adapters import postgres_connection
from workcenter.adapters.postgres_connection import StoreDisconnected
from workcenter.application import WorkCenter

LOST = "lost the connection to the database"
BACK = "the database answers again"


def end_the_sessions(schema: str) -> None:
    """End every session of this test's store (its own, found by their search path)."""
    with postgres.connect() as conn:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE pid <> pg_backend_pid() AND datname = current_database()"
            " AND application_name = %s",
            (f"outage-{schema}",),
        )


def test_a_second_outage_soon_after_the_first_is_said(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(postgres_connection, "AFTER_BACK", 0.2)
    with postgres.fresh_schema("wcoutage") as url:
        schema = url.rsplit("schema=", 1)[1]
        monkeypatch.setenv("PGAPPNAME", f"outage-{schema}")
        with (
            WorkCenter.open(url) as wc,
            caplog.at_level(logging.WARNING, logger="workcenter.store"),
        ):
            for _ in range(2):
                create_linear(wc)
                end_the_sessions(schema)
                for _ in range(3):  # the pool's connections, one after another
                    with contextlib.suppress(StoreDisconnected):
                        wc.list_work_items()
                create_linear(wc)  # through: the database answers
                time.sleep(0.3)
    said = [r.getMessage() for r in caplog.records if r.name == "workcenter.store"]
    assert [LOST in line for line in said if LOST in line or BACK in line] == [
        True,
        False,
        True,
        False,
    ], said
