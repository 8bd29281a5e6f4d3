"""Event schema evolution (ADR-0010): ``LeaseRenewed`` v1 events stored before
``lease_seconds`` existed load through the real mapper and repository upcast to v2."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import orjson
from conftest import BOOT_ID, FakeClock, claim, create_dynamic, create_linear, plan, report
from eventsourcing.persistence import StoredEvent
from eventsourcing.utils import get_topic

from workcenter.adapters.compression import inflate
from workcenter.application import WorkCenter
from workcenter.domain import action as act
from workcenter.domain import work_item as wi


def _v1_renewal(
    wc: WorkCenter, action: act.ActionState, run_id: Any, seconds: float
) -> StoredEvent:
    """A LeaseRenewed exactly as the v1 code stored it: no class_version, no lease_seconds."""
    at = wc.clock.now()
    state = {
        "originator_id": str(action.id),
        "originator_version": action.version + 1,
        "timestamp": at.isoformat().replace("+00:00", "Z"),
        "run_id": str(run_id),
        "expires_at": (at + timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z"),
    }
    return StoredEvent(
        originator_id=action.id,
        originator_version=action.version + 1,
        topic=get_topic(act.LeaseRenewed),
        state=orjson.dumps(state),
    )


def test_a_v1_lease_renewal_is_upcast_when_loaded(
    wc: WorkCenter, db_path: Path, clock: FakeClock
) -> None:
    item = plan(wc, create_dynamic(wc).id)
    claimed = claim(wc, lease_seconds=60)
    clock.advance(20)
    before = wc.action(claimed.action_id)
    stored = _v1_renewal(wc, before, claimed.run_id, 45)
    wc.store.recorder.insert_events([stored])

    # Through the mapper alone ...
    event = wc.store.mapper.to_domain_event(stored)
    assert isinstance(event, act.LeaseRenewed)
    assert event.lease_seconds == 45.0
    assert event.expires_at == clock.now() + timedelta(seconds=45)

    # ... through the repository of this service (cached state fast-forwarded) ...
    renewed = wc.action(claimed.action_id)
    assert renewed.version == before.version + 1
    run = renewed.run(claimed.run_id)
    assert run is not None and run.expires_at == clock.now() + timedelta(seconds=45)
    last = wc.action_history(claimed.action_id)[-1]
    assert isinstance(last, act.LeaseRenewed) and last.lease_seconds == 45.0

    # ... and from a fresh process, with the read models catching up on it.
    fresh = WorkCenter.open(db_path, clock=clock, boot_id=BOOT_ID)
    try:
        assert fresh.action(claimed.action_id) == renewed
        (row,) = fresh.audit(item.id, type="LeaseRenewed")
        assert row.payload["lease_seconds"] == 45.0
        # Stored before actors were recorded: the unknown actor, not a guess from the claim.
        assert (row.actor, row.actor_id, row.worker) == ("unknown", "legacy", None)
        (live,) = fresh.work_queue.live_runs()
        assert live[4] == (clock.now() + timedelta(seconds=45)).timestamp()
        # The upcast Run is still live and can be renewed in the v2 shape.
        assert fresh.renew_lease(claimed.ref, lease_seconds=30)
    finally:
        fresh.close()


def test_v2_renewals_are_stored_with_their_version_and_not_upcast_again(
    wc: WorkCenter, clock: FakeClock
) -> None:
    plan(wc, create_dynamic(wc).id)
    claimed = claim(wc)
    clock.advance(5)
    assert wc.renew_lease(claimed, lease_seconds=90)
    (stored,) = wc.store.recorder.select_events(claimed.action_id, desc=True, limit=1)
    state = orjson.loads(inflate(stored.state))
    assert (state["class_version"], state["lease_seconds"]) == (2, 90.0)
    # Were the upcaster run on it, the value would be recomputed from the timestamps.
    state["expires_at"] = (clock.now() + timedelta(seconds=1)).isoformat()
    event = wc.store.mapper.to_domain_event(
        StoredEvent(
            originator_id=stored.originator_id,
            originator_version=stored.originator_version,
            topic=stored.topic,
            state=orjson.dumps(state),
        )
    )
    assert isinstance(event, act.LeaseRenewed) and event.lease_seconds == 90.0


# --- ADR-0046: a create and a claim write fewer events ---------------------------------


def _old_shape(wc: WorkCenter, event: Any, version: int, edit: Any = None) -> StoredEvent:
    """``event`` stored as the code before ADR-0046 stored it, at ``version``."""
    stored = wc.store.mapper.to_stored_event(event)
    state = orjson.loads(inflate(stored.state))
    state.pop("class_version", None)
    if edit is not None:
        edit(state)
    if state.get("class_version") == 1:
        del state["class_version"]
    return StoredEvent(
        originator_id=stored.originator_id,
        originator_version=version,
        topic=stored.topic,
        state=orjson.dumps(state),
    )


def _as_v1(state: dict[str, Any]) -> None:
    del state["current"]


def _created_v2(state: dict[str, Any]) -> None:
    del state["started"]
    state["class_version"] = 2


def _status(event: Any, status: str, action_id: Any) -> wi.StatusChanged:
    return wi.StatusChanged(
        originator_id=event.originator_id,
        originator_version=event.originator_version,
        timestamp=event.timestamp,
        actor=event.actor,
        status=status,  # type: ignore[arg-type]
        current_action_id=action_id,
    )


def _started(event: Any) -> wi.WorkItemStarted:
    return wi.WorkItemStarted(
        originator_id=event.originator_id,
        originator_version=2,
        timestamp=event.timestamp,
        actor=event.actor,
    )


def test_a_create_and_a_run_cycle_write_four_and_six_events(wc: WorkCenter) -> None:
    before = wc.event_count()
    item = create_linear(wc, stages=("implement",))
    assert wc.event_count() - before == 4
    types = [type(e).__name__ for e in wc.history(item.id)]
    assert types == ["WorkItemCreated", "ActionAdded"]
    created, added = wc.history(item.id)
    assert created.started and added.current  # type: ignore[attr-defined]
    assert (item.status, item.current_action_id) == ("ready", added.action_id)  # type: ignore[attr-defined]
    before = wc.event_count()
    claimed = claim(wc)
    wc.renew_lease(claimed)
    wc.finish_run(claimed, report())
    assert wc.event_count() - before == 6
    running = wc.history(item.id)[2]
    assert isinstance(running, wi.ActionStatusRecorded) and running.current
    assert wc.work_item(item.id).status == "done"


def test_an_old_create_with_its_start_and_status_events_reads_the_same(
    wc: WorkCenter, db_path: Path, clock: FakeClock
) -> None:
    """The events a started create wrote before ADR-0046 (WorkItemCreated v2, a
    WorkItemStarted, ActionAdded v1 and a StatusChanged), read by this code: the item is
    what a create gives now, and a Run cycle on it writes the new shapes."""
    scratch = WorkCenter.open(db_path.with_name("scratch.db"), clock=clock, boot_id=BOOT_ID)
    try:
        new = create_linear(scratch, stages=("implement",))
        created, added = scratch.history(new.id)
        ledger_events = scratch.store.events.get(scratch.ledger(new.id).id)
        action_events = scratch.store.events.get(added.action_id)  # type: ignore[attr-defined]
        rows = [
            _old_shape(scratch, created, 1, _created_v2),
            _old_shape(scratch, _started(created), 2),
            _old_shape(scratch, added, 3, _as_v1),
            _old_shape(scratch, _status(added, "ready", added.action_id), 4),  # type: ignore[attr-defined]
            *(scratch.store.mapper.to_stored_event(e) for e in ledger_events),
            *(scratch.store.mapper.to_stored_event(e) for e in action_events),
        ]
    finally:
        scratch.close()
    wc.store.recorder.insert_events(rows)
    fresh = WorkCenter.open(db_path, clock=clock, boot_id=BOOT_ID)
    try:
        item = fresh.work_item(new.id)
        assert item.version == 4
        assert item.model_dump(exclude={"version"}) == new.model_dump(exclude={"version"})
        old_created, started, old_added, _ = fresh.history(new.id)
        assert isinstance(started, wi.WorkItemStarted)
        assert old_created.started is False and old_added.current is False  # type: ignore[attr-defined]
        fresh.projections.catch_up()
        assert fresh.detail(new.id)["status"] == "ready"
        claimed = claim(fresh)
        assert fresh.work_item(new.id).status == "running"
        fresh.finish_run(claimed, report())
        assert fresh.work_item(new.id).status == "done"
        assert len(fresh.history(new.id)) == 4 + 3  # running (current), completed, done
    finally:
        fresh.close()
