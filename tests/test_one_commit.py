"""One commit per command (issue 7, ADR-0016): a command's events, any snapshot due and
the rows and positions of the inline read models reach the database in one transaction,
applied from the events in memory, never read back from the log.

Counted, not timed, with sqlite3's trace callback on the store's connections.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import (
    FakeClock,
    action_spec,
    claim,
    create_dynamic,
    create_linear,
    plan,
    refused,
    report,
    saves_writing_no_view,
)

from workcenter.adapters.recorders import OneCommitSQLiteRecorder
from workcenter.adapters.sql_counts import SqlCounts, sql_counts, traced
from workcenter.application import WorkCenter
from workcenter.bootstrap import EAGER_VIEWS, EventStore, compose
from workcenter.domain.errors import InvalidInput
from workcenter.projections import inline
from workcenter.projections.detail import Detail
from workcenter.projections.inline import InlineWrite
from workcenter.service_layer.repository import SNAPSHOT_INTERVAL

READ_BACK = "SELECT ROWID, * FROM STORED_EVENTS"


def counted(wc: WorkCenter, command: Callable[[], object]) -> SqlCounts:
    with traced(wc.store.factory.datastore) as counts:  # type: ignore[attr-defined]
        command()
    return counts


def write_transactions(counts: SqlCounts) -> list[list[str]]:
    """The statements of each transaction that committed."""
    found: list[list[str]] = []
    current: list[str] = []
    for sql in counts.statements:
        word = sql.lstrip().upper()
        if word.startswith("BEGIN"):
            current = []
        elif word.startswith("COMMIT"):
            found.append(current)
        else:
            current.append(sql)
    return found


def assert_one_commit(counts: SqlCounts, *, gap: bool = False) -> list[str]:
    """Exactly one transaction wrote; it held events and every eager view's position;
    nothing in it read the log back, unless a view was behind (``gap``): ledger-only
    saves leave the detail view for the next item or Action save (ADR-0019), which
    reads those few events first. Returns its statements."""
    assert counts.commits == 1, counts.statements
    assert counts.begins - counts.rollbacks == 1
    [statements] = write_transactions(counts)
    assert any(s.startswith("INSERT INTO stored_events") for s in statements)
    for name in EAGER_VIEWS:
        assert any(s.startswith("INSERT INTO tracking") and f"'{name}'" in s for s in statements)
    assert gap or not [s for s in statements if s.upper().startswith(READ_BACK)]
    return statements


def lags(wc: WorkCenter) -> dict[str, int]:
    return {s.name: s.lag for s in wc.maintenance.projection_status() if s.name in EAGER_VIEWS}


def dumps(wc: WorkCenter) -> dict[str, Any]:
    return {name: view.dump() for name, view in wc.projections.views.items()}  # type: ignore[attr-defined]


def assert_views_equal_a_rebuild(wc: WorkCenter) -> None:
    wc.projections.catch_up()  # the detail view is kept on read
    live = dumps(wc)
    wc.maintenance.rebuild_projection()
    assert dumps(wc) == live


# --- one commit per command ---------------------------------------------------------


def test_every_kind_of_command_commits_once(wc: WorkCenter, clock: FakeClock) -> None:
    item = create_dynamic(wc)
    assert_one_commit(counted(wc, lambda: create_dynamic(wc, title="another")))
    assert_one_commit(counted(wc, lambda: create_linear(wc, title="linear")))
    assert_one_commit(
        counted(
            wc,
            lambda: plan(wc, item.id, action_spec(objective="one"), action_spec(objective="two")),
        )
    )
    claims = []
    assert_one_commit(counted(wc, lambda: claims.append(claim(wc))))
    clock.advance(5)
    commands: dict[str, Callable[[], object]] = {
        "renew": lambda: wc.renew_lease(claims[0]),
        "finish": lambda: wc.finish_run(claims[0], report("completed")),
        "claim": lambda: claims.append(claim(wc)),
        "interrupt": lambda: wc.interrupt(claims[1], reason="stop"),
        "contract": lambda: wc.update_contract(
            item.id, expected_version=wc.work_item(item.id).version, title="renamed"
        ),
        "extend": lambda: wc.extend_budget(
            item.id, expected_version=wc.ledger(item.id).version, additions={"max_requests": 5}
        ),
        "reserve": lambda: wc.reserve_request(
            item.id, request={"max_tokens": 10}, kind="coordinator", request_id="r1"
        ),
        "settle": lambda: wc.settle_request(
            item.id, "r1", usage={"input_tokens": 3, "output_tokens": 2}
        ),
        "cancel": lambda: wc.cancel(item.id, reason="enough"),
    }
    for name, command in commands.items():
        before = wc.event_count()
        gap = wc.projections.position(Detail.name) < before
        assert_one_commit(counted(wc, command), gap=gap)
        assert wc.event_count() > before, name
    assert lags(wc) == dict.fromkeys(EAGER_VIEWS, 0)


def test_with_inline_projections_off_a_command_still_commits_once(db_path: Path) -> None:
    """Events, snapshots and the views claims and wakes read share the commit; the detail
    view is left to the runner (ADR-0116)."""
    with WorkCenter.open(db_path, inline_projections=False) as wc:
        counts = counted(wc, lambda: create_dynamic(wc))
        assert counts.commits == 1
        [statements] = write_transactions(counts)
        tracked = {
            name
            for name in wc.projections.views
            for s in statements
            if s.startswith("INSERT INTO tracking") and f"'{name}'" in s
        }
        assert tracked == {"work_queue", "mailbox"}
        assert not [s for s in statements if "dv_" in s]


def test_a_refused_command_commits_nothing(wc: WorkCenter) -> None:
    item = create_dynamic(wc)
    datastore = wc.store.factory.datastore  # type: ignore[attr-defined]
    with traced(datastore) as counts, refused(wc, InvalidInput):
        wc.plan_actions(item.id, expected_version=item.version, actions=[{}])
    assert counts.commits == 0


def test_a_due_snapshot_commits_with_the_events(wc: WorkCenter, clock: FakeClock) -> None:
    create_linear(wc, stages=("only",))
    claimed = claim(wc)
    while wc.action(claimed.action_id).version < SNAPSHOT_INTERVAL - 1:
        assert_one_commit(counted(wc, lambda: wc.renew_lease(claimed)))
    statements = assert_one_commit(counted(wc, lambda: wc.renew_lease(claimed)))
    assert any(s.startswith("INSERT INTO stored_snapshots") for s in statements)
    [snapshot] = wc.store.snapshots.get(claimed.action_id)  # type: ignore[union-attr]
    assert snapshot.originator_version == SNAPSHOT_INTERVAL


def test_a_failing_view_rolls_the_events_back(
    wc: WorkCenter, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Events and views commit together or not at all: no 'saved but not projected'."""
    item = create_dynamic(wc)

    def broken(*_: Any) -> None:
        raise RuntimeError("view broke")

    monkeypatch.setattr(wc.work_queue, "_apply_action", broken)
    before, views = wc.event_count(), dumps(wc)
    with pytest.raises(RuntimeError, match="view broke"):
        plan(wc, item.id)
    assert wc.event_count() == before
    assert dumps(wc) == views


