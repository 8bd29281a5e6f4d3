"""The detail read right after a write (ADR-0019): the DTO is stored when the command is
saved, a read sees every command committed before it, and a read of a current view is
one read transaction that writes nothing."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest
from conftest import (
    BOOT_ID,
    WORKER,
    FakeClock,
    action_spec,
    claim,
    create_dynamic,
    create_linear,
    plan,
    report,
    stored_detail,
)

from workcenter.application import WorkCenter
from workcenter.projections.detail import DEFERRED, Detail
from workcenter.projections.dto import detail_dto


def detail_position(wc: WorkCenter) -> int:
    return wc.projections.position(Detail.name)


@contextmanager
def statements(wc: WorkCenter) -> Iterator[list[str]]:
    """Every SQL statement the store's pooled connections run inside the block."""
    seen: list[str] = []
    datastore: Any = wc.store.factory.datastore  # type: ignore[attr-defined]
    connections = list(datastore.pool._pool)
    raw: list[sqlite3.Connection] = [c._sqlite_conn for c in connections]
    for connection in raw:
        connection.set_trace_callback(seen.append)
    try:
        yield seen
    finally:
        for connection in raw:
            connection.set_trace_callback(None)


def test_every_save_keeps_the_view_at_the_head_storing_a_dto_or_a_marker(
    wc: WorkCenter, clock: FakeClock
) -> None:
    """Every save writes the view (ADR-0076): a finish stores the item's DTO; a Run's
    start and a heartbeat store a marker (ADR-0086), from which a read builds the DTO,
    writing nothing."""
    item = create_linear(wc, stages=("implement",))
    assert detail_position(wc) == wc.event_count()
    clock.advance(1)
    claimed = claim(wc)
    assert detail_position(wc) == wc.event_count()
    assert stored_detail(wc, item.id) == DEFERRED  # a claim builds no DTO
    claimed_dto = wc.details.detail(item.id)
    assert claimed_dto is not None and claimed_dto["actions"][0]["status"] == "running"
    assert stored_detail(wc, item.id) == DEFERRED  # the read wrote nothing
    wc.renew_lease(claimed)
    assert detail_position(wc) == wc.event_count()
    assert stored_detail(wc, item.id) == DEFERRED  # a heartbeat builds no DTO
    renewed = wc.details.detail(item.id)
    assert renewed is not None
    assert (
        renewed["executionControl"]["dataRevision"]
        == claimed_dto["executionControl"]["dataRevision"] + 2
    )
    assert stored_detail(wc, item.id) == DEFERRED  # the read wrote nothing
    wc.finish_run(claimed, report())
    assert detail_position(wc) == wc.event_count()
    assert stored_detail(wc, item.id) != DEFERRED
    done = wc.details.detail(item.id)
    assert done is not None and done["status"] == "done"


def test_a_read_of_a_current_view_is_one_read_transaction_and_writes_nothing(
    wc: WorkCenter, clock: FakeClock
) -> None:
    item = create_linear(wc, stages=("implement",))
    clock.advance(1)
    claim(wc)
    # A command after the create that is no Run's start stores the DTO (ADR-0073, ADR-0086).
    wc.update_contract(item.id, expected_version=wc.work_item(item.id).version, title="Renamed")
    wc.detail(item.id)  # the pool now holds the connection the read uses
    with statements(wc) as seen:
        dto = wc.detail(item.id)
    assert dto["actions"][0]["status"] == "running"
    verbs = [s.split(None, 1)[0].upper() for s in seen]
    assert verbs.count("BEGIN") == 1
    assert "COMMIT" not in verbs
    assert not any(v in ("INSERT", "UPDATE", "DELETE") for v in verbs)


def test_a_read_of_an_item_only_its_create_wrote_builds_it_and_writes_nothing(
    wc: WorkCenter,
) -> None:
    """Its DTO is built on read (ADR-0073): a few read transactions, no write."""
    item = create_linear(wc, stages=("implement",))
    wc.detail(item.id)
    with statements(wc) as seen:
        dto = wc.detail(item.id)
    assert dto["status"] == "ready"
    verbs = [s.split(None, 1)[0].upper() for s in seen]
    assert 1 < verbs.count("BEGIN") <= 3
    assert "COMMIT" not in verbs
    assert not any(v in ("INSERT", "UPDATE", "DELETE") for v in verbs)


