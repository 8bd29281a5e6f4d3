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
from hypothesis import given, settings
from hypothesis import strategies as st

from workcenter.adapters import sqlite_settings
from workcenter.adapters.compression import (
    CURRENT_DICTIONARY,
    DICTIONARIES,
    PLAIN_LIMIT,
    SmallBlobZlibCompressor,
    deflate,
    inflate,
    is_compressed,
)
from workcenter.adapters.sqlite_settings import STATEMENT_CACHE
from workcenter.application import WorkCenter
from workcenter.domain import work_item as wi
from workcenter.service_layer.repository import SNAPSHOT_INTERVAL


def zlib_inflate(packed: bytes) -> bytes:
    """The standard library's zlib reading a stream, given the preset dictionary that
    the stream's header names, if it names one (RFC 1950: FDICT, then its Adler-32)."""
    if not packed[1] & 0x20:
        return zlib.decompress(packed)
    inflater = zlib.decompressobj(zdict=DICTIONARIES[int.from_bytes(packed[2:6], "big")])
    return inflater.decompress(packed) + inflater.flush()


def _rows(db_path: Path, sql: str) -> list[tuple[bytes | str, ...]]:
    con = sqlite3.connect(db_path)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def test_event_state_is_deflated_without_the_row_s_own_columns(
    wc: WorkCenter, db_path: Path
) -> None:
    item = create_dynamic(wc, start=False)
    wc.start(item.id)  # a start of its own writes WorkItemStarted (ADR-0046)
    plain = 0
    for (state,) in _rows(db_path, "SELECT state FROM stored_events"):
        assert isinstance(state, bytes)
        if state[:1] == b"{":  # too short to be worth deflating (ADR-0038)
            plain += 1
            assert len(state) <= PLAIN_LIMIT
            body = orjson.loads(state)
        else:
            assert state[:1] == b"\x78"
            body = orjson.loads(zlib_inflate(state))
            assert len(zlib_inflate(state)) > PLAIN_LIMIT
        # originator_id and originator_version are the row's key columns already.
        assert "originator_id" not in body and "originator_version" not in body
    assert plain == 1  # WorkItemStarted: its time and actor
    assert wc.work_item(item.id).title == item.title


def test_snapshots_and_detail_rows_are_deflated(
    wc: WorkCenter, db_path: Path, clock: FakeClock
) -> None:
    item = create_dynamic(wc)
    clock.advance(1)  # else the item's row waits for a read (ADR-0073)
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
    clock.advance(1)  # a command after the create stores the DTO (ADR-0073)
    plan(wc, item.id)
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
            (zlib_inflate(dto), item_id),
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
    """Event and snapshot state: a zlib stream with no preset dictionary (ADR-0072)."""
    data = orjson.dumps({"key": "value " * 200})
    packed = SmallBlobZlibCompressor().compress(data)
    assert packed[:1] == b"\x78" and zlib.decompress(packed) == data
    assert deflate(data) == deflate(data)  # deterministic: rebuilt views are byte-for-byte equal


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(),
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(), inner, max_size=6),
    max_leaves=40,
)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=6000) | st.dictionaries(st.text(), JSON).map(orjson.dumps))
def test_what_the_deflater_writes_stdlib_zlib_inflates(data: bytes) -> None:
    """Whatever the deflater writes is a standard zlib stream, told by its first byte,
    and the same for the same input: rebuilt views compare byte for byte."""
    packed = deflate(data)
    assert packed[:1] == b"\x78" and is_compressed(packed)
    assert zlib_inflate(packed) == data and inflate(packed) == data
    assert deflate(data) == packed


@settings(max_examples=100, deadline=None)
@given(
    st.dictionaries(st.text(), JSON, min_size=1).map(orjson.dumps),
    st.integers(-1, 9),
    st.integers(1, 9),
    st.sampled_from(
        [zlib.Z_DEFAULT_STRATEGY, zlib.Z_FILTERED, zlib.Z_HUFFMAN_ONLY, zlib.Z_RLE, zlib.Z_FIXED]
    ),
)
def test_any_deflater_with_the_default_window_writes_what_readers_read(
    data: bytes, level: int, mem_level: int, strategy: int
) -> None:
    """The first-byte rule does not depend on the deflater's level, memory or strategy:
    a store written with other settings, or by another zlib-compatible library
    (ADR-0041 weighed two), reads as it is."""
    deflater = zlib.compressobj(level, zlib.DEFLATED, zlib.MAX_WBITS, mem_level, strategy)
    packed = deflater.compress(data) + deflater.flush()
    assert is_compressed(packed) and inflate(packed) == data
    assert not is_compressed(data) and inflate(data) == data  # plain JSON: a ``{``


