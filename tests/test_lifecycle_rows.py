"""The lifecycle rows of issue 8: per-stage maxAttempts, interrupt with final
progress, Action input (queued, stale, delivered, consumed, the input gate),
defer, and the executionControl ``dataRevision``."""

from __future__ import annotations

import itertools
from datetime import timedelta
from typing import Any
from uuid import UUID, uuid4

import orjson
import pytest
from conftest import (
    FakeClock,
    action_events,
    claim,
    create_dynamic,
    create_linear,
    current,
    plan,
    refused,
    report,
    run_of,
)
from eventsourcing.persistence import StoredEvent

from workcenter.adapters.compression import inflate
from workcenter.adapters.worker_run import LATE_INPUT, run_one
from workcenter.application import Claim, WorkCenter
from workcenter.domain import action as act
from workcenter.domain import work_item as wi
from workcenter.domain.errors import CommandRefused, InvalidInput, StaleRun, VersionConflict
from workcenter.projections.dto import summary_dto

# --- per-stage maxAttempts ---------------------------------------------------------


def test_a_stage_object_gives_its_action_that_many_attempts(wc: WorkCenter) -> None:
    item = create_linear(wc, stages=({"type": "implement", "maxAttempts": 3}, "review", "deliver"))
    assert item.stages == ("implement", "review", "deliver")
    assert item.stage_max_attempts == (3, 2, 2)
    assert current(wc, item.id).max_attempts == 3
    for attempt in (1, 2):
        claimed = claim(wc)
        assert claimed.attempt == attempt
        assert wc.finish_run(claimed, report("retryable")).status == "ready"
    third = claim(wc)
    assert wc.finish_run(third, report("retryable")).status == "failed"
    assert wc.work_item(item.id).status == "needs_attention"


def test_a_stage_with_one_attempt_fails_on_its_first_retryable_outcome(wc: WorkCenter) -> None:
    item = create_linear(wc, stages=({"id": "triage", "max_attempts": 1}, "implement"))
    assert wc.finish_run(claim(wc), report("retryable")).status == "failed"
    assert wc.work_item(item.id).status == "needs_attention"


def test_the_next_stage_gets_its_own_limit(wc: WorkCenter) -> None:
    item = create_linear(
        wc, stages=("triage", {"type": "implement", "maxAttempts": 4}, {"type": "deliver"})
    )
    assert current(wc, item.id).max_attempts == 2
    wc.finish_run(claim(wc), report())
    assert current(wc, item.id).type == "implement"
    assert current(wc, item.id).max_attempts == 4
    wc.finish_run(claim(wc), report())
    assert current(wc, item.id).max_attempts == 2  # an object without maxAttempts: the default


def test_a_contract_change_replans_the_first_stage_with_its_limit(wc: WorkCenter) -> None:
    item = create_linear(wc, stages=({"type": "implement", "maxAttempts": 5}, "deliver"))
    wc.update_contract(item.id, expected_version=item.version, goal="A new goal")
    assert current(wc, item.id).max_attempts == 5
    assert current(wc, item.id).sequence == 2


@pytest.mark.parametrize(
    "stages",
    [
        [{"type": "implement", "maxAttempts": 0}],
        [{"type": "implement", "maxAttempts": 6}],
        [{"type": "implement", "maxAttempts": True}],
        [{"type": "implement", "maxAttempts": "3"}],
        [{"type": "implement", "maxAttempts": 2.0}],
        [{"type": "implement", "retries": 2}],
        [{"maxAttempts": 2}],
        [{"type": "implement", "id": "review"}],
        [{"type": "Implement"}],
        [{"type": 7}],
        ["impl\ud800"],
        (1, 2),
        "triage",
        {"type": "implement"},
        [["implement"]],
        ["implement"] * 33,
        ["review", "implement"],
        ["research", "implement", "research"],
        [{"type": "implement", "maxAttempts": 3}, "implement"],
    ],
)
def test_malformed_stages_are_refused_and_write_nothing(wc: WorkCenter, stages: Any) -> None:
    with refused(wc, InvalidInput):
        create_linear(wc, stages=stages)


