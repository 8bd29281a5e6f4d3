"""`workcenter copy` (ADR-0125): a store moved to another database under its own key,
most often a SQLite file onto PostgreSQL as a deployment grows. The copy holds every
event in order, its chain verifies against an anchor kept from the source, its views
equal the source's, and the work goes on from it; refusals write nothing."""

from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import signal
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import postgres
import pytest
from click.testing import CliRunner, Result
from conftest import BOOT_ID, FakeClock, claim, create_dynamic, create_linear, report
from rich.console import Console
from rich.progress import Progress
from test_rekey_targets import on_each_page

from workcenter.adapters import cli_store_copy, copy_mark, store_copy
from workcenter.adapters.cipher import KEY_ENV, StoreKeyRefused
from workcenter.adapters.cli import cli
from workcenter.adapters.cli_stop import stop_signals
from workcenter.adapters.persistence import StoreUnavailable
from workcenter.adapters.recorders import OneCommitSQLiteRecorder
from workcenter.application import WorkCenter
from workcenter.domain.errors import InvalidInput
from workcenter.service_layer.maintenance import Maintenance


def copy(source: str, target: str, env: dict[str, str | None] | None = None) -> Result:
    return CliRunner().invoke(cli, ["--db", source, "copy", "--to", target], env=env or {})


@pytest.fixture(params=["sqlite-to-postgresql", "postgresql-to-sqlite"])
def stores(request: pytest.FixtureRequest, db_path: Path) -> Iterator[tuple[str, str]]:
    """(source, target): one a fresh SQLite file, the other a fresh PostgreSQL schema."""
    with postgres.fresh_schema() as url:
        if request.param == "sqlite-to-postgresql":
            yield str(db_path), url
        else:
            yield url, str(db_path)


def work_under_way(wc: WorkCenter) -> None:
    """Items in several states: a dynamic item waiting for its Coordinator, a linear item
    past its first stage, one with a Run in hand, one cancelled."""
    create_dynamic(wc)
    past_first = create_linear(wc, title="Past its first stage")
    first = claim(wc)
    assert first.work_item_id == past_first.id
    wc.finish_run(first, report())
    create_linear(wc, title="Running")
    claim(wc)
    cancelled = create_linear(wc, title="Cancelled")
    wc.cancel(cancelled.id, expected_version=wc.work_item(cancelled.id).version)


def views(wc: WorkCenter) -> dict[str, Any]:
    items = wc.list_work_items()
    return {
        "list": items,
        "details": {str(i["id"]): wc.detail(i["id"]) for i in items},
        "progress": {str(i["id"]): wc.goal_progress(i["id"]) for i in items},
    }


def anchor(store: str) -> str:
    done = CliRunner().invoke(cli, ["--db", store, "audit", "anchor"])
    assert done.exit_code == 0, done.output
    return done.output.strip()


def test_a_copy_holds_the_history_its_views_and_the_work_to_go_on(
    stores: tuple[str, str], clock: FakeClock
) -> None:
    source, target = stores
    with WorkCenter.open(source, clock=clock, boot_id=BOOT_ID) as wc:
        work_under_way(wc)
        events = wc.event_count()
        before = views(wc)
        queue = (wc.work_queue.ready_actions(100), wc.work_queue.live_runs())
    kept = anchor(source)

    done = copy(source, target)

    assert done.exit_code == 0, done.output
    assert done.output == (
        f"copied {events} events to {target}, without encryption, up to position {events}\n"
    )
    verified = CliRunner().invoke(cli, ["--db", target, "audit", "verify", "--anchor", kept])
    assert verified.exit_code == 0, verified.output
    assert anchor(target) == kept  # link for link the source's chain
    with WorkCenter.open(target, clock=clock, boot_id=BOOT_ID, create=False) as moved:
        assert moved.event_count() == events
        assert views(moved) == before
        assert (moved.work_queue.ready_actions(100), moved.work_queue.live_runs()) == queue
        # The work goes on from the copy: the next stage is claimed and finished there.
        moved.finish_run(claim(moved), report())
        assert moved.event_count() > events
    with WorkCenter.open(source, create=False) as wc:
        assert wc.event_count() == events  # the source is read, never written


