"""ADR-0043: a command's save hands the detail view the states it computed after its
own events, and the view takes them instead of folding the events onto the states
before them. The DTO bytes are the fold's, a gap the view missed is folded before the
states are taken, a stale state falls back to the fold, and a save that rolls back
leaves the view nothing of the versions it never committed."""

from __future__ import annotations

import os
import tempfile
from contextlib import suppress
from typing import Any
from unittest import mock

import pytest
from conftest import (
    BACKENDS,
    BOOT_ID,
    SHM,
    FakeClock,
    action_spec,
    claim,
    create_dynamic,
    create_linear,
    plan,
    report,
)
from eventsourcing.sqlite import SQLiteDatastore
from hypothesis import HealthCheck, given, settings
from test_projections import Scenario, fresh_center, programs

from workcenter.application import WorkCenter
from workcenter.domain import action as act
from workcenter.domain.errors import WorkcenterError
from workcenter.projections import detail, detail_states, inline
from workcenter.projections.detail import Detail


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


# --- the view takes the command's states -----------------------------------------


def test_a_save_folds_none_of_its_own_events_in_the_detail_view(
    wc: WorkCenter, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Creates, claims and finishes: every aggregate the command changed comes with its
    state after the command, so the view evolves nothing; the DTO is a rebuild's."""
    item = create_dynamic(wc)
    clock.advance(1)  # the plan's DTO is stored, not left to a read (ADR-0073)
    plan(wc, item.id, action_spec(objective="one"), action_spec(objective="two"))

    def folded(*_: Any) -> None:
        raise AssertionError("the view folded an event the command had the state after")

    monkeypatch.setattr(detail, "EVOLVE", dict.fromkeys(detail.EVOLVE, folded))
    monkeypatch.setattr(detail_states, "EVOLVE", dict.fromkeys(detail_states.EVOLVE, folded))
    other = create_linear(wc, stages=("implement",))
    # Time passes before the claim: at the creation time its DTO would be left to a
    # read (ADR-0073), and the finish would load the streams the claim did not.
    clock.advance(1)
    claimed = claim(wc, lease_seconds=60)
    clock.advance(5)
    wc.finish_run(claimed, report())
    monkeypatch.undo()
    live = wc.details.dump()
    wc.maintenance.rebuild_projection(Detail.name)
    assert wc.details.dump() == live
    assert {wc.detail(item.id)["id"], wc.detail(other.id)["id"]} == {str(item.id), str(other.id)}


def test_only_states_at_their_aggregates_last_version_in_the_batch_are_taken(
    wc: WorkCenter,
) -> None:
    item = create_dynamic(wc)
    planned = plan(wc, item.id, action_spec(objective="one"))
    action = wc.action(planned.plan[0].action_id)
    ledger = wc.ledger(item.id)
    batch = [
        (1, wc._repository.events(item.id)[-2]),
        (2, wc._repository.events(item.id)[-1]),
        (3, wc._repository.events(action.id)[-1]),
    ]
    states = {item.id: planned, action.id: action, ledger.id: ledger}
    assert detail._after_batch(batch, states) == {item.id: planned, action.id: action}
    stale = {item.id: wc._repository.work_item(item.id, planned.version - 1)}
    assert detail._after_batch(batch, stale) == {}


def test_a_lagging_view_folds_the_gap_then_takes_the_commands_states(
    wc: WorkCenter, location: str, clock: FakeClock
) -> None:
    """A renewal by a process that keeps no views leaves the view behind, so the finish's
    batch starts with the renewal the view missed: it is folded, and the finish's own
    states are taken after it."""
    # The two-exchange write's fold: the one-exchange write on PostgreSQL builds from
    # the states held instead, and is tested in tests/test_one_exchange.py (ADR-0070).
    if hasattr(wc.store.recorder, "one_exchange"):
        wc.store.recorder.one_exchange = False
    item = create_dynamic(wc)
    plan(wc, item.id, action_spec(objective="one"))
    claimed = claim(wc, lease_seconds=60)
    with WorkCenter.open(
        location, clock=clock, boot_id=BOOT_ID, inline_projections=False, create=False
    ) as viewless:
        viewless.renew_lease(claimed)  # the next save has a gap first
    # This process reads the Action the renewal moved on: its finish is then decided on
    # current states at once (ADR-0078), not first on the ones before the renewal.
    wc.action(claimed.action_id)
    clock.advance(5)
    seen: list[tuple[type[Any], set[Any]]] = []
    after_batch = detail._after_batch

    def recorded(batch: Any, states: Any) -> Any:
        found = after_batch(batch, states)
        seen.append((type(batch[0][1]), set(found)))
        return found

    with mock.patch.object(detail, "_after_batch", recorded):
        wc.finish_run(claimed, report())
    # On PostgreSQL the write also builds the DTO before its lock from the same states
    # (ADR-0069): the batch in the transaction is the last one seen.
    assert len(seen) in (1, 2)
    first, taken = seen[-1]
    assert first is act.LeaseRenewed  # the renewal the view missed came first
    assert {claimed.action_id, item.id} <= taken
    live = wc.details.dump()
    wc.maintenance.rebuild_projection(Detail.name)
    assert wc.details.dump() == live


# --- a rolled-back save poisons nothing -------------------------------------------


def test_a_save_rolled_back_after_the_view_took_its_states_leaves_no_trace_in_the_view(
    db_path: Any, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The view took the finish's states, then the transaction rolled back. Another
    writer commits a different finish at the very same versions; this process's next
    save of the item must show that one, not the states of the finish that never was."""
    wc = WorkCenter.open(db_path, clock=clock, boot_id=BOOT_ID)
    other = WorkCenter.open(db_path, clock=clock, boot_id="other-boot")
    try:
        item = create_dynamic(wc)
        plan(wc, item.id, action_spec(objective="one"))
        claimed = claim(wc, lease_seconds=60)
        clock.advance(1)

        def commit_failed(*_: Any, **__: Any) -> None:
            raise RuntimeError("the commit failed")

        # After the view wrote its rows (and took the states), before the commit.
        monkeypatch.setattr(inline, "write_positions", commit_failed)
        with pytest.raises(RuntimeError, match="the commit failed"):
            wc.finish_run(claimed, report(summary="the finish that never was"))
        monkeypatch.undo()
        assert claimed.action_id not in wc.details._cache
        other.finish_run(claimed, report(summary="the finish that was"))
        clock.advance(1)
        current = wc.work_item(item.id)  # an item-only save: the Action's state is the view's
        wc.update_contract(item.id, expected_version=current.version, title="retitled")
        [run] = [a for a in wc.detail(item.id)["actions"] if a["id"] == str(claimed.action_id)]
        assert "the finish that was" in str(run)
        assert "the finish that never was" not in str(wc.detail(item.id))
        live = wc.details.dump()
        wc.maintenance.rebuild_projection(Detail.name)
        assert wc.details.dump() == live
    finally:
        other.close()
        wc.close()


# --- the property: the states give the fold's bytes --------------------------------


class FoldOnly:
    """A second detail view on its own file, given no states: every event folded, as a
    rebuild does. It follows the live view's position, so both hold the same rows."""

    def __init__(self, wc: WorkCenter, path: str) -> None:
        self.wc = wc
        self.view = wc.details.shadow(SQLiteDatastore(path))
        self.view.create_table()

    def catch_up(self) -> None:
        head = self.wc.projections.position(Detail.name)
        start = self.view.max_tracking_id(Detail.name) or 0
        if head <= start:
            return
        page = self.wc.store.recorder.select_notifications(
            start=start, limit=head - start, stop=head, inclusive_of_start=False
        )
        batch = [(n.id, self.wc.store.mapper.to_domain_event(n)) for n in page]
        self.view.apply(Detail.name, batch)


@settings(
    max_examples=12,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(programs)
def test_a_save_with_the_commands_states_stores_the_bytes_of_the_fold(
    program: list[tuple[str, int]],
) -> None:
    base = str(SHM) if SHM.is_dir() and os.access(SHM, os.W_OK) else None
    taken: list[int] = []
    after_batch = detail._after_batch

    def counted(*args: Any) -> Any:
        found = after_batch(*args)
        taken.append(len(found))
        return found

    with (
        fresh_center() as (wc, clock, _),
        tempfile.TemporaryDirectory(dir=base) as directory,
        mock.patch.object(detail, "_after_batch", counted),
    ):
        fold = FoldOnly(wc, os.path.join(directory, "fold.db"))
        scenario = Scenario(wc, clock)
        for op, k in program:
            with suppress(WorkcenterError):
                scenario.run(op, k)
            fold.catch_up()
            assert wc.details.dump() == fold.view.dump()  # byte for byte, after every step
        assert sum(taken) > 0  # the states were taken, not only handed over


def test_a_claim_takes_the_states_of_the_action_and_the_item(wc: WorkCenter) -> None:
    item = create_dynamic(wc)
    plan(wc, item.id, action_spec(objective="one"))
    seen: list[set[Any]] = []
    after_batch = detail._after_batch

    def recorded(*args: Any) -> Any:
        found = after_batch(*args)
        seen.append(set(found))
        return found

    with mock.patch.object(detail, "_after_batch", recorded):
        claimed = claim(wc, lease_seconds=60)
    # Once in the transaction, and on PostgreSQL once more before the lock (ADR-0069).
    assert seen and all(taken == {claimed.action_id, item.id} for taken in seen)
    assert isinstance(wc.details._cache[claimed.action_id], act.ActionState)