def test_a_stage_named_twice_is_refused_by_its_name(wc: WorkCenter) -> None:
    """A linear item's next stage is found by the finished one's name: with a name given
    twice, the item went back to its first place after the second, for ever (an
    acceptance test's 20 items ran 3,666 Actions in four minutes)."""
    with refused(wc, InvalidInput, "'research' is given twice"):
        create_linear(wc, stages=("research", "implement", "research"))


def _stored(wc: WorkCenter, originator_id: UUID, version: int) -> StoredEvent:
    (stored,) = wc.store.recorder.select_events(originator_id, gt=version - 1, lte=version)
    return stored


def _as_v1(stored: StoredEvent, drop: str, originator_id: UUID | None = None) -> StoredEvent:
    state = orjson.loads(inflate(stored.state))
    state.pop("class_version")
    state.pop(drop)
    state.pop("started", None)  # WorkItemCreated v3 (ADR-0046): no earlier version had it
    if originator_id is not None:
        state["originator_id"] = str(originator_id)
    return StoredEvent(
        originator_id=originator_id or stored.originator_id,
        originator_version=stored.originator_version,
        topic=stored.topic,
        state=orjson.dumps(state),
    )


def test_a_v1_work_item_creation_loads_with_the_default_limit_per_stage(wc: WorkCenter) -> None:
    item = create_linear(wc, start=False)
    stored = _stored(wc, item.id, 1)
    assert orjson.loads(inflate(stored.state))["class_version"] == 3
    old_id = uuid4()
    wc.store.recorder.insert_events([_as_v1(stored, "stage_max_attempts", old_id)])
    event = wc.store.mapper.to_domain_event(_as_v1(stored, "stage_max_attempts"))
    assert isinstance(event, wi.WorkItemCreated)
    assert event.stage_max_attempts == (2, 2, 2, 2)
    old = wc.work_item(old_id)
    assert old.stages == wi.DEFAULT_STAGES
    assert old.stage_max_attempts == (2, 2, 2, 2)
    assert old.max_attempts_for("review") == 2


def test_an_item_snapshot_without_stage_limits_plans_with_the_default() -> None:
    state = wi.WorkItemState.model_validate(
        {
            "id": str(uuid4()),
            "version": 1,
            "mode": "linear",
            "title": "t",
            "goal": "g",
            "acceptance_criteria": [],
            "delivery_target": None,
            "contract_revision": 1,
            "status": "draft",
            "stages": ["triage"],
            "plan": [],
            "current_action_id": None,
            "final_result": None,
            "created_at": "2026-01-01T00:00:00Z",
            "updated_at": "2026-01-01T00:00:00Z",
        }
    )
    assert state.stage_max_attempts == ()
    assert state.max_attempts_for("triage") is None
    assert state.max_attempts_for("deliver") is None


# --- interrupt with final progress ---------------------------------------------------

PROGRESS = {
    "summary": "  Read 3 files; the fix is half done  ",
    "response": "Partial answer: the bug is in parse()",
    "stats": {"loopCount": 3, "toolCount": 7, "inputTokens": 1200, "totalTokens": 1500},
}


def test_interrupt_records_the_final_response_and_stats_as_the_lease_is_released(
    wc: WorkCenter,
) -> None:
    item = plan(wc, create_dynamic(wc).id)
    claimed = claim(wc)
    before = wc.action(claimed.action_id).version
    action = wc.interrupt(claimed, reason="shutting down", progress=PROGRESS)
    assert action.status == "ready" and action.current_run_id is None
    run = run_of(wc, claimed)
    assert run.status == "interrupted" and run.end_reason == "shutting down"
    assert run.progress is not None
    assert run.progress.summary == "Read 3 files; the fix is half done"
    assert run.progress.response == "Partial answer: the bug is in parse()"
    assert (run.progress.counters.loop_count, run.progress.counters.tool_count) == (3, 7)
    # One event: the progress is in the same write that ends the Run and frees the lease.
    (event,) = [e for e in wc.action_history(claimed.action_id) if e.originator_version > before]
    assert isinstance(event, act.RunInterrupted) and event.progress == run.progress
    dto = wc.detail(item.id)
    assert dto["executionStats"]["loopCount"] == 3
    assert dto["executionStats"]["toolCount"] == 7
    (body,) = dto["actions"]
    assert body["response"] == "Partial answer: the bug is in parse()"
    # A later claim of the same Action does not see a live lease.
    assert claim(wc).run_id != claimed.run_id


