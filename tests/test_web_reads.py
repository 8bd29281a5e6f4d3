"""The service side of the HTTP API: a browser's reads (``wc.web_reads``), the Runs
timeline's bounds, and ``cancel`` fenced by the version its caller saw."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import refused

from workcenter.adapters.executors import echo
from workcenter.adapters.worker import run_worker
from workcenter.application import WorkCenter
from workcenter.domain.errors import InvalidInput, NotFound, VersionConflict
from workcenter.projections import timeline

LINEAR: dict[str, Any] = {
    "title": "t",
    "goal": "g",
    "acceptance_criteria": ["c"],
    "delivery_target": "response",
    "mode": "linear",
    "stages": ["implement"],
}


@pytest.fixture
def wc(db_path: Path) -> Iterator[WorkCenter]:
    with WorkCenter.open(db_path) as center:
        yield center


def test_summaries_page_newest_first_by_cursor(wc: WorkCenter) -> None:
    ids = [wc.create_work_item(**LINEAR | {"title": f"t{n}"}).id for n in range(5)]
    wc.start(ids[1])
    first = wc.web_reads.summaries(None, 2)
    assert (first.total, first.limit) == (5, 2) and first.next is not None
    assert [row["id"] for row in first.items] == [str(i) for i in ids[4:2:-1]]
    second = wc.web_reads.summaries(None, 2, first.next)
    assert [row["id"] for row in second.items] == [str(i) for i in ids[2:0:-1]]
    last = wc.web_reads.summaries(None, 2, second.next)
    assert [row["id"] for row in last.items] == [str(ids[0])] and last.next is None
    ready = wc.web_reads.summaries("ready", 100)
    assert (ready.total, [row["id"] for row in ready.items]) == (1, [str(ids[1])])
    assert ready.items[0]["goalProgress"]["totalCriteriaCount"] == 1
    found = wc.web_reads.summaries(None, 10, search="T3")
    assert [row["id"] for row in found.items] == [str(ids[3])]
    for status, limit, after in (
        ("bogus", 10, None),
        (None, 0, None),
        (None, 101, None),
        (None, 1, "12"),
        (None, 1, "0x1p+0~zz"),
    ):
        with refused(wc, InvalidInput):
            wc.web_reads.summaries(status, limit, after)
    with refused(wc, InvalidInput):
        wc.web_reads.summaries(None, 10, search="x" * 201)


def test_a_search_reads_goals_from_the_detail_view_not_each_item(
    wc: WorkCenter, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A search whose needle is not in a row's title looks in its goal as the page shows
    it (masked): read from the detail view, a batch at a time. Each such item was loaded
    from its events, 12 s a search at 10,000 items (found by acceptance testing,
    ADR-0138); only an item the view holds no DTO of is (not yet, or a marker)."""
    ids = [
        wc.create_work_item(**LINEAR | {"title": f"t{n}", "goal": f"goal {n}"}).id
        for n in range(30)
    ]
    secret = wc.create_work_item(**LINEAR | {"goal": "use password=hunter2 please"}).id
    for item in (*ids, secret):
        wc.start(item)  # a created item's row is a marker, whose DTO a read builds
    loaded: list[Any] = []
    work_item = wc.web_reads.repo.work_item

    def counted(work_item_id: Any) -> Any:
        loaded.append(work_item_id)
        return work_item(work_item_id)

    monkeypatch.setattr(wc.web_reads.repo, "work_item", counted)
    found = wc.web_reads.summaries(None, 10, search="GOAL 17")
    assert [row["id"] for row in found.items] == [str(ids[17])]
    assert loaded == [ids[17]]  # its summary's, none for the search
    assert wc.web_reads.summaries(None, 10, search="hunter2").items == []  # masked
    assert [r["id"] for r in wc.web_reads.summaries(None, 10, search="password").items] == [
        str(secret)
    ]


def test_a_search_finds_by_goal_items_the_detail_view_does_not_hold_yet(
    tmp_path: Path,
) -> None:
    """Writers with inline projections off leave the detail view to a runner: an item it
    has not reached is searched in its goal all the same."""
    with WorkCenter.open(tmp_path / "s.db", inline_projections=False) as writer:
        ids = [writer.create_work_item(**LINEAR | {"goal": f"goal {n}"}).id for n in range(3)]
        found = writer.web_reads.summaries(None, 10, search="goal 1")
        assert [row["id"] for row in found.items] == [str(ids[1])]


def test_a_rows_coordinator_revision_is_the_details(wc: WorkCenter) -> None:
    """ADR-0136: list rows carried ``coordinatorRevision`` 0 whatever the Conversation's
    version, where the item's detail carries it."""
    item = wc.create_work_item(
        title="t", goal="g", acceptance_criteria=["c"], delivery_target="response"
    )
    wc.start(item.id)
    wc.post_user_message(item.id, "please look at the logs first")
    revision = wc.detail(item.id)["coordinatorRevision"]
    assert revision > 0
    (row,) = wc.web_reads.summaries(None, 10).items
    assert row["coordinatorRevision"] == revision


def test_item_reads_name_the_versions_they_show(wc: WorkCenter) -> None:
    item = wc.create_work_item(**LINEAR, start=True)
    run_worker(wc, echo, worker="w1", exit_when_idle=True, poll_seconds=0.01)
    item = wc.work_item(item.id)
    control = wc.ledger(item.id).control_version
    assert wc.web_reads.versions(item.id) == (item.version, control)
    for read in (wc.web_reads.progress, wc.web_reads.budget, wc.web_reads.timeline):
        body = read(item.id)
        assert (body["itemVersion"], body["controlVersion"]) == (item.version, control)
    progress = wc.web_reads.progress(item.id)["goalProgress"]
    assert progress["criteria"][0]["status"] == "passed"
    with refused(wc, NotFound):
        wc.web_reads.budget("not an id")  # type: ignore[arg-type]


def test_the_timeline_keeps_the_newest_runs_and_counts_the_rest(
    wc: WorkCenter, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(timeline, "MAX_RUNS", 1)
    item = wc.create_work_item(**LINEAR, start=True)
    claim = wc.claim_next("w1")
    assert claim is not None
    wc.interrupt(claim, reason="again")
    run_worker(wc, echo, worker="w1", exit_when_idle=True, poll_seconds=0.01)
    (action,) = wc.web_reads.timeline(item.id)["actions"]
    assert action["omittedRunCount"] == 1
    (run,) = action["runs"]
    assert run["status"] == "completed" and run["ordinal"] == 2


def test_cancel_with_the_version_seen_refuses_after_a_lifecycle_change(wc: WorkCenter) -> None:
    item = wc.create_work_item(**LINEAR)
    started = wc.start(item.id)
    # Starting is no contract or lifecycle conflict for a cancel: the version seen may lag.
    wc.cancel(item.id, expected_version=item.version)
    resumed = wc.resume(
        item.id,
        expected_version=wc.work_item(item.id).version,
        expected_ledger_version=wc.ledger(item.id).control_version,
    )
    assert resumed.version > started.version
    with refused(wc, VersionConflict):
        wc.cancel(item.id, expected_version=started.version)  # a cancel and a resume since
    with refused(wc, InvalidInput):
        wc.cancel(item.id, expected_version="3")  # type: ignore[arg-type]
