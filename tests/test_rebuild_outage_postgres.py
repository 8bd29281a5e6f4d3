"""A rebuild cut short by an outage is the store's typed error, says which schema it left
behind and how to remove it, and leaves the live view as it was (found by acceptance
testing: the shadow schema stayed, nothing said so, and the library's own error escaped),
and the next rebuild removes it."""

from __future__ import annotations

import time

import psycopg
import pytest
from conftest import create_dynamic
from private_postgres import PrivateServer, private_server

from workcenter.adapters.postgres_connection import StoreDisconnected
from workcenter.application import WorkCenter


def shadows(server: PrivateServer) -> list[str]:
    with psycopg.connect(server.url.split("?")[0]) as conn:
        rows = conn.execute(
            "SELECT nspname FROM pg_namespace WHERE nspname LIKE 'wcrestart\\_rebuild\\_%'"
        ).fetchall()
    return [name for (name,) in rows]


def test_a_rebuild_cut_short_names_the_schema_it_leaves(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POSTGRES_CONNECT_TIMEOUT", "1")  # the server is down: fail in seconds
    with private_server() as server, WorkCenter.open(server.url) as wc:
        create_dynamic(wc)
        live = wc.projections.views["work_queue"].dump()

        def stop_the_server(view: str, done: int, total: int) -> None:
            server.stop()

        with pytest.raises(StoreDisconnected) as refusal:
            wc.maintenance.rebuild_projection("work_queue", progress=stop_the_server)
        server.start()
        [left] = shadows(server)
        message = str(refusal.value)
        assert f'DROP SCHEMA "{left}" CASCADE' in message, message
        assert "the next rebuild removes it" in message, message
        assert views_once_back(wc) == live
        # Its lock went with its session: the next rebuild drops it (ADR-0092).
        [report] = wc.maintenance.rebuild_projection("work_queue")
        assert report.removed_schemas == (left,)
        assert shadows(server) == []
        assert wc.projections.views["work_queue"].dump() == live


def views_once_back(wc: WorkCenter) -> object:
    """The live view's rows, read again while the pool finds the restarted server."""
    for _ in range(50):
        try:
            return wc.projections.views["work_queue"].dump()
        except StoreDisconnected:
            time.sleep(0.1)
    return wc.projections.views["work_queue"].dump()