def test_interrupt_without_progress_records_none(wc: WorkCenter) -> None:
    plan(wc, create_dynamic(wc).id)
    claimed = claim(wc)
    wc.interrupt(claimed, reason="stop")
    assert run_of(wc, claimed).progress is None


@pytest.mark.parametrize(
    "progress",
    [
        "half done",
        ["half done"],
        {"summary": 3},
        {"response": "x" * 65_537},
        {"summary": "x" * 8_001},
        {"notes": "x"},
        {"stats": []},
        {"stats": {"loopCount": -1}},
        {"stats": {"loopCount": True}},
        {"stats": {"loopCount": 1.5}},
        {"stats": {"loopCount": 2**53}},
        {"stats": {"wallClock": 3}},
        {"response": "half \udc00 done"},
    ],
)
def test_malformed_progress_is_refused_and_the_run_stays_live(
    wc: WorkCenter, progress: Any
) -> None:
    plan(wc, create_dynamic(wc).id)
    claimed = claim(wc)
    with refused(wc, InvalidInput):
        wc.interrupt(claimed, reason="stop", progress=progress)
    assert run_of(wc, claimed).status == "running"


def tool_events(count: int) -> list[dict[str, Any]]:
    return [{"tool": "bash", "isError": n % 5 == 4, "summary": f"step {n}"} for n in range(count)]


def test_interrupt_keeps_the_checkpoint_of_the_last_16_tool_events(wc: WorkCenter) -> None:
    item = plan(wc, create_dynamic(wc).id)
    claimed = claim(wc)
    progress = {"summary": "half done", "checkpoint": tool_events(20)}
    wc.interrupt(claimed, reason="shutting down", progress=progress)
    run = run_of(wc, claimed)
    assert run.progress is not None
    kept = run.progress.checkpoint
    assert [e.summary for e in kept] == [f"step {n}" for n in range(4, 20)]  # the last 16
    assert [e.is_error for e in kept][:2] == [True, False] and kept[0].tool == "bash"
    [row] = wc.audit(item.id, type="RunInterrupted")  # shown with the rest of the progress
    checkpoint = row.payload["progress"]["checkpoint"]
    assert len(checkpoint) == 16 and checkpoint[-1]["summary"] == "step 19"


def test_progress_without_a_checkpoint_is_stored_as_before(wc: WorkCenter) -> None:
    item = plan(wc, create_dynamic(wc).id)
    wc.interrupt(claim(wc), reason="stop", progress=PROGRESS)
    [row] = wc.audit(item.id, type="RunInterrupted")
    assert "checkpoint" not in row.payload["progress"]


@pytest.mark.parametrize(
    "checkpoint",
    [
        "bash",
        {"tool": "bash"},
        ["bash"],
        [{"isError": True}],
        [{"tool": "  "}],
        [{"tool": 3}],
        [{"tool": "t" * 129}],
        [{"tool": "bash", "isError": "yes"}],
        [{"tool": "bash", "summary": "s" * 501}],
        [{"tool": "bash", "output": "x"}],
    ],
)
def test_a_malformed_checkpoint_is_refused(wc: WorkCenter, checkpoint: Any) -> None:
    plan(wc, create_dynamic(wc).id)
    claimed = claim(wc)
    with refused(wc, InvalidInput):
        wc.interrupt(claimed, reason="stop", progress={"checkpoint": checkpoint})
    assert run_of(wc, claimed).status == "running"


def test_a_stale_interrupt_with_progress_is_refused(wc: WorkCenter) -> None:
    plan(wc, create_dynamic(wc).id)
    claimed = claim(wc)
    wc.interrupt(claimed, reason="first")
    with refused(wc, StaleRun):
        wc.interrupt(claimed, reason="again", progress=PROGRESS)


