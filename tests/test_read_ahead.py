"""What a PostgreSQL write reads with its insert, and loads from nothing (ADR-0069).

The detail view builds an item's DTO from streams the command did not write (its other
Actions, its ledger, its conversation) and, when it lags, from the events it missed.
A pipelined write reads both with its insert, under the table lock, instead of one
exchange after another while holding it, and builds the DTO before taking the lock,
kept only if that read finds nothing newer; a stream loaded from nothing starts at
its newest snapshot, on both databases. Whatever path a DTO took, the views must
equal a rebuild.
"""

from __future__ import annotations

from typing import Any

import postgres
import pytest
from conftest import BACKENDS, FakeClock, create_linear, report, saves_writing_no_view

from workcenter.adapters.postgres_recorder import OneCommitPostgresRecorder
from workcenter.application import WorkCenter
from workcenter.bootstrap import EAGER_VIEWS
from workcenter.projections import inline
from workcenter.projections.detail import DetailView
from workcenter.service_layer.repository import SNAPSHOT_INTERVAL


@pytest.fixture
def backend() -> str:
    postgres.require_server()
    return "postgresql"


def lags(wc: WorkCenter) -> dict[str, int]:
    return {s.name: s.lag for s in wc.maintenance.projection_status() if s.name in EAGER_VIEWS}


def assert_views_equal_a_rebuild(wc: WorkCenter) -> None:
    wc.projections.catch_up()
    live = {name: view.dump() for name, view in wc.projections.views.items()}  # type: ignore[attr-defined]
    wc.maintenance.rebuild_projection()
    assert {name: view.dump() for name, view in wc.projections.views.items()} == live  # type: ignore[attr-defined]