def test_the_sql_counts_per_create_and_per_run_cycle() -> None:
    counts = sql_counts(n=5)
    assert counts["create"]["commits"] == 1
    assert counts["run_cycle"]["commits"] == 3  # claim, renew, finish
    assert counts["create"]["queries"] > 0


def test_the_store_refuses_a_recorder_that_would_drop_the_views(db_path: Path) -> None:
    plain = EventStore(
        env={"PERSISTENCE_MODULE": "eventsourcing.sqlite", "SQLITE_DBNAME": str(db_path)}
    )
    with pytest.raises(TypeError, match="OneCommitSQLiteRecorder"):
        compose(plain)
    plain.close()


# --- a lagging view -----------------------------------------------------------------


def writes_without_views(db_path: Path, clock: FakeClock, items: int) -> None:
    """Another writer on the same file whose saves write no view."""
    with saves_writing_no_view(), WorkCenter.open(db_path, clock=clock) as other:
        for i in range(items):
            plan(other, create_dynamic(other, title=f"unseen {i}").id)


def test_a_lagging_view_applies_the_gap_first_in_the_same_transaction(
    wc: WorkCenter, db_path: Path, clock: FakeClock
) -> None:
    create_dynamic(wc)
    writes_without_views(db_path, clock, items=2)
    assert all(lag > 0 for lag in lags(wc).values())
    counts = counted(wc, lambda: create_dynamic(wc))
    assert counts.commits == 1
    [statements] = write_transactions(counts)
    assert any(s.upper().startswith(READ_BACK) for s in statements)  # the gap, nothing else
    assert lags(wc) == dict.fromkeys(EAGER_VIEWS, 0)
    assert_views_equal_a_rebuild(wc)