def test_a_v1_interruption_is_upcast_without_progress(wc: WorkCenter) -> None:
    plan(wc, create_dynamic(wc).id)
    claimed = claim(wc)
    action = wc.interrupt(claimed, reason="stop", progress=PROGRESS)
    stored = _stored(wc, action.id, action.version)
    event = wc.store.mapper.to_domain_event(_as_v1(stored, "progress"))
    assert isinstance(event, act.RunInterrupted)
    assert event.progress is None and event.reason == "stop"


# --- Action input ----------------------------------------------------------------------


def _send(
    wc: WorkCenter, claimed_or_action: Claim | act.ActionState, text: str, **kw: Any
) -> act.ActionState:
    action_id = (
        claimed_or_action.action_id
        if isinstance(claimed_or_action, Claim)
        else claimed_or_action.id
    )
    action = wc.action(action_id)
    item = wc.work_item(action.work_item_id)
    fields: dict[str, Any] = {
        "expected_version": item.version,
        "expected_generation": action.generation,
        "text": text,
    }
    return wc.add_input(item.id, action_id, **(fields | kw))


def test_input_to_a_running_action_is_queued_and_gates_its_finish(wc: WorkCenter) -> None:
    item = plan(wc, create_dynamic(wc).id)
    claimed = claim(wc)
    action = _send(wc, claimed, "  Use PostgreSQL, not SQLite  ", expected_run_id=claimed.run_id)
    assert action.status == "running" and action.generation == 1
    (queued,) = action.inputs
    assert queued.text == "Use PostgreSQL, not SQLite"
    assert queued.queued_for_run_id == claimed.run_id
    assert wc.pending_input(claimed) == (queued,)
    # The input gate: no outcome while input for the Run is unconsumed.
    with refused(wc, CommandRefused, match="unconsumed input"):
        wc.finish_run(claimed, report())
    consumed = wc.consume_input(claimed, [queued.id])
    assert consumed.inputs[0].consumed_by_run_id == claimed.run_id
    assert wc.pending_input(claimed) == ()
    assert wc.finish_run(claimed, report()).status == "completed"
    names = action_events(wc, claimed.action_id)
    assert names[-3:] == ["InputQueued", "InputConsumed", "RunFinished"]
    assert [r.type for r in wc.audit(item.id, type="InputQueued")] == ["InputQueued"]
    (row,) = wc.audit(item.id, type="InputConsumed")
    assert row.actor == "worker"


def test_input_to_a_ready_action_starts_a_new_generation_with_it(wc: WorkCenter) -> None:
    item = plan(wc, create_dynamic(wc).id)
    ready = current(wc, item.id)
    action = _send(wc, ready, "Also check the Windows build")
    assert (action.status, action.generation, action.attempt) == ("ready", 2, 0)
    assert action.context[-1] == act.ContextEntry(kind="input", text="Also check the Windows build")
    assert action.spec_hash != ready.spec_hash
    claimed = claim(wc)
    assert claimed.context[-1].text == "Also check the Windows build"
    assert claimed.inputs == ()


def test_input_to_a_linear_items_current_action(wc: WorkCenter) -> None:
    item = create_linear(wc)
    claimed = claim(wc)
    _send(wc, claimed, "Keep the API stable")
    assert wc.pending_input(claimed)[0].text == "Keep the API stable"
    assert wc.work_item(item.id).status == "running"


def test_unconsumed_input_survives_an_interruption_and_reaches_the_next_run(
    wc: WorkCenter,
) -> None:
    plan(wc, create_dynamic(wc).id)
    first = claim(wc)
    (queued,) = _send(wc, first, "Prefer the smaller fix").inputs
    wc.interrupt(first, reason="worker stopping")
    second = claim(wc)
    assert second.inputs == (queued,)
    assert wc.pending_input(second) == (queued,)
    with refused(wc, StaleRun):
        wc.pending_input(first)


def test_invalidation_drops_queued_input(wc: WorkCenter) -> None:
    item = plan(wc, create_dynamic(wc).id)
    claimed = claim(wc)
    _send(wc, claimed, "hold on")
    wc.cancel(item.id)
    assert wc.action(claimed.action_id).inputs == ()