@pytest.fixture
def gap_reads(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """The gaps read the old way: in an exchange of their own, under the lock."""
    reads: list[tuple[int, int]] = []
    read_gap = OneCommitPostgresRecorder._read_gap

    def spy(self: Any, c: Any, after: int, before: int, limit: int) -> Any:
        reads.append((after, before))
        return read_gap(self, c, after, before, limit)

    monkeypatch.setattr(OneCommitPostgresRecorder, "_read_gap", spy)
    return reads


def writes_without_views(location: str, clock: FakeClock, items: int) -> None:
    with saves_writing_no_view(), WorkCenter.open(location, clock=clock) as other:
        for i in range(items):
            create_linear(other, title=f"unseen {i}", stages=("implement",))


def test_a_lagging_view_takes_its_gap_from_the_read_with_the_insert(
    wc: WorkCenter, location: str, clock: FakeClock, gap_reads: list[tuple[int, int]]
) -> None:
    create_linear(wc, stages=("implement",))
    writes_without_views(location, clock, items=2)
    assert all(lag > 0 for lag in lags(wc).values())
    create_linear(wc, stages=("implement",))
    assert gap_reads == []
    assert lags(wc) == dict.fromkeys(EAGER_VIEWS, 0)
    assert_views_equal_a_rebuild(wc)


def test_a_gap_longer_than_the_limit_is_still_caught_up_after_the_commit(
    wc: WorkCenter,
    location: str,
    clock: FakeClock,
    monkeypatch: pytest.MonkeyPatch,
    gap_reads: list[tuple[int, int]],
) -> None:
    monkeypatch.setattr(inline, "GAP_LIMIT", 3)
    create_linear(wc, stages=("implement",))
    writes_without_views(location, clock, items=2)  # more than 3 events
    create_linear(wc, stages=("implement",))
    assert gap_reads  # the read ahead was too long: each view tried its own, then gave up
    assert lags(wc) == dict.fromkeys(EAGER_VIEWS, 0)
    assert_views_equal_a_rebuild(wc)


def test_run_cycles_by_workers_that_never_saw_the_items_leave_the_views_as_a_rebuild(
    wc: WorkCenter, location: str, clock: FakeClock, gap_reads: list[tuple[int, int]]
) -> None:
    """Renewals and ledger writes leave the detail view behind; each finish reads the gap
    and the ledger's newest state with its insert, and a cold claim loads its streams in
    two statements."""
    items = [create_linear(wc, stages=("implement",)) for _ in range(4)]
    for _ in items:
        with WorkCenter.open(location, clock=clock, create=False) as worker:
            claimed = worker.claim_next("cold-worker")
            assert claimed is not None
            worker.renew_lease(claimed)
            admission = worker.reserve_request(
                claimed.work_item_id,
                request={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 64},
                run_id=claimed.run_id,
            )
            assert admission.allowed
            worker.settle_request(
                claimed.work_item_id, admission.request_id, usage={"input_tokens": 9}
            )
            worker.renew_lease(claimed)
            worker.finish_run(claimed, report())
    assert gap_reads == []
    for item in items:
        detail = wc.detail(item.id)
        assert detail is not None and detail["status"] == "done"
    assert_views_equal_a_rebuild(wc)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_stream_loaded_from_nothing_starts_at_its_newest_snapshot(
    backend: str, wc: WorkCenter, location: str, clock: FakeClock
) -> None:
    if backend == "postgresql":
        postgres.require_server()
    item = create_linear(wc, stages=("implement",))
    claimed = wc.claim_next("worker-1")
    assert claimed is not None
    for _ in range(SNAPSHOT_INTERVAL + 3):
        assert wc.renew_lease(claimed)
    with WorkCenter.open(location, clock=clock, create=False) as cold:
        [read] = cold.store.recorder.select_streams_after([(claimed.action_id, 0)])  # type: ignore[attr-defined]
        assert "Snapshot" in read[0].topic
        assert [e.originator_version for e in read[1:]] == list(
            range(read[0].originator_version + 1, read[-1].originator_version + 1)
        )
        action = cold._repository.run_states(claimed.action_id, with_ledger=True)[0]  # type: ignore[attr-defined]
        assert action == wc._repository.action(claimed.action_id)  # type: ignore[attr-defined]
        cold.finish_run(claimed, report())
    assert wc.detail(item.id)["status"] == "done"  # type: ignore[index]
    assert_views_equal_a_rebuild(wc)


@pytest.fixture
def builds_under_the_lock(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The detail DTOs built inside a write's transaction (given its cursor), not before."""
    built: list[Any] = []
    build = DetailView._build

    def spy(self: DetailView, item_id: Any, at: Any, working: Any, c: Any, *rest: Any) -> Any:
        if c is not None:
            built.append(item_id)
        return build(self, item_id, at, working, c, *rest)

    monkeypatch.setattr(DetailView, "_build", spy)
    return built


def test_a_run_cycle_builds_its_dtos_before_the_lock(
    wc: WorkCenter, builds_under_the_lock: list[Any]
) -> None:
    item = create_linear(wc, stages=("implement",))
    claimed = wc.claim_next("worker-1")
    assert claimed is not None
    wc.renew_lease(claimed)  # leaves the detail view behind: the finish has a gap
    wc.finish_run(claimed, report())
    assert builds_under_the_lock == []
    assert wc.detail(item.id)["status"] == "done"  # type: ignore[index]
    assert_views_equal_a_rebuild(wc)


def test_a_state_held_that_was_never_committed_is_read_again_under_the_lock(
    wc: WorkCenter, clock: FakeClock, builds_under_the_lock: list[Any]
) -> None:
    """A view remembers states inside a write that may then fail; one held at a version
    the store does not have is not trusted: the DTO is built from the store's."""
    item = create_linear(wc, stages=("implement",))
    clock.advance(1)  # else the item's DTO is built on read, by no write (ADR-0073)
    claimed = wc.claim_next("worker-1")
    assert claimed is not None
    view = wc.projections.views["detail"]  # type: ignore[attr-defined]
    ledger = wc._repository.ledger(item.id)  # type: ignore[attr-defined]
    view._cache[ledger.id] = ledger.model_copy(update={"version": ledger.version + 5})
    wc.finish_run(claimed, report())
    assert builds_under_the_lock == [item.id]
    assert_views_equal_a_rebuild(wc)
