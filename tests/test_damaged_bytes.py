"""Stored bytes damaged behind the store's back (ADR-0099): an event that cannot be
decoded is ``UndecodableEvent`` on every read, naming its position and stream, one line
and exit 2 on the CLI; ``audit verify ID`` names its broken link.

The stores and their ``Tamper`` are the hash chain's (``test_hash_chain``): every test
runs on SQLite and on PostgreSQL.
"""

from __future__ import annotations

import logging
import re
import zlib
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from conftest import BOOT_ID, FakeClock, claim, create_dynamic, refused, report
from eventsourcing.persistence import StoredEvent
from test_hash_chain import UUID_COLUMN, Store, _stream_position, sqlite_only
from test_hash_chain import store as chain_store

from workcenter.adapters.cipher import KEY_ENV
from workcenter.adapters.executors import echo
from workcenter.adapters.http.problems import status_of
from workcenter.adapters.worker import run_worker
from workcenter.application import Claim, WorkCenter
from workcenter.domain.errors import UndecodableEvent
from workcenter.domain.model import NOT_THIS_STREAMS as NOT_THIS
from workcenter.service_layer.repository import SNAPSHOT_INTERVAL

# The hash chain's tests' fixture, with its SQLite and PostgreSQL params.
store = chain_store


def _deflated_event(store: Store, stream: UUID) -> tuple[int, int]:
    """(position, version) of ``stream``'s newest event stored deflated, past version 1."""
    found = [
        (position, event.originator_version)
        for position in store.tamper.positions()
        if (event := store.tamper.event(position)).originator_id == stream
        and event.originator_version > 1
        and event.state[:1] == b"\x78"
    ]
    assert found, "no deflated event in the stream"
    return found[-1]


def _flip(store: Store, position: int, at: int = 20) -> None:
    state = bytearray(store.tamper.event(position).state)
    state[at] ^= 1
    store.tamper.set_state(position, bytes(state))


def _says(position: int, stream: UUID) -> str:
    return re.escape(f"the stored event at position {position} (stream {stream}, ")


def test_a_damaged_event_is_a_typed_error_on_every_read(store: Store) -> None:
    item = store.items[0]
    position, _ = _deflated_event(store, item)
    _flip(store, position)
    wc = store.reopen()  # nothing cached: every read decodes the stored bytes
    says = _says(position, item)
    reads: list[Any] = [
        lambda: wc.work_item(item),
        lambda: wc.history(item),
        lambda: wc.audit(item),
        lambda: wc.goal_progress(item),
        lambda: wc.maintenance.decisions(item),
        lambda: wc.maintenance.replay_decisions(item),
        lambda: list(wc.maintenance.export_bundle(item)),
        lambda: wc.maintenance.rebuild_projection("detail"),
        lambda: wc.cancel(item, reason="stop", expected_version=1),
    ]
    for read in reads:
        with refused(wc, UndecodableEvent, says) as info:
            read()
        assert "workcenter audit verify" in str(info.value)
    error = info.value
    assert isinstance(error, UndecodableEvent)
    assert (error.stream, error.position, error.reason) == (item, position, "it does not inflate")
    assert status_of(error) == 500  # the server's bytes, not the caller's request


@pytest.mark.parametrize(
    ("state", "topic", "reason"),
    [
        (b"{not json", None, "it is not JSON"),
        (b'{"title": "\xff\xfe"}', None, "it is not JSON"),  # not UTF-8
        (b"[1, 2]", None, "it is not a JSON object"),
        (b'{"unexpected": 1}', None, "its fields are not those of its event class"),
        (zlib.compress(b'{"also": "wrong"}'), None, "its fields are not those of its event class"),
        (None, "workcenter.domain.nowhere:Nothing", "its topic names no event class"),
    ],
)
def test_every_kind_of_damage_is_the_same_typed_error(
    store: Store, state: bytes | None, topic: str | None, reason: str
) -> None:
    item = store.items[0]
    position, _ = _deflated_event(store, item)
    if state is not None:
        store.tamper.set_state(position, state)
    if topic is not None:
        store.tamper.set_column(position, "topic", topic)
    wc = store.reopen()
    with refused(wc, UndecodableEvent, _says(position, item)) as info:
        wc.history(item)
    assert isinstance(info.value, UndecodableEvent) and info.value.reason == reason