def test_stale_input_is_refused_and_writes_nothing(wc: WorkCenter, clock: FakeClock) -> None:
    item = plan(wc, create_dynamic(wc).id)
    first = claim(wc, lease_seconds=60)
    with refused(wc, CommandRefused, match="Action changed"):
        _send(wc, first, "x", expected_generation=2)
    # A Run the Action never had is named as such (it read "has ended"; ADR-0093).
    with refused(wc, CommandRefused, match=r"is not a Run of Action 1$"):
        _send(wc, first, "x", expected_run_id=uuid4())
    wc.interrupt(first, reason="stop")
    second = claim(wc)
    with refused(wc, CommandRefused, match="meant for has ended"):
        _send(wc, second, "x", expected_run_id=first.run_id)
    clock.advance(61)
    with refused(wc, CommandRefused, match="lease expired"):
        _send(wc, second, "x")
    # A contract change since the version the user saw refuses it too.
    seen = wc.work_item(item.id).version
    wc.update_contract(item.id, expected_version=seen, goal="Another goal")
    with refused(wc, VersionConflict):
        _send(wc, second, "x", expected_version=seen)


def test_input_after_a_benign_change_goes_through(wc: WorkCenter) -> None:
    item = plan(wc, create_dynamic(wc).id)
    seen = wc.work_item(item.id).version
    claimed = claim(wc)  # moves the item's version, but is not a conflict
    assert wc.work_item(item.id).version > seen
    assert _send(wc, claimed, "fine", expected_version=seen).inputs


@pytest.mark.parametrize(
    ("field", "value", "error"),
    [
        ("text", "   ", InvalidInput),
        ("text", 5, InvalidInput),
        ("text", "x" * 8_001, InvalidInput),
        ("text", "lone \ud800 surrogate", InvalidInput),
        ("expected_generation", "1", InvalidInput),
        ("expected_generation", True, InvalidInput),
        ("expected_run_id", "not-a-uuid", InvalidInput),
    ],
)
def test_malformed_input_is_refused(wc: WorkCenter, field: str, value: Any, error: type) -> None:
    plan(wc, create_dynamic(wc).id)
    claimed = claim(wc)
    with refused(wc, error):
        if field == "text":
            _send(wc, claimed, value)
        else:
            _send(wc, claimed, "ok", **{field: value})


def test_input_needs_a_ready_or_running_action(wc: WorkCenter) -> None:
    item = plan(wc, create_dynamic(wc).id)
    claimed = claim(wc)
    wc.finish_run(claimed, report("waiting"))
    with refused(wc, CommandRefused, match="waiting"):
        _send(wc, wc.action(claimed.action_id), "here is the answer")
    other = create_dynamic(wc)
    with refused(wc, CommandRefused, match="does not belong"):
        wc.add_input(
            other.id, claimed.action_id, expected_version=other.version,
            expected_generation=1, text="x",
        )  # fmt: skip
    with refused(wc, InvalidInput):
        wc.add_input(
            item.id, str(claimed.action_id), expected_version=item.version,  # type: ignore[arg-type]
            expected_generation=1, text="x",
        )  # fmt: skip
    wc.cancel(item.id)
    with refused(wc, CommandRefused, match="cancelled"):
        _send(wc, wc.action(claimed.action_id), "x")


def test_consuming_input_is_fenced(wc: WorkCenter, clock: FakeClock) -> None:
    plan(wc, create_dynamic(wc).id)
    claimed = claim(wc, lease_seconds=60)
    (queued,) = _send(wc, claimed, "x").inputs
    with refused(wc, CommandRefused, match="no unconsumed input"):
        wc.consume_input(claimed, [uuid4()])
    with refused(wc, InvalidInput):
        wc.consume_input(claimed, [])
    with refused(wc, InvalidInput):
        wc.consume_input(claimed, str(queued.id))  # type: ignore[arg-type]
    with refused(wc, InvalidInput):
        wc.consume_input(None, [queued.id])  # type: ignore[arg-type]
    wc.consume_input(claimed, [queued.id])
    with refused(wc, CommandRefused, match="no unconsumed input"):
        wc.consume_input(claimed, [queued.id])
    clock.advance(61)
    with refused(wc, StaleRun):
        wc.consume_input(claimed, [queued.id])


