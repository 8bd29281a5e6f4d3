"""A NUL character in a title, accepted as text by the API, is kept by both databases:
PostgreSQL's text holds none, and its create failed with the database's own error (an
HTTP 500), and a SQLite store holding one could not be moved to PostgreSQL (the copy's
views failed, leaving a store no verb could open). On PostgreSQL the work queue keeps it
as U+FFFD; the events, and SQLite's rows, keep the title as given (ADR-0082)."""

from __future__ import annotations

from pathlib import Path

import postgres
import pytest
from conftest import BACKENDS, create_linear

from workcenter.adapters import store_copy
from workcenter.application import WorkCenter
from workcenter.projections.work_queue import WorkQueue


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    if request.param == "postgresql":
        postgres.require_server()
    return str(request.param)


def test_a_title_with_nul_is_kept_and_listed(wc: WorkCenter, backend: str) -> None:
    nul = "\ufffd" if backend == "postgresql" else "\x00"
    item = create_linear(wc, title="a\x00b")
    assert wc.work_item(item.id).title == "a\x00b"
    (listed,) = wc.list_work_items()
    assert listed["title"] == f"a{nul}b"
    renamed = wc.update_contract(item.id, expected_version=item.version, title="c\x00d")
    assert wc.list_work_items()[0]["title"] == f"c{nul}d" and renamed.title == "c\x00d"
    live = wc.list_work_items()
    wc.maintenance.rebuild_projection(WorkQueue.name)
    assert wc.list_work_items() == live


def test_a_sqlite_store_with_a_nul_title_moves_to_postgresql(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    postgres.require_server()
    monkeypatch.setenv(store_copy.NEW_KEY_ENV, "")  # a copy without encryption, asked for
    with WorkCenter.open(db_path) as wc:
        item = create_linear(wc, title="a\x00b")
    with postgres.fresh_schema() as url:
        copied = store_copy.rekey(str(db_path), url)
        assert copied.events > 0
        with WorkCenter.open(url, create=False) as moved:
            assert moved.work_item(item.id).title == "a\x00b"
            assert moved.list_work_items()[0]["title"] == "a\ufffdb"
