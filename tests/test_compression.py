"""Stored bytes are deflated (ADR-0020): events, snapshots and the detail view's rows;
a store written before compression still reads, and its old rows keep working."""

from __future__ import annotations

import sqlite3
import zlib
from pathlib import Path
from typing import Any

import orjson
import pytest
from conftest import FakeClock, claim, create_dynamic, plan, report
from eventsourcing.persistence import StoredEvent
from eventsourcing.utils import get_topic

from workcenter.adapters import sqlite_settings
from workcenter.adapters.compression import (
    PLAIN_LIMIT,
    SmallBlobZlibCompressor,
    deflate,
    inflate,
)
from workcenter.adapters.sqlite_settings import STATEMENT_CACHE
from workcenter.application import WorkCenter
from workcenter.domain import work_item as wi
from workcenter.repository import SNAPSHOT_INTERVAL


def _rows(db_path: Path, sql: str) -> list[tuple[bytes | str, ...]]:
    con = sqlite3.connect(db_path)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def test_event_state_is_deflated_without_the_row_s_own_columns(
    wc: WorkCenter, db_path: Path
) -> None:
    item = create_dynamic(wc)
    plain = 0
    for (state,) in _rows(db_path, "SELECT state FROM stored_events"):
        assert isinstance(state, bytes)
        if state[:1] == b"{":  # too short to be worth deflating (ADR-0038)
            plain += 1
            assert len(state) <= PLAIN_LIMIT
            body = orjson.loads(state)
        else:
            assert state[:1] == b"\x78"
            body = orjson.loads(zlib.decompress(state))
            assert len(zlib.decompress(state)) > PLAIN_LIMIT
        # originator_id and originator_version are the row's key columns already.
        assert "originator_id" not in body and "originator_version" not in body
    assert plain == 1  # WorkItemStarted: its time and actor
    assert wc.work_item(item.id).title == item.title


def test_snapshots_and_detail_rows_are_deflated(wc: WorkCenter, db_path: Path) -> None:
    item = create_dynamic(wc)
    plan(wc, item.id)
    claimed = claim(wc)
    for _ in range(SNAPSHOT_INTERVAL):
        assert wc.renew_lease(claimed)
    wc.finish_run(claimed, report())
    snapshots = _rows(db_path, "SELECT state FROM stored_snapshots")
    assert snapshots and all(s[0][:1] == b"\x78" for s in snapshots)
    blobs = _rows(db_path, "SELECT dto FROM dv_details")
    assert blobs and all(isinstance(b[0], bytes) and b[0][:1] == b"\x78" for b in blobs)
    fresh = WorkCenter.open(db_path, boot_id="other")
    try:
        assert fresh.action(claimed.action_id) == wc.action(claimed.action_id)
        assert fresh.detail(item.id) == wc.detail(item.id)
    finally:
        fresh.close()


def test_a_store_written_before_compression_still_reads(
    wc: WorkCenter, db_path: Path, clock: FakeClock
) -> None:
    """Rows as the code before ADR-0020 wrote them: plain orjson with the originator's
    id and version in the state, the DTO as plain bytes, and the view's own copy of
    every state (dropped when the store is opened: the event store serves them)."""
    item = create_dynamic(wc)
    detail = wc.detail(item.id)
    wc.close()
    con = sqlite3.connect(db_path)
    for rowid, originator_id, version, state in con.execute(
        "SELECT rowid, originator_id, originator_version, state FROM stored_events"
    ).fetchall():
        body = orjson.loads(inflate(state))
        body.update(originator_id=originator_id, originator_version=version)
        con.execute(
            "UPDATE stored_events SET state = ? WHERE rowid = ?", (orjson.dumps(body), rowid)
        )
    con.execute(
        "CREATE TABLE dv_states (aggregate_id TEXT PRIMARY KEY, work_item_id TEXT NOT NULL,"
        " kind TEXT NOT NULL, version INTEGER NOT NULL, state BLOB NOT NULL)"
    )
    for item_id, dto in con.execute("SELECT work_item_id, dto FROM dv_details"):
        con.execute(
            "UPDATE dv_details SET dto = ? WHERE work_item_id = ?",
            (zlib.decompress(dto), item_id),
        )
    con.commit()
    con.close()
    old = WorkCenter.open(db_path, clock=clock, boot_id="reopened")
    try:
        assert not _rows(db_path, "SELECT name FROM sqlite_master WHERE name = 'dv_states'")
        assert old.detail(item.id) == detail
        assert old.work_item(item.id).title == item.title
        # The view folds on from its old rows: a new event of the item reads them.
        clock.advance(1)
        old.cancel(item.id, reason="no longer needed")
        assert old.detail(item.id)["status"] == "cancelled"
        assert old.work_item(item.id).status == "cancelled"
    finally:
        old.close()


def test_the_mapper_reads_legacy_and_deflated_state_alike(wc: WorkCenter) -> None:
    item = create_dynamic(wc)
    (stored, *_) = wc.store.recorder.select_events(item.id, limit=1)
    plain = inflate(stored.state)
    assert plain[:1] == b"{" and inflate(plain) == plain
    legacy = StoredEvent(
        originator_id=stored.originator_id,
        originator_version=stored.originator_version,
        topic=get_topic(wi.WorkItemCreated),
        state=plain,
    )
    assert wc.store.mapper.to_domain_event(legacy) == wc.store.mapper.to_domain_event(stored)


def test_the_small_blob_compressor_writes_streams_the_library_reads() -> None:
    data = orjson.dumps({"key": "value " * 200})
    packed = SmallBlobZlibCompressor().compress(data)
    assert packed[:1] == b"\x78" and zlib.decompress(packed) == data
    assert deflate(data) == packed  # deterministic: rebuilt views are byte-for-byte equal


def test_connections_cache_prepared_statements(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The library asks sqlite3 for a cache of one statement; the store's pool keeps more."""
    asked: list[object] = []
    connect = sqlite3.connect

    def recording(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        if "isolation_level" in kwargs:  # the pool's connections, not the header check's
            asked.append(kwargs.get("cached_statements"))
        return connect(*args, **kwargs)

    monkeypatch.setattr(sqlite_settings.sqlite3, "connect", recording)
    store = WorkCenter.open(db_path, boot_id="cache")
    try:
        create_dynamic(store)
    finally:
        store.close()
    assert asked and all(size == STATEMENT_CACHE for size in asked)
    assert STATEMENT_CACHE >= 64