def test_an_encrypted_store_is_copied_under_its_own_key(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = base64.b64encode(os.urandom(32)).decode()
    monkeypatch.setenv(KEY_ENV, key)
    with postgres.fresh_schema() as target:
        with WorkCenter.open(str(db_path)) as wc:
            create_dynamic(wc)
            events = wc.event_count()
        done = copy(str(db_path), target, {KEY_ENV: key})
        assert done.exit_code == 0, done.output
        assert "encrypted with its key" in done.output
        with WorkCenter.open(target, create=False) as moved:
            assert moved.event_count() == events
        # Its stored bytes copied as they are: sealed again, each event's nonce made the
        # chain another, and the source's anchor called the copy changed.
        kept = anchor(str(db_path))
        assert anchor(target) == kept
        verified = CliRunner().invoke(cli, ["--db", target, "audit", "verify", "--anchor", kept])
        assert verified.exit_code == 0, verified.output
        monkeypatch.delenv(KEY_ENV)
        with pytest.raises(StoreKeyRefused):
            WorkCenter.open(target, create=False)


def refused(result: Result) -> str:
    assert result.exit_code == 2, result.output
    [line] = result.output.strip().splitlines()
    assert line.startswith("InvalidInput: "), result.output
    return line


def test_a_store_that_holds_events_is_refused_and_nothing_is_written(
    stores: tuple[str, str],
) -> None:
    source, target = stores
    with WorkCenter.open(source) as wc:
        create_dynamic(wc)
        source_events = wc.event_count()
    with WorkCenter.open(target) as wc:
        create_linear(wc)
        target_events = wc.event_count()

    line = refused(copy(source, target))
    assert f"is not empty: it holds {target_events} events" in line
    itself = refused(copy(source, source))
    assert "is the store being copied" in itself
    for store, events in ((source, source_events), (target, target_events)):
        with WorkCenter.open(store, create=False) as wc:
            assert wc.event_count() == events


def test_a_stopped_copy_says_its_new_store_is_not_one(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stop handling is rekey's (test_rekey_targets), in the verb's own words."""
    source = str(db_path)
    with WorkCenter.open(source) as wc:
        for n in range(3):
            create_dynamic(wc, title=f"Item {n}")
    on_each_page(monkeypatch, lambda: os.kill(os.getpid(), signal.SIGTERM), before=True)
    with postgres.fresh_schema() as target:
        stopped = copy(source, target)
        assert stopped.exit_code == 128 + signal.SIGTERM, stopped.output
        [line] = stopped.stderr.splitlines()
        assert line.startswith("interrupted by SIGTERM: copy stopped at position 2 of ")
        assert line.endswith(
            "remove it (DROP SCHEMA ... CASCADE) and run copy again into a new, empty store"
        )
    # With --json, what the stop left is on stdout too (it printed nothing, ADR-0140).
    with postgres.fresh_schema() as target:
        stopped = CliRunner().invoke(cli, ["--db", source, "copy", "--to", target, "--json"])
        assert stopped.exit_code == 128 + signal.SIGTERM, stopped.output
        said = json.loads(stopped.stdout)
        assert said | {"source_head": 0} == {
            "stopped": "SIGTERM",
            "position": 2,
            "source_head": 0,
            "complete": False,
        }


def test_a_password_in_the_target_is_never_shown(db_path: Path) -> None:
    with WorkCenter.open(str(db_path)) as wc:
        create_dynamic(wc)
    with postgres.fresh_schema() as url:
        secret = url.replace("postgres@", "postgres:s3cret@", 1)  # trust: any password
        done = copy(str(db_path), secret)
        assert done.exit_code == 0, done.output
        again = copy(str(db_path), secret)
        assert again.exit_code == 2
        said = done.output + again.output
        assert "s3cret" not in said and "postgres:***@" in said, said


def test_a_store_in_memory_is_refused_as_a_target(db_path: Path) -> None:
    with WorkCenter.open(str(db_path)) as wc:
        create_dynamic(wc)
    line = refused(copy(str(db_path), ":memory:"))
    assert "a store in memory ends with this process" in line


def test_a_copy_that_fails_midway_says_its_new_store_is_not_one(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The database gone after a page (found by acceptance testing with a server
    stopped): the error's line came alone, and the part copied looked like a store."""
    source = str(db_path)
    with WorkCenter.open(source) as wc:
        for n in range(3):
            create_dynamic(wc, title=f"Item {n}")
        events = wc.event_count()

    def away() -> None:
        raise StoreUnavailable("the database cannot be reached")

    on_each_page(monkeypatch, away, before=False)
    target = str(db_path.parent / "copy.db")
    failed = copy(source, target)
    assert failed.exit_code == 2, failed.output
    assert failed.stderr.splitlines() == [
        f"copy failed at position 2 of {events}: the new"
        f" store at {target} holds only the events copied so far and is not a copy of the"
        " store; remove it (delete the file) and run copy again into a new, empty store",
        "StoreUnavailable: the database cannot be reached",
    ]


def test_a_source_gone_after_the_last_page_leaves_the_copy_whole_but_unchecked(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The database gone when the copy read the source's head a last time, to check that
    no writer added events: it said "copy failed ... is not a copy of the store" of a
    copy that held every event (found by acceptance testing, ADR-0133)."""
    source = str(db_path)
    with WorkCenter.open(source) as wc:
        for n in range(3):
            create_dynamic(wc, title=f"Item {n}")
        events = wc.event_count()
    copied_all = store_copy._copy
    gone: list[bool] = []

    def then_away(*args: Any) -> int:
        copied = copied_all(*args)
        gone.append(True)
        return copied

    head = OneCommitSQLiteRecorder.max_notification_id

    def last_head(self: Any) -> int | None:
        if gone and self.datastore.pool.db_name == source:  # the source's, not the copy's
            raise StoreUnavailable("the database cannot be reached")
        return head(self)

    monkeypatch.setattr(store_copy, "_copy", then_away)
    monkeypatch.setattr(OneCommitSQLiteRecorder, "max_notification_id", last_head)
    target = str(db_path.parent / "copy.db")
    done = copy(source, target)
    assert done.exit_code == 1, done.output
    assert done.stdout.startswith(f"copied {events} events to {target}")
    assert done.stderr.startswith(f"unchecked: every event up to position {events} was copied")
    monkeypatch.undo()
    assert anchor(target) == anchor(source)


def test_a_copy_whose_views_could_not_be_built_says_a_rebuild_finishes_it(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The new store's database gone after the last page, while its read models were
    built: it said "holds only the events copied so far ... remove it" of a store that
    held every event, which a rebuild made whole (found by acceptance testing,
    ADR-0136)."""
    source = str(db_path)
    with WorkCenter.open(source) as wc:
        for n in range(3):
            create_dynamic(wc, title=f"Item {n}")
        events = wc.event_count()

    def away(self: Any, *args: Any, **kwargs: Any) -> None:
        raise StoreUnavailable("the database cannot be reached")

    monkeypatch.setattr(Maintenance, "rebuild_projection", away)
    target = str(db_path.parent / "copy.db")
    failed = copy(source, target)
    assert failed.exit_code == 2, failed.output
    assert failed.stderr.splitlines() == [
        f"ViewsNotBuilt: every event up to position {events} was copied to {target}, but its"
        " read models were not built (StoreUnavailable: the database cannot be reached);"
        f" run `workcenter --db {target} projections rebuild` once it can be reached (the"
        " copy then holds the store as it was at that position)"
    ]
    monkeypatch.undo()
    rebuilt = CliRunner().invoke(cli, ["--db", target, "projections", "rebuild"])
    assert rebuilt.exit_code == 0, rebuilt.output
    assert anchor(target) == anchor(source)
    with WorkCenter.open(source) as old, WorkCenter.open(target) as new:
        assert views(new) == views(old)


def test_the_views_built_after_the_last_page_are_shown_as_they_go(
    db_path: Path, tmp_path: Path, clock: FakeClock
) -> None:
    """The copy's bar stood still at its end while the new store's read models were built,
    the longer part of a large copy: each view now has a bar of its own."""
    with WorkCenter.open(db_path, clock=clock, boot_id=BOOT_ID) as wc:
        work_under_way(wc)
        names = wc.maintenance.projection_names()
    seen: list[tuple[str, Any]] = []
    store_copy.copy(
        str(db_path),
        str(tmp_path / "copy.db"),
        progress=lambda done, total: seen.append(("page", (done, total))),
        building=lambda view, done, total: seen.append((view, (done, total))),
    )
    last_page = max(i for i, (what, _) in enumerate(seen) if what == "page")
    built = seen[last_page + 1 :]
    assert [what for what, _ in seen[:last_page]] == ["page"] * last_page
    last = dict(built)  # each view's last call
    assert set(last) == set(names) and all(done == total for done, total in last.values())

    with (
        Progress(console=Console(file=io.StringIO(), force_terminal=True)) as bar,
        stop_signals() as stop,
    ):
        checking = cli_store_copy._checking_on(bar, stop)
        checking("events", 7, 7)
        building: list[str] = []
        advance = cli_store_copy._views_on(bar, stop, building)
        advance("detail", 3, 10)
        advance("detail", 10, 10)
        advance("mailbox", 4, 4)
    shown = {task.description: (task.completed, task.total) for task in bar.tasks}
    assert shown == {
        "checking the store's history": (7, 7),
        "building detail": (10, 10),
        "building mailbox": (4, 4),
    }
    assert building == ["detail", "mailbox"]


def test_a_copy_stopped_while_the_history_is_checked_makes_nothing(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The source's history is checked before anything is made, which takes a while on a
    large store: a stop then ends the verb at the check's next page, nothing made (it
    waited for the check's end, the bar showing the copy at 0 meanwhile; found by
    acceptance testing, ADR-0138)."""
    with WorkCenter.open(db_path) as wc:
        create_dynamic(wc)
    verify = Maintenance.verify_history

    def signalled(self: Maintenance, *args: Any, **kwargs: Any) -> Any:
        os.kill(os.getpid(), signal.SIGTERM)
        return verify(self, *args, **kwargs)

    monkeypatch.setattr(Maintenance, "verify_history", signalled)
    target = db_path.parent / "copy.db"
    stopped = copy(str(db_path), str(target))
    assert stopped.exit_code == 128 + signal.SIGTERM, stopped.output
    assert stopped.stderr.splitlines() == [
        "interrupted by SIGTERM: copy stopped before its first event was copied: nothing was copied"
    ]
    assert not target.exists()


@pytest.mark.parametrize("into", ["sqlite", "postgresql"])
def test_a_store_whose_positions_have_gaps_is_copied_at_its_positions(
    db_path: Path, clock: FakeClock, into: str
) -> None:
    """PostgreSQL leaves gaps in the positions (ids a rolled-back insert or a crash
    burnt; concurrent writers make them every day). The copy renumbered its events: its
    chain, whose links name positions, was another, and an anchor kept from the source
    called the copy truncated (found by acceptance testing, ADR-0133)."""
    with postgres.fresh_schema() as source, postgres.fresh_schema() as other:
        target = str(db_path) if into == "sqlite" else other
        sequence = f'"{source.rsplit("=", 1)[1]}".workcenter_events_notification_id_seq'
        with WorkCenter.open(source, clock=clock, boot_id=BOOT_ID) as wc:
            for _ in range(3):
                create_dynamic(wc)  # nothing to claim: work_under_way claims its own
                with postgres.connect() as burner:
                    for _ in range(5):
                        burner.execute(f"SELECT nextval('{sequence}')")
            work_under_way(wc)
            events = wc.event_count()
            positions = [n.id for n in wc.store.recorder.select_notifications(1, 1000)]
        assert len(positions) < positions[-1] == events  # the gaps are there
        kept = anchor(source)
        # Counted, not the last position (found by acceptance testing, ADR-0133).
        said = CliRunner().invoke(cli, ["--db", source, "init"]).output
        assert said == f"the store exists ({len(positions)} events)\n"

        done = copy(source, target)

        assert done.exit_code == 0, done.output
        assert f"copied {len(positions)} events to {target}" in done.output
        assert f"up to position {positions[-1]}" in done.output
        assert anchor(target) == kept
        with WorkCenter.open(target, clock=clock, boot_id=BOOT_ID, create=False) as moved:
            assert [n.id for n in moved.store.recorder.select_notifications(1, 1000)] == positions
            moved.finish_run(claim(moved), report())  # written after the last position
            assert moved.event_count() > events
        verified = CliRunner().invoke(cli, ["--db", target, "audit", "verify", "--anchor", kept])
        assert verified.exit_code == 0, verified.output


def test_a_store_whose_history_is_broken_is_not_copied(db_path: Path) -> None:
    """The copy chained the events again as they were stored: an event edited in the
    database became a copy whose history verified (found by acceptance testing,
    ADR-0134). Refused before the new store is made."""
    source = str(db_path)
    with WorkCenter.open(source) as wc:
        create_dynamic(wc, title="Signed off")
    con = sqlite3.connect(source)
    (state,) = con.execute("SELECT state FROM stored_events WHERE rowid = 1").fetchone()
    con.execute(
        "UPDATE stored_events SET state = ? WHERE rowid = 1",
        (state[:-1] + bytes([state[-1] ^ 1]),),
    )
    con.commit()
    con.close()
    target = db_path.parent / "copy.db"
    refused_copy = copy(source, str(target))
    assert refused_copy.exit_code == 2, refused_copy.output
    assert refused_copy.stderr.startswith(
        "InvalidInput: the store's history is broken at position 1 (digest)"
    ), refused_copy.stderr
    assert not target.exists()


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_copies_into_one_new_store_at_once_make_one_copy(
    db_path: Path, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two copies that each found the store empty: one marked it again once the other
    had finished, leaving a whole copy refused as cut short, and raw database errors
    escaped (found by acceptance testing, ADR-0140)."""
    source = str(db_path)
    with WorkCenter.open(source) as wc:
        for n in range(3):
            create_dynamic(wc, title=f"Item {n}")
        events = wc.event_count()
    # Few connections a store: the copies share the test server with other tests.
    monkeypatch.setenv("POSTGRES_POOL_SIZE", "2")
    monkeypatch.setenv("POSTGRES_MAX_OVERFLOW", "2")
    for round_ in range(4):
        with contextlib.ExitStack() as stack:
            if backend == "postgresql":
                target = stack.enter_context(postgres.fresh_schema())
            else:
                target = str(db_path.parent / f"copy-{round_}.db")
            copies = 6 if backend == "sqlite" else 4
            outcomes = copies_at_once(source, target, copies)
            assert len(outcomes) == copies and outcomes.count(events) == 1, outcomes
            assert all(isinstance(o, InvalidInput | StoreUnavailable) for o in outcomes[1:]), [
                type(o).__name__ + ": " + str(o)[:200] for o in outcomes
            ]
            with WorkCenter.open(target, create=False) as copied:
                assert copied.event_count() == events


def test_a_copy_beaten_by_one_that_ended_meanwhile_is_refused_typed(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its mark refused (another copy's was there) and that copy's mark gone by the time
    it looked (the other had ended): the library's "table already exists" escaped (found
    in CI, ADR-0142); the store holds the other's copy, so it is refused as written
    meanwhile."""
    source = str(db_path)
    with WorkCenter.open(source) as wc:
        create_linear(wc)
    target = str(db_path.parent / "copy.db")
    store_copy.copy(source, target)
    with WorkCenter.open(target, create=False) as copied:
        datastore = copied.store.factory.datastore  # type: ignore[attr-defined]
        events_table = copied.store.recorder.events_table_name  # type: ignore[attr-defined]
        with datastore.transaction(commit=True) as c:  # another copy under way: its mark
            c.execute(f"CREATE TABLE {copy_mark.TABLE} (source TEXT, head BIGINT)")
        looked = copy_mark.refuse_unfinished

        def ended_meanwhile(datastore: Any, where: str) -> None:
            copy_mark.unmark(datastore)  # the other copy ends before this one looks
            looked(datastore, where)

        monkeypatch.setattr(copy_mark, "refuse_unfinished", ended_meanwhile)
        with pytest.raises(InvalidInput, match="written by another copy meanwhile"):
            copy_mark.mark(datastore, events_table, source, 1, target)


def test_a_mark_gone_between_its_look_and_its_read_is_no_mark(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The copy under way ended between the look that found its mark and the read of it:
    the database's "no such table" escaped (found in CI, ADR-0142)."""
    with WorkCenter.open(str(db_path)) as wc:
        datastore = wc.store.factory.datastore  # type: ignore[attr-defined]
        seen = iter([True])  # the first look finds a mark; by the read it is gone
        real = copy_mark._marked
        monkeypatch.setattr(copy_mark, "_marked", lambda ds, c: next(seen, None) or real(ds, c))
        copy_mark.refuse_unfinished(datastore, str(db_path))  # no mark: nothing raised


def copies_at_once(source: str, target: str, copies: int) -> list[object]:
    """What each of ``copies`` copies begun at once ended with: its events' count first
    where it copied them, then each refusal."""
    outcomes: list[object] = []

    def one_copy() -> None:
        try:
            outcomes.append(store_copy.copy(source, target).events)
        except Exception as refused:  # any: an untyped one fails the test, not the thread
            outcomes.append(refused)

    threads = [threading.Thread(target=one_copy) for _ in range(copies)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sorted(outcomes, key=lambda o: not isinstance(o, int))


def test_a_copy_says_when_runs_are_held_in_the_store_under_live_leases(db_path: Path) -> None:
    """A worker left running on the store after its copy finished its Runs there, their
    results only there, while the copy ran them again (found by acceptance testing,
    ADR-0140): the copy says how many Runs were held when it ended."""
    source = str(db_path)
    with WorkCenter.open(source) as wc:
        create_linear(wc)
        assert wc.claim_next("still-running", lease_seconds=600) is not None
    target = str(db_path.parent / "copy.db")
    done = CliRunner().invoke(cli, ["--db", source, "copy", "--to", target, "--json"])
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["runs_in_hand"] == 1
    [warning] = done.stderr.splitlines()
    assert warning.startswith(f"warning: 1 Runs were held in {source} under live leases")


def test_the_copys_lines_print_its_paths_as_they_are(db_path: Path) -> None:
    """A target named with rich's markup printed another path, and a control character
    went to the terminal raw (found by acceptance testing, ADR-0140)."""
    with WorkCenter.open(str(db_path)) as wc:
        create_linear(wc)
        assert wc.claim_next("still-running", lease_seconds=600) is not None
    folder = db_path.parent / "t[bold]x\x1b[31m"
    folder.mkdir()
    target = str(folder / "copy.db")
    done = CliRunner().invoke(cli, ["--db", str(db_path), "copy", "--to", target])
    assert done.exit_code == 0, done.output
    assert "t[bold]x" in done.stdout and "\x1b" not in done.output
