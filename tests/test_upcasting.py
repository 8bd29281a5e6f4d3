"""Event schema evolution (ADR-0010): ``LeaseRenewed`` v1 events stored before
``lease_seconds`` existed load through the real mapper and repository upcast to v2."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import orjson
from conftest import BOOT_ID, FakeClock, claim, create_dynamic, plan
from eventsourcing.persistence import StoredEvent
from eventsourcing.utils import get_topic

from workcenter.adapters.compression import inflate
from workcenter.application import WorkCenter
from workcenter.domain import action as act


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