def test_an_event_the_cipher_cannot_open_is_the_same_typed_error(
    db_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sqlite3

    monkeypatch.setenv(KEY_ENV, "A" * 43 + "=")
    with WorkCenter.open(str(db_path), clock=clock, boot_id=BOOT_ID) as wc:
        item = create_dynamic(wc).id
    con = sqlite3.connect(db_path)
    with con:
        [(stored,)] = con.execute("SELECT state FROM stored_events WHERE rowid = 1")
        state = bytearray(stored)
        state[-1] ^= 1  # the GCM tag: the cipher refuses the whole event
        con.execute("UPDATE stored_events SET state = ? WHERE rowid = 1", (bytes(state),))
    con.close()
    with WorkCenter.open(str(db_path), clock=clock, boot_id=BOOT_ID, create=False) as wc:
        with refused(wc, UndecodableEvent, _says(1, item)) as info:
            wc.work_item(item)
        assert isinstance(info.value, UndecodableEvent)
        assert info.value.reason == "the cipher does not open it"


def test_verify_of_one_item_names_a_damaged_event_of_its_own_stream(store: Store) -> None:
    item = store.items[0]
    position, version = _deflated_event(store, item)
    _flip(store, position)
    wc = store.reopen()
    verdict = wc.maintenance.verify_history(item)
    assert verdict.broken is not None and verdict.scope == item
    assert (verdict.broken.kind, verdict.broken.position) == ("digest", position)
    assert (verdict.broken.stream, verdict.broken.version) == (item, version)
    # The store-wide walk says the same.
    whole = wc.maintenance.verify_history().broken
    assert whole is not None and (whole.kind, whole.position) == ("digest", position)


def test_verify_of_one_item_does_not_pass_bytes_it_cannot_read(store: Store) -> None:
    item = store.items[0]
    position, _ = _deflated_event(store, item)
    _flip(store, position)
    # Hashed again from the damaged event to the head: the chain holds, the bytes do not.
    for later in [p for p in store.tamper.positions() if p >= position]:
        store.tamper.rehash(later)
    wc = store.reopen()
    assert wc.maintenance.verify_history().ok
    with refused(wc, UndecodableEvent, _says(position, item)):
        wc.maintenance.verify_history(item)


def _cli(db: str, *args: str) -> Any:
    from click.testing import CliRunner

    from workcenter.adapters.cli import cli

    return CliRunner().invoke(cli, ["--db", db, *args])


def test_the_cli_says_it_in_one_line_and_verify_names_the_link(
    store: Store, tmp_path: Path
) -> None:
    item = store.items[0]
    position, _ = _deflated_event(store, item)
    _flip(store, position)
    store.wc.close()
    db, short = store.location, str(item)[:8]
    verbs = [
        ["show", short],
        ["history", short],
        ["audit", short],
        ["progress", short],
        ["budget", "show", short],
        ["conversation", short],
        ["audit", "decisions", short],
        ["audit", "decisions", "--replay"],
        ["audit", "export", short, "--to", str(tmp_path / "bundle.jsonl")],
        ["projections", "rebuild"],
    ]
    for verb in verbs:
        result = _cli(db, *verb)
        assert result.exit_code == 2, (verb, result.output)
        assert result.stdout == "" and "Traceback" not in result.stderr, verb
        [line] = result.stderr.splitlines()
        assert line.startswith(
            f"UndecodableEvent: the stored event at position {position} (stream {item}, "
        ), verb
        assert line.endswith("run `workcenter audit verify` to see where the history breaks")
    for scope in ([], [short]):
        verify = _cli(db, "audit", "verify", *scope)
        assert verify.exit_code == 1, (scope, verify.output)
        assert f"BROKEN at position {position} (digest)" in verify.output
        assert f"stream {item}" in verify.output


def test_a_stream_whose_first_event_was_deleted_is_the_same_typed_error(
    store: Store,
) -> None:
    """An item's first event deleted by hand: the rebuild's fold of its stream met an
    item event with no item before it and raised ``TypeError`` with a traceback (found by
    acceptance testing, on both databases); now every fold of it says so, typed, and
    ``audit verify`` names the gap."""
    item = store.items[0]
    position = _stream_position(store, item, 1)
    store.tamper.delete_event(position, with_link=False)
    events = store.tamper.positions()
    store.wc.close()
    result = _cli(store.location, "projections", "rebuild")
    assert result.exit_code == 2, result.output
    [line] = result.stderr.splitlines()
    assert line.startswith(f"UndecodableEvent: the stored event at version 2 of stream {item}")
    wc = store.reopen()
    with pytest.raises(UndecodableEvent):
        wc.maintenance.rebuild_projection()
    assert store.tamper.positions() == events  # nothing written
    verify = _cli(store.location, "audit", "verify")
    assert verify.exit_code == 1 and f"BROKEN at position {position} (missing)" in verify.output


@pytest.mark.parametrize("runs_at_once", [1, 2])
def test_a_worker_says_why_its_claims_are_refused(
    store: Store, caplog: pytest.LogCaptureFixture, runs_at_once: int
) -> None:
    """The history cut at its head (the chain left): every claim is refused. The worker
    counted them as errors with nothing said (found by acceptance testing: "errors 13"
    in 3 s, nothing on stderr); now it says why once, not once a claim."""
    positions = store.tamper.positions()
    store.tamper.truncate(positions[-2], with_links=False)
    wc = store.reopen()
    caplog.set_level(logging.WARNING, logger="workcenter.store")
    stats = run_worker(
        wc, echo, worker="w", exit_when_idle=True, poll_seconds=0.05, runs_at_once=runs_at_once
    )
    assert stats.errors >= 1 and stats.claimed == 0
    said = [r.getMessage() for r in caplog.records if "a claim was refused" in r.getMessage()]
    assert len(said) == 1, said
    assert said[0].startswith("a claim was refused (tried again): HistoryConflict: ")


def test_an_undamaged_store_reads_as_before(store: Store) -> None:
    wc = store.reopen()
    for item in store.items:
        assert wc.work_item(item).id == item
        assert wc.maintenance.verify_history(item).ok


# --- snapshots: a cache, outside the chain --------------------------------------------


def _snapshot_table(store: Store) -> str:
    name = store.wc._repository.store.snapshots.recorder.events_table_name  # type: ignore[union-attr]
    schema = getattr(store.tamper, "schema", None)
    return name if schema is None else f'"{schema}".{name}'


def _snapshotted(store: Store) -> tuple[Claim, int]:
    """A claimed Run whose Action's stream was snapshotted, and the snapshot's version."""
    claimed = claim(store.wc)
    while store.wc.action(claimed.action_id).version < SNAPSHOT_INTERVAL:
        assert store.wc.renew_lease(claimed)
    [(version,)] = store.tamper._all(
        f"SELECT originator_version FROM {_snapshot_table(store)} WHERE originator_id = ?",
        (store.tamper._stream(claimed.action_id),),
    )
    return claimed, version


def _damage_snapshot(store: Store, stream: UUID) -> None:
    table = _snapshot_table(store)
    [(state,)] = store.tamper._all(
        f"SELECT state FROM {table} WHERE originator_id = ?", (store.tamper._stream(stream),)
    )
    damaged = bytearray(state)
    damaged[15] ^= 1
    store.tamper._run(
        (
            f"UPDATE {table} SET state = ? WHERE originator_id = ?",
            (bytes(damaged), store.tamper._stream(stream)),
        )
    )


def test_a_snapshot_that_does_not_decode_is_replaced_by_its_events(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    claimed, version = _snapshotted(store)
    action = store.wc.action(claimed.action_id)
    at_snapshot = store.wc.action(claimed.action_id, version)
    _damage_snapshot(store, claimed.action_id)
    wc = store.reopen()
    with caplog.at_level(logging.WARNING, logger="workcenter.store"):
        assert wc.action(claimed.action_id) == action
        assert wc.action(claimed.action_id, version) == at_snapshot
        # A command on the Run reads the Action with its item (``together``), then the views.
        assert wc.renew_lease(claimed)
        # Its finish stores the item's detail, folded from the states at their versions.
        wc.finish_run(claimed, report("completed"))
        assert wc.detail(claimed.work_item_id)["id"] == str(claimed.work_item_id)
        assert wc.maintenance.rebuild_projection()
    warned = [r.getMessage() for r in caplog.records if "snapshot" in r.getMessage()]
    assert warned and all(f"stream {claimed.action_id} at version {version}" in w for w in warned)
    verdict = wc.maintenance.verify_history()
    assert verdict.ok, "a snapshot is a cache: the history is whole"
    [damaged] = verdict.damaged_snapshots
    assert (damaged.stream, damaged.version) == (claimed.action_id, version)
    assert verdict.json()["damaged_snapshots"] == [
        {"stream": str(claimed.action_id), "version": version, "reason": "it does not inflate"}
    ]
    assert wc.maintenance.verify_history(claimed.work_item_id).damaged_snapshots
    other = next(i for i in store.items if i != claimed.work_item_id)
    assert not wc.maintenance.verify_history(other).damaged_snapshots


def test_the_cli_warns_of_a_damaged_snapshot_and_goes_on(store: Store) -> None:
    claimed, version = _snapshotted(store)
    _damage_snapshot(store, claimed.action_id)
    store.wc.close()
    item = str(claimed.work_item_id)
    for verb in (["show", item], ["history", item], ["projections", "rebuild"]):
        result = _cli(store.location, *verb)
        assert result.exit_code == 0, (verb, result.output)
    verify = _cli(store.location, "audit", "verify")
    assert verify.exit_code == 0 and "verified" in verify.stdout
    assert (
        f"warning: the snapshot of stream {claimed.action_id} at version {version} cannot be"
        " decoded (it does not inflate)"
    ) in " ".join(verify.stdout.split())


def _edit_snapshot(store: Store, stream: UUID, **changes: Any) -> None:
    """The snapshot's state changed and sealed again as the store seals it: it decodes."""
    table = _snapshot_table(store)
    stored_stream = store.tamper._stream(stream)
    [(version, topic, state)] = store.tamper._all(
        f"SELECT originator_version, topic, state FROM {table} WHERE originator_id = ?",
        (stored_stream,),
    )
    mapper = store.wc._repository.store.mapper
    snapshot = mapper.to_domain_event(StoredEvent(stream, version, topic, bytes(state)))
    edited = snapshot.model_copy(update={"state": snapshot.state.model_copy(update=changes)})
    sealed = mapper.to_stored_event(edited).state
    store.tamper._run(
        (f"UPDATE {table} SET state = ? WHERE originator_id = ?", (sealed, stored_stream))
    )


def test_a_snapshot_that_is_not_the_fold_of_its_events_breaks_the_verdict(store: Store) -> None:
    """A decodable snapshot is what every load starts from: an edited one changed what
    commands saw while `audit verify` said the history was whole (ADR-0103)."""
    claimed, version = _snapshotted(store)
    assert store.wc.maintenance.verify_history().ok  # as written: each the fold of its events
    _edit_snapshot(store, claimed.action_id, max_attempts=5)
    wc = store.reopen()
    assert wc.action(claimed.action_id, version).max_attempts == 5  # loads start from it
    verdict = wc.maintenance.verify_history()
    assert not verdict.ok and verdict.broken is None  # the events' chain is whole
    [edited] = verdict.mismatched_snapshots
    assert (edited.stream, edited.version) == (claimed.action_id, version)
    assert verdict.json()["mismatched_snapshots"] == [
        {"stream": str(claimed.action_id), "version": version, "reason": edited.reason}
    ]
    assert not wc.maintenance.verify_history(claimed.work_item_id).ok
    other = next(i for i in store.items if i != claimed.work_item_id)
    assert wc.maintenance.verify_history(other).ok
    wc.close()
    verify = _cli(store.location, "audit", "verify")
    assert verify.exit_code == 1, verify.output
    said = " ".join(verify.stdout.split())
    assert f"BROKEN: the snapshot of stream {claimed.action_id} at version {version}" in said
    assert "history of the store verified" not in said  # the events are; the snapshots not
    assert "events of the store verified" in said


def test_the_snapshot_check_reports_progress_after_each_stream(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check reads each snapshotted stream's events again, after the walk: the
    caller is told after each stream, so a stop (which the progress raises) is taken
    between two, not only once every stream was folded (ADR-0100, ADR-0103)."""
    _snapshotted(store)
    repo = store.wc._repository
    folded: list[UUID] = []
    fold = repo.folds_of_events
    monkeypatch.setattr(
        repo, "folds_of_events", lambda stream, *a: folded.append(stream) or fold(stream, *a)
    )

    class Stopped(Exception):
        pass

    told: list[tuple[str, int, int]] = []

    def stop_once_folding(phase: str, done: int, total: int) -> None:
        told.append((phase, done, total))
        if folded:
            raise Stopped

    with pytest.raises(Stopped):
        store.wc.maintenance.verify_history(progress=stop_once_folding)
    assert len(folded) == 1  # taken after the first stream's fold, not at the end
    # The walk's pages, then the check's streams, each phase named (ADR-0106).
    *walk, check = told
    assert walk and {phase for phase, *_ in walk} == {"events"}
    assert check[:2] == ("snapshots", 1) and check[2] >= 1


def test_the_snapshot_check_takes_no_stop_once_the_walk_found_a_break(store: Store) -> None:
    """A stop in the check would hide the break the walk found: the check then runs to its
    end untold, and the verdict is returned (ADR-0106)."""
    _snapshotted(store)
    position, _ = _deflated_event(store, store.items[0])
    _flip(store, position)
    wc = store.reopen()

    class Stopped(Exception):
        pass

    def stop_in_the_check(phase: str, *_: int) -> None:
        if phase != "events":
            raise Stopped

    verdict = wc.maintenance.verify_history(progress=stop_in_the_check)
    assert verdict.broken is not None and verdict.broken.position == position


def _events_table(store: Store) -> str:
    name = store.wc._repository.store.recorder.events_table_name
    schema = getattr(store.tamper, "schema", None)
    return name if schema is None else f'"{schema}".{name}'


def _snapshot_row_is(store: Store, stream: UUID, version: int, topic: str, state: bytes) -> None:
    update = f"UPDATE {_snapshot_table(store)} SET originator_version = ?, topic = ?, state = ?"
    store.tamper._run(
        (update + " WHERE originator_id = ?", (version, topic, state, store.tamper._stream(stream)))
    )


@pytest.mark.parametrize("what", ["an event's row", "another version", "another stream's"])
def test_a_snapshot_row_that_is_not_this_streams_is_gone_past_and_named(
    store: Store, what: str
) -> None:
    """An event's row put in the snapshots table verified and crashed every load (a
    TypeError); a snapshot moved to another version or copied from another stream
    crashed loads (KeyError) or made the item NotFound. Loads now replay the events,
    and `audit verify` names the row (ADR-0103)."""
    claimed, version = _snapshotted(store)
    action = store.wc.action(claimed.action_id)
    snapshots, events = _snapshot_table(store), _events_table(store)
    stream = store.tamper._stream(claimed.action_id)
    if what == "an event's row":
        [(topic, state)] = store.tamper._all(
            f"SELECT topic, state FROM {events} WHERE originator_id = ? AND originator_version = ?",
            (stream, version),
        )
        _snapshot_row_is(store, claimed.action_id, version, topic, bytes(state))
    elif what == "another version":
        [(topic, state)] = store.tamper._all(
            f"SELECT topic, state FROM {snapshots} WHERE originator_id = ?", (stream,)
        )
        _snapshot_row_is(store, claimed.action_id, version - 10, topic, bytes(state))
    else:
        other = claim(store.wc)  # another Action, snapshotted at the same version
        while store.wc.action(other.action_id).version < SNAPSHOT_INTERVAL:
            assert store.wc.renew_lease(other)
        [(topic, state)] = store.tamper._all(
            f"SELECT topic, state FROM {snapshots} WHERE originator_id = ?",
            (store.tamper._stream(other.action_id),),
        )
        _snapshot_row_is(store, claimed.action_id, version, topic, bytes(state))
    wc = store.reopen()
    assert wc.action(claimed.action_id) == action  # its events, not the row
    assert wc.renew_lease(claimed)
    assert wc.detail(claimed.work_item_id)["id"] == str(claimed.work_item_id)
    verdict = wc.maintenance.verify_history()
    assert not verdict.ok
    assert [(s.stream, s.version, s.reason) for s in verdict.mismatched_snapshots] == [
        (claimed.action_id, version if what != "another version" else version - 10, NOT_THIS)
    ]
    wc.close()
    for verb in (["show", str(claimed.work_item_id)], ["audit", "verify"]):
        result = _cli(store.location, *verb)
        assert "Traceback" not in result.output, result.output
    # Named for what it is: loads go past it (they said that loads start from it).
    assert "is not a snapshot of this stream at this version" in result.output
    assert "loads ignore it" in result.output and "loads start from it" not in result.output


@sqlite_only(UUID_COLUMN)
def test_a_snapshot_row_whose_stream_is_no_uuid_is_a_warning(store: Store) -> None:
    """SQLite's column takes any text: such a row made `audit verify` raise ValueError."""
    _snapshotted(store)
    topic = "workcenter.adapters.persistence:ActionSnapshot"
    store.tamper._run(
        (f"INSERT INTO {_snapshot_table(store)} VALUES (?, ?, ?, ?)", ("garbage", 50, topic, b"x"))
    )
    verdict = store.reopen().maintenance.verify_history()
    assert verdict.ok
    assert [(d.stream, d.reason) for d in verdict.damaged_snapshots] == [
        ("garbage", "its stream id is not a UUID")
    ]
    verify = _cli(store.location, "audit", "verify")
    assert verify.exit_code == 0 and "Traceback" not in verify.output, verify.output
