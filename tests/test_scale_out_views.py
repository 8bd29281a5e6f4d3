"""ADR-0116: writers with inline projections off still write the views their readers
catch up anyway (the work queue, the mailbox); the detail view is the runner's, which
gathers the notifications of a short time into one page."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import postgres
import pytest
from conftest import BACKENDS, FakeClock, claim, create_dynamic, create_linear, report

from workcenter.application import WorkCenter
from workcenter.projections import runner as runner_module
from workcenter.projections.inline import InlineProjections
from workcenter.projections.runner import ProjectionRunner
from workcenter.service_layer import repository


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    if request.param == "postgresql":
        postgres.require_server()
    return str(request.param)


@pytest.fixture
def writer(location: str, clock: FakeClock) -> Iterator[WorkCenter]:
    with WorkCenter.open(location, clock=clock, inline_projections=False) as center:
        yield center


def lags(wc: WorkCenter) -> dict[str, int]:
    return {s.name: s.lag for s in wc.maintenance.projection_status()}


@pytest.fixture
def catch_ups(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The events each catch-up from the log applied (a claim's, a runner's)."""
    applied: list[int] = []
    catch_up = InlineProjections.catch_up

    def spy(self: InlineProjections, *args: Any, **kwargs: Any) -> int:
        done = catch_up(self, *args, **kwargs)
        applied.append(done)
        return done

    monkeypatch.setattr(InlineProjections, "catch_up", spy)
    return applied


def test_a_run_cycle_leaves_only_the_detail_view_to_the_runner(
    writer: WorkCenter, clock: FakeClock, catch_ups: list[int]
) -> None:
    item = create_linear(writer, stages=("implement",))
    claimed = claim(writer)
    assert writer.renew_lease(claimed)
    clock.advance(1)
    writer.finish_run(claimed, report("completed"))
    head = writer.event_count()
    assert lags(writer) == {"work_queue": 0, "mailbox": 0, "detail": head}
    # The claim found the work queue at the head: nothing was applied from the log.
    assert sum(catch_ups) == 0
    assert ProjectionRunner(writer).run_once() == head  # the detail view's events only
    assert writer.detail(item.id)["status"] == "done"
    assert lags(writer) == dict.fromkeys(lags(writer), 0)
    live = {name: view.dump() for name, view in writer.projections.views.items()}  # type: ignore[attr-defined]
    writer.maintenance.rebuild_projection()
    assert {name: view.dump() for name, view in writer.projections.views.items()} == live  # type: ignore[attr-defined]


def test_writers_with_and_without_inline_projections_share_the_views(
    writer: WorkCenter, location: str, clock: FakeClock
) -> None:
    with WorkCenter.open(location, clock=clock, create=False) as inline:
        first = create_dynamic(inline, title="inline")
        create_dynamic(writer, title="not inline")
        # The inline writer's next save applies the detail view's gap before its own.
        inline.post_user_message(first.id, "go on")
        assert lags(inline) == dict.fromkeys(lags(inline), 0)
        titles = {row["title"] for row in inline.list_work_items()}
        assert titles == {"inline", "not inline"}


def test_the_runner_writes_the_notifications_gathered_in_one_page(
    monkeypatch: pytest.MonkeyPatch, clock: FakeClock
) -> None:
    postgres.require_server()
    pages: list[int] = []
    apply = InlineProjections._apply_page

    def spy(self: InlineProjections, views: Any, page: Any, positions: Any) -> Any:
        pages.append(len(page))
        return apply(self, views, page, positions)

    monkeypatch.setattr(InlineProjections, "_apply_page", spy)
    for gather in (0.0, 2.0):
        pages.clear()
        monkeypatch.setattr(runner_module, "GATHER", gather)
        with (
            postgres.fresh_schema() as url,
            WorkCenter.open(url, clock=clock, inline_projections=False) as wc,
            ProjectionRunner(wc, poll=0.05) as follower,
        ):
            time.sleep(0.3)  # following: the backlog is read, the runner listens
            for i in range(3):
                create_dynamic(wc, title=f"item {i}")
                time.sleep(0.2)  # each write's notification arrives alone
            follower.wait(wc.event_count(), timeout=20)
            # Without gathering, a page per write.
            assert len(pages) == 3 if not gather else len(pages) == 1, (gather, pages)


def test_a_runner_leaves_alone_the_views_the_writers_keep(clock: FakeClock) -> None:
    """It neither waits for nor holds the work queue's lock: with it, every write would wait
    in the table's lock while the runner builds detail DTOs."""
    postgres.require_server()
    with (
        postgres.fresh_schema() as url,
        WorkCenter.open(url, clock=clock, inline_projections=False) as wc,
    ):
        create_dynamic(wc)
        schema = wc.store.factory.datastore.schema  # type: ignore[attr-defined]
        applied: list[int] = []
        with postgres.connect() as holder:
            holder.execute(
                "SELECT pg_advisory_lock(hashtext(%s))", (f"workcenter:{schema}:work_queue",)
            )
            follower = threading.Thread(
                target=lambda: applied.append(ProjectionRunner(wc).run_once())
            )
            follower.start()
            follower.join(5)
            waited = follower.is_alive()
            holder.execute("SELECT pg_advisory_unlock_all()")
            follower.join()
        assert not waited, "the runner waited for the work queue's lock"
        assert applied == [wc.event_count()]  # the detail view's, none of the others'
        assert lags(wc) == dict.fromkeys(lags(wc), 0)


def test_a_page_reads_the_states_of_its_items_together(
    writer: WorkCenter, location: str, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A runner that has seen none of a page's items reads their states in a few statements
    whatever their number (it read two per stream, one stream after another), and the
    DTOs it stores are those of a rebuild."""
    monkeypatch.setattr(repository, "SNAPSHOT_INTERVAL", 2)  # snapshots to start from too
    for i in range(12):
        create_linear(writer, title=f"item {i}", stages=("implement",))
    while (claimed := writer.claim_next("w1")) is not None:
        writer.renew_lease(claimed)
        writer.finish_run(claimed, report("completed"))
    reads: list[str] = []
    with WorkCenter.open(location, clock=clock, inline_projections=False) as fresh:
        views = fresh.projections.views
        states = views["detail"].source  # type: ignore[attr-defined]
        for name in ("versions", "states", "state"):
            monkeypatch.setattr(states, name, counted(getattr(states, name), name, reads))
        assert ProjectionRunner(fresh).run_once() > 0
        assert reads.count("state") == 0 and len(reads) <= 6, reads
        live = {name: view.dump() for name, view in views.items()}  # type: ignore[attr-defined]
        fresh.maintenance.rebuild_projection()
        assert {name: view.dump() for name, view in views.items()} == live  # type: ignore[attr-defined]


def counted(read: Any, name: str, reads: list[str]) -> Any:
    def spy(*args: Any, **kwargs: Any) -> Any:
        if name != "states" or len(args[0]) > 1:  # a single stream is read alone
            reads.append(name)
        return read(*args, **kwargs)

    return spy