def test_the_worker_delivers_input_and_retries_a_run_that_missed_some(wc: WorkCenter) -> None:
    plan(wc, create_dynamic(wc).id)
    seen: list[tuple[str, ...]] = []

    def executor(claimed: Claim) -> dict[str, Any]:
        seen.append(tuple(i.text for i in claimed.inputs))
        if len(seen) == 1:  # the user answers while the first Run is executing
            _send(wc, claimed, "Use the staging database")
        return report()

    events: list[tuple[str, str]] = []
    first = run_one(
        wc, executor, worker="w1", on_event=lambda kind, _c, text: events.append((kind, text))
    )
    assert first is not None
    assert run_of(wc, first).status == "interrupted"
    assert events[-1] == ("interrupted", LATE_INPUT)
    second = run_one(wc, executor, worker="w1")
    assert second is not None
    assert seen == [(), ("Use the staging database",)]
    assert run_of(wc, second).status == "completed"
    assert wc.action(second.action_id).inputs[0].consumed_by_run_id == second.run_id


# --- defer --------------------------------------------------------------------------------


def test_defer_gives_the_attempt_back_and_the_action_is_claimable_again(wc: WorkCenter) -> None:
    item = create_linear(wc, stages=({"type": "implement", "maxAttempts": 1}, "deliver"))
    for _ in range(4):  # more deferrals than attempts: none of them counts
        claimed = claim(wc)
        assert claimed.attempt == 1
        action = wc.defer(claimed)
        assert (action.status, action.attempt, action.current_run_id) == ("ready", 0, None)
        run = run_of(wc, claimed)
        assert (run.status, run.deferred, run.end_reason) == (
            "interrupted", True, act.DEFERRED_REASON,
        )  # fmt: skip
        state = wc.work_item(item.id)
        assert (state.status, state.current_action_id) == ("ready", claimed.action_id)
    assert wc.ledger(item.id).stop_reason is None
    control = wc.detail(item.id)["executionControl"]
    assert control["actionAttempts"][0]["attempts"] == 0
    assert action_events(wc, claimed.action_id)[-1] == "RunDeferred"
    # The one real attempt is still there.
    assert wc.finish_run(claim(wc), report()).status == "completed"


def test_a_deferred_deliver_action_goes_back_to_ready(wc: WorkCenter) -> None:
    item = create_linear(wc, stages=("deliver",))
    claimed = claim(wc)
    assert wc.defer(claimed).status == "ready"
    assert wc.work_item(item.id).status == "ready"


def test_defer_in_a_dynamic_item_derives_its_status(wc: WorkCenter) -> None:
    item = plan(wc, create_dynamic(wc).id)
    claimed = claim(wc)
    assert wc.work_item(item.id).status == "running"
    wc.defer(claimed)
    state = wc.work_item(item.id)
    assert (state.status, state.current_action_id) == ("ready", claimed.action_id)
    (row,) = wc.audit(item.id, type="RunDeferred")
    assert (row.actor, row.worker) == ("worker", claimed.worker)


def test_defer_is_fenced_by_the_live_lease(wc: WorkCenter, clock: FakeClock) -> None:
    plan(wc, create_dynamic(wc).id)
    claimed = claim(wc, lease_seconds=60)
    clock.advance(61)
    with refused(wc, StaleRun):
        wc.defer(claimed)  # LRF+: an expired lease cannot defer
    wc.recover()
    with refused(wc, StaleRun):
        wc.defer(claimed)
    with refused(wc, InvalidInput):
        wc.defer("not a claim")  # type: ignore[arg-type]


def test_the_work_queue_releases_a_deferred_run(wc: WorkCenter) -> None:
    plan(wc, create_dynamic(wc).id)
    claimed = claim(wc)
    wc.defer(claimed)
    assert [row[1] for row in wc.work_queue.live_runs()] == []


# --- dataRevision ---------------------------------------------------------------------------


def _revision_now(wc: WorkCenter, item_id: UUID) -> int:
    item = wc.work_item(item_id)
    dto = summary_dto(item, wc.actions(item), wc.ledger(item_id), now=wc.clock.now())
    return int(dto["executionControl"]["dataRevision"])