STATE = (
    b'{"timestamp":"2026-12-03T13:04:57.224344Z","actor":{"kind":"user","id":"user"},'
    b'"work_item_id":"e52314d5-422d-45f6-847c-fba5da60d15b","limits":{"max_requests":200,'
    b'"max_tokens":2000000,"max_run_requests":40,"max_action_attempts":3,'
    b'"max_coordinator_failures":3}}'
)
# ``STATE`` as zlib-ng 2.3 (python zlib-ng 1.1.0, level 6) and ISA-L (python-isal
# 1.9.1, level 2) deflate it: other encoders than the store's, other bytes, the same
# stream format (ADR-0041).
WRITTEN_ELSEWHERE = {
    "zlib-ng": "789c4dcc418ec3200c05d0bb780d23624c5a718e5975836820124a810e71d44a55ee3ea2198dead5f7"
    "fb965fc029c7957dbe83055438ca01a5d2df83b68aac397d219226ba80003f716d605fb0a412c0c2b6c60602d2"
    "7fde053c6a5b5ce298dd9ba3413d503092108324338ff24ca749ce576f821f5518cc1504dc524ebcf6d7d93f5d"
    "8b3f5b5cfb8e4a8937715d6239a0cf816d2b1fb7f4a77ee2548bf3cc31df7ba10f9f6a6d2115cfb5b9d9a7dbd6"
    "622ff7fd171fe25212",
    "isa-l": "785e4dcc416ec3201005d0bbcc1a223c0c4ec439baea061183a59103a478ac568a7cf7ca495b75f7ff"
    "9bd17f8070c9abc472070f6870d4036a63df06eb0d79773e2192257a07057192d6c13f60e19ac0c3b6e60e0af8"
    "2fef0a3e5b5f024b2ee1c9d9a11d28394d8849939b477da1f3a4e76b74298e260dee0a0a6e5c58d663bac4afd0"
    "f3c796d7a3a331ea49d2965c5f60cc2ff6adfefba51f8d9370ab218ae4723f46eccba7d67ae21aa5f53047be6d"
    "3d1fc77dff061fe25212",
}


@pytest.mark.parametrize("library", sorted(WRITTEN_ELSEWHERE))
def test_a_state_deflated_by_another_zlib_library_reads(library: str) -> None:
    packed = bytes.fromhex(WRITTEN_ELSEWHERE[library])
    assert packed != deflate(STATE)  # another encoder's choices, not the store's bytes
    assert is_compressed(packed) and inflate(packed) == STATE


def test_a_store_deflated_with_other_settings_reads_unchanged(
    wc: WorkCenter, db_path: Path, clock: FakeClock
) -> None:
    """Every state and DTO of a store rewritten by another deflater's settings (level 9
    and a full-size hash table, so another header too): the store opens, reads and
    folds on as before."""
    item = create_dynamic(wc)
    clock.advance(1)  # a command after the create stores the DTO (ADR-0073)
    plan(wc, item.id)
    claimed = claim(wc)
    wc.finish_run(claimed, report())
    detail, action = wc.detail(item.id), wc.action(claimed.action_id)
    wc.close()

    def other(data: bytes) -> bytes:
        deflater = zlib.compressobj(9, zlib.DEFLATED, zlib.MAX_WBITS, 9)
        return deflater.compress(data) + deflater.flush()

    con = sqlite3.connect(db_path)
    rewritten = 0
    for rowid, state in con.execute("SELECT rowid, state FROM stored_events").fetchall():
        if is_compressed(state):
            again = other(zlib_inflate(state))
            rewritten += again != state
            con.execute("UPDATE stored_events SET state = ? WHERE rowid = ?", (again, rowid))
    for item_id, dto in con.execute("SELECT work_item_id, dto FROM dv_details").fetchall():
        con.execute(
            "UPDATE dv_details SET dto = ? WHERE work_item_id = ?",
            (other(zlib_inflate(dto)), item_id),
        )
    con.commit()
    con.close()
    assert rewritten  # the other settings wrote other bytes
    reopened = WorkCenter.open(db_path, clock=clock, boot_id="reopened")
    try:
        assert reopened.detail(item.id) == detail
        assert reopened.action(claimed.action_id) == action
        clock.advance(1)
        reopened.cancel(item.id, reason="no longer needed")
        assert reopened.detail(item.id)["status"] == "cancelled"
    finally:
        reopened.close()


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


# The dictionary's Adler-32, as every blob deflated against it names it: a change to
# the file would leave those blobs unreadable (ADR-0072).
FIRST_DICTIONARY = 0x6E31383C


def test_new_blobs_name_the_current_dictionary_which_never_changes() -> None:
    packed = deflate(STATE)  # as a detail DTO is
    assert packed[1] & 0x20  # FDICT
    named = int.from_bytes(packed[2:6], "big")
    assert named == zlib.adler32(CURRENT_DICTIONARY) == FIRST_DICTIONARY
    assert DICTIONARIES[named] == CURRENT_DICTIONARY
    # Against the dictionary, even this state (no DTO) takes fewer bytes than alone.
    alone = zlib.compressobj(zlib.Z_DEFAULT_COMPRESSION, zlib.DEFLATED, zlib.MAX_WBITS, 5)
    assert len(packed) < len(alone.compress(STATE) + alone.flush())


def test_a_blob_naming_an_unknown_dictionary_is_a_zlib_error() -> None:
    deflater = zlib.compressobj(zdict=b"another dictionary, from a newer version")
    packed = deflater.compress(STATE) + deflater.flush()
    assert is_compressed(packed)
    with pytest.raises(zlib.error, match="not known"):
        inflate(packed)


def test_a_truncated_blob_is_a_zlib_error() -> None:
    with pytest.raises(zlib.error):
        inflate(deflate(STATE)[:-5])


def test_an_altered_blob_fails_its_checksum() -> None:
    packed = bytearray(deflate(STATE))
    packed[-1] ^= 0x01  # the Adler-32 of the data, the stream's last byte
    with pytest.raises(zlib.error, match="altered"):
        inflate(bytes(packed))