def test_a_reader_in_another_process_sees_each_write_at_once(db_path: Path, wc: WorkCenter) -> None:
    reader = WorkCenter.open(db_path, clock=FakeClock(), boot_id="reader")
    try:
        item = create_linear(wc, stages=("implement",))
        assert reader.detail(item.id)["status"] == "ready"
        claimed = claim(wc)
        assert reader.detail(item.id)["actions"][0]["status"] == "running"
        wc.finish_run(claimed, report())
        assert reader.detail(item.id)["status"] == "done"
    finally:
        reader.close()


def test_a_view_left_behind_is_caught_up_by_the_next_read(db_path: Path) -> None:
    """A writer without inline views (or one that died between its events and its views)
    leaves the detail view behind the log; an inline reader catches it up first."""
    writer = WorkCenter.open(db_path, clock=FakeClock(), boot_id=BOOT_ID, inline_projections=False)
    reader = WorkCenter.open(db_path, clock=FakeClock(), boot_id="reader")
    try:
        item = create_linear(writer, stages=("implement",))
        claimed = claim(writer, WORKER)
        writer.finish_run(claimed, report())
        assert detail_position(reader) < reader.event_count()
        assert reader.detail(item.id)["status"] == "done"
        assert detail_position(reader) == reader.event_count()
    finally:
        writer.close()
        reader.close()


def test_ledger_only_saves_store_a_marker_which_a_read_builds_from(
    wc: WorkCenter, clock: FakeClock
) -> None:
    """Reserving and settling LLM requests (many per Run) do not build the DTO each:
    each stores a marker and keeps the view at the head (ADR-0076); a read builds the
    DTO with them all, and the next item or Action save stores it."""
    item = create_linear(wc, stages=("implement",))
    clock.advance(1)
    claimed = claim(wc)
    before = wc.detail(item.id)
    request = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 64}
    for _ in range(3):
        admission = wc.reserve_request(item.id, request=request, run_id=claimed.run_id)
        assert admission.allowed
        assert detail_position(wc) == wc.event_count()
        assert stored_detail(wc, item.id) == DEFERRED
    after = wc.detail(item.id)
    assert after != before
    state = wc.work_item(item.id)
    expected = detail_dto(state, wc.actions(state), wc.ledger(item.id), now=clock.now())
    assert after == orjson.loads(orjson.dumps(expected))
    wc.reserve_request(item.id, request=request, run_id=claimed.run_id)
    wc.finish_run(claimed, report())  # an Action save stores the DTO
    assert detail_position(wc) == wc.event_count()
    assert stored_detail(wc, item.id) != DEFERRED


def test_a_read_right_after_renewals_is_the_dto_a_rebuild_gives(
    wc: WorkCenter, clock: FakeClock
) -> None:
    """A renewal moves the lease's expiry and the Action's version, which the DTO shows
    (``dataRevision``), so the read after it builds the DTO from the renewal's marker
    (ADR-0037, ADR-0076)."""
    item = create_linear(wc, stages=("implement",))
    claimed = claim(wc, lease_seconds=30)
    before = wc.detail(item.id)
    for _ in range(3):
        clock.advance(20)  # each renewal comes before the lease it renews expires
        assert wc.renew_lease(claimed, lease_seconds=30)
    assert stored_detail(wc, item.id) == DEFERRED
    after = wc.detail(item.id)
    assert detail_position(wc) == wc.event_count()
    revision = after["executionControl"]["dataRevision"]
    assert revision == before["executionControl"]["dataRevision"] + 2 * 3
    state = wc.work_item(item.id)
    expected = detail_dto(state, wc.actions(state), wc.ledger(item.id), now=clock.now())
    assert after == orjson.loads(orjson.dumps(expected))
    live = wc.details.dump()
    wc.maintenance.rebuild_projection(Detail.name)
    assert wc.details.dump() == live


def test_renewals_are_folded_by_the_next_save_of_the_item(wc: WorkCenter, clock: FakeClock) -> None:
    item = create_linear(wc, stages=("implement",))
    claimed = claim(wc, lease_seconds=30)
    for _ in range(2):
        clock.advance(10)
        assert wc.renew_lease(claimed, lease_seconds=30)
    clock.advance(10)
    wc.finish_run(claimed, report())  # one DTO build for the renewals and the finish
    assert detail_position(wc) == wc.event_count()
    live = wc.details.dump()
    wc.maintenance.rebuild_projection(Detail.name)
    assert wc.details.dump() == live
    assert wc.detail(item.id)["status"] == "done"