def test_data_revision_rises_on_every_visible_change(wc: WorkCenter, clock: FakeClock) -> None:
    item = create_dynamic(wc)
    served: list[int] = []
    details: list[int] = []

    def serve() -> None:
        served.append(_revision_now(wc, item.id))
        details.append(wc.detail(item.id)["executionControl"]["dataRevision"])

    serve()
    plan(wc, item.id)
    serve()
    claimed = claim(wc, lease_seconds=30)
    serve()
    admission = wc.reserve_request(item.id, request={"messages": ["hi"]}, run_id=claimed.run_id)
    serve()
    clock.advance(31)  # the lease expires: no event, but the request is no longer in flight
    before = _revision_now(wc, item.id)
    control = summary_dto(
        wc.work_item(item.id),
        wc.actions(wc.work_item(item.id)),
        wc.ledger(item.id),
        now=clock.now(),
    )["executionControl"]
    assert control["usage"]["inFlightRequests"] == 0
    assert before == served[-1] + 1
    served.append(before)
    wc.recover()
    serve()
    wc.settle_request(item.id, admission.request_id, usage=None, complete=False)
    serve()
    second = claim(wc)
    serve()
    wc.defer(second)
    serve()
    third = claim(wc)
    wc.finish_run(third, report())
    serve()
    wc.extend_budget(
        item.id, expected_version=wc.ledger(item.id).control_version, additions={"max_tokens": 5}
    )
    serve()
    assert all(a < b for a, b in itertools.pairwise(served)), served
    assert all(a < b for a, b in itertools.pairwise(details)), details


def test_data_revision_is_stable_while_nothing_changes(wc: WorkCenter, clock: FakeClock) -> None:
    item = plan(wc, create_dynamic(wc).id)
    claim(wc, lease_seconds=60)
    first = _revision_now(wc, item.id)
    clock.advance(10)
    assert _revision_now(wc, item.id) == first
    assert wc.detail(item.id)["executionControl"]["dataRevision"] == first
    clock.advance(60)
    assert _revision_now(wc, item.id) == first + 1


def test_data_revision_never_falls_when_a_lease_expiry_is_recovered(
    wc: WorkCenter, clock: FakeClock
) -> None:
    item = plan(wc, create_dynamic(wc).id)
    claim(wc, lease_seconds=5)
    clock.advance(6)
    expired = _revision_now(wc, item.id)
    wc.recover()
    assert _revision_now(wc, item.id) > expired


def test_lease_expiry_needs_no_event_for_data_revision(wc: WorkCenter, clock: FakeClock) -> None:
    item = plan(wc, create_dynamic(wc).id)
    claim(wc, lease_seconds=5)
    count = wc.event_count()
    before = _revision_now(wc, item.id)
    clock.advance(timedelta(seconds=6).total_seconds())
    assert _revision_now(wc, item.id) == before + 1
    assert wc.event_count() == count


def test_a_secret_in_interrupted_progress_does_not_reach_the_browser(wc: WorkCenter) -> None:
    item = plan(wc, create_dynamic(wc).id)
    claimed = claim(wc)
    secret = "sk-abc123def456ghi789jkl012"
    wc.interrupt(
        claimed,
        reason="stop",
        progress={"summary": f"used {secret}", "response": f"token {secret} at /home/me/x"},
    )
    assert run_of(wc, claimed).progress is not None
    assert secret not in orjson.dumps(wc.detail(item.id)).decode()


def test_input_to_a_linear_items_earlier_stage_is_refused(wc: WorkCenter) -> None:
    item = create_linear(wc)
    first = claim(wc)
    wc.finish_run(first, report())
    assert current(wc, item.id).id != first.action_id
    with refused(wc, CommandRefused, match="current Action"):
        _send(wc, wc.action(first.action_id), "too late")


def test_consuming_more_ids_than_a_command_may_name_is_refused(wc: WorkCenter) -> None:
    """Every command that names ids takes at most 256 (docs/limits.md); consume_input
    took any number, the existence of each checked first (found by acceptance testing,
    ADR-0138)."""
    plan(wc, create_dynamic(wc).id)
    claimed = claim(wc)
    with refused(wc, InvalidInput, "more than 256 ids"):
        wc.consume_input(claimed, [uuid4() for _ in range(257)])