def test_a_gap_longer_than_the_limit_is_caught_up_after_the_commit(
    wc: WorkCenter, db_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(inline, "GAP_LIMIT", 3)
    create_dynamic(wc)
    writes_without_views(db_path, clock, items=2)  # 2 x (4 + 2) events: more than 3
    counts = counted(wc, lambda: create_dynamic(wc))
    # The command's own commit left the views untouched; the catch-up committed after it.
    assert counts.commits == 2
    assert lags(wc) == dict.fromkeys(EAGER_VIEWS, 0)
    assert_views_equal_a_rebuild(wc)


def test_inline_and_view_less_writers_interleaved_never_skip_or_repeat_an_event(
    db_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two writers on one file at once, one without views: every inline save finds the
    gap the other left and applies it first, under the write lock, exactly once."""
    errors: list[BaseException] = []

    def write(inline_projections: bool, name: str) -> None:
        try:
            with WorkCenter.open(db_path, clock=clock, inline_projections=inline_projections) as w:
                for i in range(15):
                    plan(w, create_dynamic(w, title=f"{name} {i}").id)
        except BaseException as error:  # re-raised by the test thread below
            errors.append(error)

    threads = [
        threading.Thread(target=write, args=(True, "inline")),
        threading.Thread(target=write, args=(False, "view-less")),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    writes_without_views(db_path, clock, items=1)  # so the last save surely finds a gap
    gaps: list[tuple[int, int]] = []
    read_gap = OneCommitSQLiteRecorder._read_gap

    def spy(self: Any, c: Any, after: int, before: int, limit: int) -> Any:
        gaps.append((after, before))
        return read_gap(self, c, after, before, limit)

    monkeypatch.setattr(OneCommitSQLiteRecorder, "_read_gap", spy)
    with WorkCenter.open(db_path, clock=clock, inline_projections=False) as wc:
        wc.inline_projections = True
        create_dynamic(wc)  # applies whatever the view-less writer left, then its own
        assert gaps
        assert lags(wc) == dict.fromkeys(EAGER_VIEWS, 0)
        assert wc.projections.catch_up(names=EAGER_VIEWS) == 0
        assert_views_equal_a_rebuild(wc)


class FakeView:
    def __init__(self, position: int) -> None:
        self.position = position
        self.applied: list[tuple[list[int], int]] = []

    def position_within(self, c: Any, application_name: str) -> int:
        return self.position

    def apply_within(self, c: Any, application_name: str, batch: Any, position: int) -> int:
        self.applied.append(([n for n, _ in batch], position))
        return len(batch)


class Gap:
    def __init__(self, id: int) -> None:
        self.id = id


class Mapper:
    def to_domain_event(self, notification: Gap) -> str:
        return f"event {notification.id}"


def test_the_lagging_view_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    """Current: the command's events. Behind: the gap, then them. Too far behind:
    untouched and named. Ahead: given them, the view skips what it has."""
    monkeypatch.setattr(inline, "GAP_LIMIT", 4)
    views = {
        "current": FakeView(9),
        "behind": FakeView(7),
        "far": FakeView(1),
        "ahead": FakeView(10),
    }
    reads: list[tuple[int, int, int]] = []

    def read_gap(c: Any, after: int, before: int, limit: int) -> list[Gap]:
        reads.append((after, before, limit))
        return [Gap(n) for n in range(after + 1, before)][:limit]

    write = InlineWrite(["a", "b"], views, Mapper())  # type: ignore[arg-type]
    write.apply(None, [10, 11], read_gap)
    assert views["current"].applied == [([10, 11], 9)]
    assert views["behind"].applied == [([8, 9, 10, 11], 7)]
    assert views["far"].applied == []
    assert views["ahead"].applied == [([10, 11], 10)]
    assert reads == [(7, 10, 5), (1, 10, 5)]  # only lagging views read, at most the limit + 1
    assert write.left_behind == ["far"]