def test_two_writers_on_one_item_each_store_the_dto_of_every_state(
    db_path: Path, wc: WorkCenter, clock: FakeClock
) -> None:
    """The view keeps no states of its own (ADR-0020): what another process changed since
    this one last folded an Action comes from the event store, never a stale memory."""
    item = create_dynamic(wc)
    plan(wc, item.id, action_spec(objective="First"), action_spec(objective="Second"))
    other = WorkCenter.open(db_path, clock=clock, boot_id="other-boot")
    try:
        first = claim(wc)
        wc.detail(item.id)  # both processes have folded the item's states now
        other.detail(item.id)
        clock.advance(1)
        second = claim(other, "other-worker")
        other.finish_run(second, report())  # this process's cached Actions are stale now
        clock.advance(1)
        assert wc.renew_lease(first)  # a save that touches only the first Action
        statuses = {a["id"]: a["status"] for a in wc.detail(item.id)["actions"]}
        assert statuses[str(second.action_id)] == "completed"
        assert statuses[str(first.action_id)] == "running"
        live = wc.details.dump()
        wc.maintenance.rebuild_projection(Detail.name)
        assert wc.details.dump() == live
    finally:
        other.close()


def test_a_save_folds_the_detail_states_with_its_own_cursor_never_a_second_connection(
    wc: WorkCenter, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Inside a command's transaction the detail view reads the states it lacks with
    the transaction's own cursor: asking the pool for a reader there waits for any
    writer queued behind this one, which waits for it (a deadlock under threads)."""
    item = create_dynamic(wc)
    plan(wc, item.id, action_spec(objective="one"), action_spec(objective="two"))
    clock.advance(1)
    wc.details._cache.clear()  # the view must fetch the item's other states

    def through_the_pool(*_: Any) -> None:
        raise AssertionError("a state was loaded through the pool inside the write")

    monkeypatch.setattr(wc.details.source, "load", through_the_pool)
    claimed = wc.claim_next("w", lease_seconds=60)
    assert claimed is not None
    wc.finish_run(claimed, report())
    monkeypatch.undo()
    live = wc.detail(item.id)
    wc.maintenance.rebuild_projection(Detail.name)
    assert wc.detail(item.id) == live


# --- the Coordinator conversation in the detail (read-models.md 2.4) ----------------------


def answer(text: str) -> str:
    return orjson.dumps({"reply": text, "decision": {"kind": "answer", "reason": "asked"}}).decode()


def test_the_detail_holds_the_conversation_and_each_turn_refreshes_it(wc: WorkCenter) -> None:
    from workcenter.adapters.providers.scripted import ScriptedProvider

    item = create_linear(wc)
    assert wc.detail(item.id)["messages"] == []
    posted = wc.post_user_message(item.id, "Is it going well? token=SECRETVALUE42")
    assert detail_position(wc) == wc.event_count()  # the turn's begin stored the DTO
    user, thinking = wc.details.detail(item.id)["messages"]  # type: ignore[index]
    assert (user["role"], user["status"], user["turnId"]) == (
        "user",
        "completed",
        str(posted.turn_id),
    )
    assert "SECRETVALUE42" not in user["text"] and user["text"].startswith("Is it going well?")
    assert (thinking["role"], thinking["status"]) == ("assistant", "thinking")
    wc.coordinate_once(ScriptedProvider([answer("Yes, the stage is ready")]))
    messages = wc.detail(item.id)["messages"]
    reply = messages[-1]
    assert (reply["status"], reply["text"]) == ("completed", "Yes, the stage is ready")
    assert reply["decision"]["kind"] == "answer" and reply["id"] == thinking["id"]
    assert reply["createdAt"] <= reply["updatedAt"]
    conversation = wc.conversation(item.id)
    assert conversation is not None
    assert [m["id"] for m in messages] == [str(m.id) for m in conversation.messages]
    live = wc.details.dump()
    wc.maintenance.rebuild_projection(Detail.name)
    assert wc.details.dump() == live


def test_the_detail_keeps_the_last_100_conversation_entries(wc: WorkCenter) -> None:
    from workcenter.adapters.providers.scripted import ScriptedProvider

    item = create_linear(wc)
    provider = ScriptedProvider([])
    for n in range(51):
        wc.post_user_message(item.id, f"Question {n}")
        provider.then(answer(f"Answer {n}"))
        wc.coordinate_once(provider)
    detail = wc.detail(item.id)
    assert len(detail["messages"]) == 100 and detail["omittedMessageCount"] == 2
    assert detail["messages"][0]["text"] == "Question 1"  # the first turn's two are left out
    assert detail["messages"][-1]["text"] == "Answer 50"
