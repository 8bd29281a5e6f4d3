"""ResourceLedger (resource-ledger.md): the pure aggregate first, then the service.

Pure tests fold ``workcenter.domain.resource_ledger`` events by hand; service
tests go through ``WorkCenter`` and assert exactly what each command wrote
(``written`` lists every event appended to the store, in order).
"""

from __future__ import annotations

import math
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import orjson
import pytest
from conftest import (
    CRITERIA,
    T0,
    WORKER,
    FakeClock,
    action_spec,
    assert_nothing_claimable,
    budget_commands,
    claim,
    plan,
    refused,
    report,
)
from eventsourcing.persistence import IntegrityError

from workcenter.adapters.presenters import budget_json
from workcenter.application import Claim, WorkCenter
from workcenter.domain import resource_ledger as rl
from workcenter.domain import work_item as wi
from workcenter.domain.actor import USER
from workcenter.domain.errors import CommandRefused, InvalidInput, NotFound, VersionConflict
from workcenter.service_layer.handlers.resource_ledger import BudgetCommands
from workcenter.service_layer.repository import Repository

DECIDE = {"messages": [{"role": "user", "content": "Decide"}], "max_tokens": 100}  # 117
STOP_WRITES = ["ExecutionStopped", "BudgetStopRecorded", "StatusChanged"]
EXTEND_FIRST = "extend the budget first"
EXTEND_ATTEMPTS = "extend max_action_attempts"


def req(tokens: int) -> dict[str, Any]:
    """A request whose estimate is exactly ``tokens`` (``{}`` is 2 bytes: ceil(2/3) = 1)."""
    assert tokens >= 2
    return {"max_tokens": tokens - 1}


# --- pure: estimate ----------------------------------------------------------------


def test_estimate_examples_of_the_spec() -> None:
    assert rl.estimate_tokens({}) == 16_385
    assert rl.estimate_tokens({"max_tokens": 100}) == 101
    assert rl.estimate_tokens(DECIDE) == math.ceil(49 / 3) + 100 == 117
    assert rl.UNKNOWN_REQUEST_TOKENS == 16_384


def test_estimate_counts_non_ascii_in_utf8_bytes_unescaped() -> None:
    # {"system":"日本"}: 13 ASCII bytes + 2 x 3 bytes = 19 bytes -> 7 tokens
    # (15 characters would give 5, \u-escaped 25 bytes would give 9)
    assert orjson.dumps({"system": "日本"}) == '{"system":"日本"}'.encode()
    assert rl.estimate_tokens({"system": "日本", "max_tokens": 10}) == 7 + 10


def test_estimate_reads_only_system_messages_and_tools() -> None:
    body = {"system": "be brief", "messages": [{"role": "user", "content": "hi"}], "tools": [1]}
    noise = {"metadata": "x" * 3_000, "temperature": 0.5, "model": "m"}
    size = len(orjson.dumps(body))
    assert rl.estimate_tokens({**noise, **body, "max_tokens": 7}) == math.ceil(size / 3) + 7
    assert rl.estimate_tokens({**noise, "max_tokens": 7}) == 1 + 7  # "{}"


@pytest.mark.parametrize("out", [99.5, "100", True, None, 0, -5, 0.0, math.inf, math.nan])
def test_estimate_accepts_only_positive_integer_max_tokens(out: Any) -> None:
    assert rl.estimate_tokens({"max_tokens": out}) == 1 + 16_384


def test_a_max_tokens_with_no_fraction_is_the_integer_it_names() -> None:
    # As JSON has it (and the original's numbers: 100.0 is an integer there); over HTTP
    # a worker's 100.0 was charged as an unknown output budget and stopped its item.
    assert rl.estimate_tokens({"max_tokens": 100.0}) == 1 + 100


# --- pure: usage -------------------------------------------------------------------


def usage(**values: int) -> rl.Usage:
    return rl.Usage(**values)


def test_no_usage_is_not_zero_usage() -> None:
    assert rl.normalize_usage(None) is None
    assert rl.normalize_usage({}) == rl.Usage()


def test_snake_case_usage_and_computed_total() -> None:
    payload = {
        "input_tokens": 10,
        "output_tokens": 5,
        "cache_read_tokens": 3,
        "cache_write_tokens": 2,
    }
    assert rl.normalize_usage(payload) == usage(
        input_tokens=10,
        output_tokens=5,
        cache_read_tokens=3,
        cache_write_tokens=2,
        total_tokens=20,
    )


@pytest.mark.parametrize(
    ("payload", "field", "expected"),
    [
        ({"inputTokens": 7, "input_tokens": 100}, "input_tokens", 7),
        ({"outputTokens": 7, "output_tokens": 100}, "output_tokens", 7),
        (
            {"cacheReadTokens": 1, "cache_read_tokens": 2, "cache_read_input_tokens": 3},
            "cache_read_tokens",
            1,
        ),
        ({"cache_read_tokens": 2, "cache_read_input_tokens": 3}, "cache_read_tokens", 2),
        ({"cache_read_input_tokens": 3}, "cache_read_tokens", 3),
        (
            {"cacheWriteTokens": 1, "cache_write_tokens": 2, "cache_creation_input_tokens": 3},
            "cache_write_tokens",
            1,
        ),
        ({"cache_write_tokens": 2, "cache_creation_input_tokens": 3}, "cache_write_tokens", 2),
        ({"cache_creation_input_tokens": 3}, "cache_write_tokens", 3),
        ({"totalTokens": 9, "total_tokens": 100}, "total_tokens", 9),
        # OpenAI's names, as a worker settles with its provider's usage, come last
        ({"input_tokens": 7, "prompt_tokens": 100}, "input_tokens", 7),
        ({"prompt_tokens": 100}, "input_tokens", 100),
        ({"output_tokens": 7, "completion_tokens": 100}, "output_tokens", 7),
        ({"completion_tokens": 100}, "output_tokens", 100),
        # None is skipped; the first non-None wins even when it is bad
        ({"inputTokens": None, "input_tokens": 5}, "input_tokens", 5),
        ({"inputTokens": "12", "input_tokens": 5}, "input_tokens", 0),
        ({"inputTokens": -1, "input_tokens": 5}, "input_tokens", 0),
        ({"cache_read_tokens": True, "cache_read_input_tokens": 4}, "cache_read_tokens", 0),
    ],
)
def test_usage_aliases_camel_then_snake_then_cache_input(
    payload: dict[str, Any], field: str, expected: int
) -> None:
    normalised = rl.normalize_usage(payload)
    assert normalised is not None
    assert getattr(normalised, field) == expected


@pytest.mark.parametrize(
    "bad", [True, False, "5", "", -3, 0, -0.5, math.nan, -math.inf, [1], {"n": 1}]
)
def test_only_numbers_above_zero_count(bad: Any) -> None:
    """Infinity is past every bound: refused (test_hardening_inputs), not counted as none."""
    normalised = rl.normalize_usage(
        {"input_tokens": bad, "output_tokens": bad, "cache_read_tokens": bad, "total_tokens": bad}
    )
    assert normalised == rl.Usage()


def test_finite_float_counts() -> None:
    normalised = rl.normalize_usage({"input_tokens": 2.0, "output_tokens": 3})
    assert normalised == usage(input_tokens=2, output_tokens=3, total_tokens=5)


@pytest.mark.parametrize(
    ("payload", "total"),
    [
        # an explicit total above zero wins, even when it disagrees with the parts
        ({"input_tokens": 10, "output_tokens": 10, "total_tokens": 3}, 3),
        ({"input_tokens": 10, "totalTokens": 4, "total_tokens": 50}, 4),
        # a zero or bad total is recomputed from the parts
        ({"input_tokens": 10, "output_tokens": 1, "total_tokens": 0}, 11),
        ({"input_tokens": 10, "output_tokens": 1, "totalTokens": "99"}, 11),
        ({"input_tokens": 10, "cache_read_tokens": 4, "cache_write_tokens": 1}, 15),
        (
            {
                "input_tokens": 10,
                "cache_read_tokens": 4,
                "cache_write_tokens": 1,
                "cacheTokensAreIncludedInInput": True,
            },
            10,
        ),
        (
            {
                "input_tokens": 10,
                "cache_read_tokens": 4,
                "cache_write_tokens": 1,
                "cacheTokensAreIncludedInInput": False,
            },
            15,
        ),
        # an explicit total is not reduced by the cache flag
        ({"total_tokens": 20, "cache_read_tokens": 4, "cacheTokensAreIncludedInInput": True}, 20),
        # reasoning tokens are never summed or charged
        ({"input_tokens": 1, "output_tokens": 1, "reasoning_tokens": 50}, 2),
        ({"input_tokens": 1, "output_tokens": 1, "reasoningTokens": 50}, 2),
    ],
)
def test_total_rules(payload: dict[str, Any], total: int) -> None:
    normalised = rl.normalize_usage(payload)
    assert normalised is not None
    assert normalised.total_tokens == total


def test_a_stream_sums_normalised_usage_per_key() -> None:
    events: list[dict[str, Any] | None] = [
        {"input_tokens": 1, "output_tokens": 2},
        None,
        {"inputTokens": 3, "cache_read_input_tokens": 4},
        {"total_tokens": 10},
        {"input_tokens": "bad", "cacheTokensAreIncludedInInput": True, "cache_write_tokens": 5},
    ]
    assert rl.sum_usage(events) == usage(
        input_tokens=4, output_tokens=2, cache_read_tokens=4, cache_write_tokens=5, total_tokens=20
    )
    assert rl.sum_usage([]) is None
    assert rl.sum_usage([None, None]) is None
    assert rl.sum_usage([{}]) == rl.Usage()


# --- pure: reserve, settle, can_attempt, failures -------------------------------------


def opened(**limits: int) -> rl.LedgerState:
    state = rl.fold(None, rl.open_ledger(uuid.uuid4(), T0, rl.Limits(**limits), by=USER))
    assert state is not None
    return state


def then(state: rl.LedgerState, events: Any) -> rl.LedgerState:
    after = rl.fold(state, events)
    assert after is not None
    return after


def admit(
    state: rl.LedgerState,
    request_id: str,
    tokens: int,
    run_id: UUID | None = None,
    *,
    active: bool = True,
) -> tuple[rl.Admission, rl.LedgerState]:
    admission = rl.reserve(
        state,
        request_id=request_id,
        kind="action" if run_id else "coordinator",
        run_id=run_id,
        estimated_tokens=tokens,
        item_active=active,
        at=T0,
        by=USER,
    )
    return admission, then(state, admission.events)


def test_new_ledger_copies_the_default_limits() -> None:
    state = opened()
    assert state.limits == rl.Limits(
        max_requests=200,
        max_tokens=2_000_000,
        max_run_requests=40,
        max_action_attempts=3,
        max_coordinator_failures=3,
    )
    assert (state.request_count, state.charged_tokens, state.coordinator_failures) == (0, 0, 0)
    assert (state.stop_reason, state.retry_after, state.attempts_extension) == (None, None, 0)
    assert state.control_version == state.version == 1


def test_reserve_rules_decide_in_table_order() -> None:
    run = uuid.uuid4()
    state = opened(max_requests=1, max_run_requests=1, max_tokens=100)
    allowed, state = admit(state, "a", 60, run)
    assert allowed.allowed and not allowed.stops
    # row 4 before rows 5 and 6: the run, the item and the tokens are all spent
    denied, stopped = admit(state, "b", 60, run)
    assert (denied.allowed, denied.code, denied.stops) == (False, "run_requests_exhausted", True)
    # row 5 before row 6
    denied, _ = admit(state, "b", 60)
    assert denied.code == "work_item_requests_exhausted"
    # row 3 before the stopping rows: an inactive item writes nothing
    denied, _ = admit(state, "b", 60, run, active=False)
    assert (denied.code, denied.events) == ("work_item_inactive", ())
    # row 2 before row 3: a stopped ledger answers with its reason
    denied, _ = admit(stopped, "b", 60, run, active=False)
    assert (denied.code, denied.events) == ("run_requests_exhausted", ())
    # row 1 first
    denied, _ = admit(stopped, "a", 60, run, active=False)
    assert (denied.code, denied.events) == ("request_already_reserved", ())


def test_tokens_admit_up_to_the_limit_inclusive() -> None:
    state = opened(max_tokens=100)
    _, state = admit(state, "a", 60)
    allowed, state = admit(state, "b", 40)
    assert allowed.allowed and state.charged_tokens == 100
    denied, _ = admit(state, "c", 2)
    assert denied.code == "work_item_tokens_exhausted"


SETTLE_CASES = [
    # (usage, complete) -> (status, charged); the estimate is 100
    ({"total_tokens": 60}, True, "reported", 60),
    ({"total_tokens": 150}, True, "reported", 150),
    ({"total_tokens": 60}, False, "unknown", 100),
    ({"total_tokens": 150}, False, "unknown", 150),
    ({}, True, "unknown", 100),
    ({"input_tokens": 0, "total_tokens": 0}, True, "unknown", 100),
    (None, True, "unknown", 100),
    (None, False, "unknown", 100),
]


@pytest.mark.parametrize(("payload", "complete", "status", "charged"), SETTLE_CASES)
def test_settle_a_reserved_request(
    payload: dict[str, Any] | None, complete: bool, status: str, charged: int
) -> None:
    _, state = admit(opened(), "a", 100)
    normalised = rl.normalize_usage(payload)
    events = rl.settle(state, request_id="a", usage=normalised, complete=complete, at=T0, by=USER)
    assert [type(e) for e in events] == [rl.RequestSettled]
    row = then(state, events).reservations["a"]
    assert (row.status, row.charged_tokens, row.usage, row.estimated_tokens) == (
        status,
        charged,
        normalised,
        100,
    )


def test_settle_no_ops() -> None:
    _, state = admit(opened(), "a", 100)
    total = rl.Usage(total_tokens=5)
    assert rl.settle(state, request_id="nope", usage=total, complete=True, at=T0, by=USER) == []
    unknown = then(
        state, rl.settle(state, request_id="a", usage=None, complete=True, at=T0, by=USER)
    )
    assert rl.settle(unknown, request_id="a", usage=None, complete=True, at=T0, by=USER) == []
    assert rl.settle(unknown, request_id="a", usage=None, complete=False, at=T0, by=USER) == []
    reported = then(
        unknown, rl.settle(unknown, request_id="a", usage=total, complete=True, at=T0, by=USER)
    )
    assert reported.reservations["a"].status == "reported"
    for complete in (True, False):
        assert (
            rl.settle(reported, request_id="a", usage=total, complete=complete, at=T0, by=USER)
            == []
        )


def test_backoff_doubles_from_one_to_256_seconds() -> None:
    seconds = [rl.backoff(n).total_seconds() for n in range(1, 12)]
    assert seconds == [1, 2, 4, 8, 16, 32, 64, 128, 256, 256, 256]
    assert rl.backoff(1_000) == timedelta(seconds=256)


def test_can_attempt_effective_maximum() -> None:
    action = uuid.uuid4()
    state = opened(max_action_attempts=3)
    assert state.effective_max_attempts(2) == 2
    assert state.effective_max_attempts(5) == 3
    for attempts in (0, 1):
        gate = rl.can_attempt(
            state, action_id=action, attempts=attempts, original_max_attempts=2, at=T0, by=USER
        )
        assert gate is None
    stop = rl.can_attempt(
        state, action_id=action, attempts=2, original_max_attempts=2, at=T0, by=USER
    )
    assert stop is not None
    extended = then(state, rl.extend(state, {"max_action_attempts": 1}, T0, by=USER))
    assert extended.attempts_extension == 1
    assert extended.effective_max_attempts(2) == 3
    assert extended.effective_max_attempts(5) == 4
    gate = rl.can_attempt(
        extended, action_id=action, attempts=2, original_max_attempts=2, at=T0, by=USER
    )
    assert gate is None


# --- service helpers ---------------------------------------------------------------


def written(wc: WorkCenter, before: int) -> list[str]:
    """The class names of every event stored after notification ``before``, in order."""
    notifications = wc.store.recorder.select_notifications(start=before + 1, limit=1_000)
    return [n.topic.rsplit(":", 1)[-1] for n in notifications]


def ledger_names(wc: WorkCenter, item_id: UUID) -> list[str]:
    return [type(e).__name__ for e in wc.store.events.get(rl.ledger_id_for(item_id))]


def make(
    wc: WorkCenter,
    mode: wi.Mode = "dynamic",
    *,
    stages: tuple[str, ...] | None = None,
    start: bool = True,
    **limits: int,
) -> wi.WorkItemState:
    return wc.create_work_item(
        title=f"{mode} item",
        goal="Ship the feature",
        acceptance_criteria=list(CRITERIA),
        delivery_target="response",
        mode=mode,
        stages=stages,
        start=start,
        limits=limits or None,
    )


def stop_by_requests(wc: WorkCenter, item_id: UUID) -> rl.LedgerState:
    """Spend every request of the item, then try one more: the item stops."""
    ledger = wc.ledger(item_id)
    for _ in range(ledger.limits.max_requests - ledger.request_count):
        assert wc.reserve_request(item_id, request=req(2), kind="coordinator").allowed
    denied = wc.reserve_request(item_id, request=req(2), kind="coordinator")
    assert denied.code == "work_item_requests_exhausted"
    return wc.ledger(item_id)


def resume(wc: WorkCenter, item_id: UUID) -> wi.WorkItemState:
    """Resume as a user who has just refreshed both versions."""
    return wc.resume(
        item_id,
        expected_version=wc.work_item(item_id).version,
        expected_ledger_version=wc.ledger(item_id).version,
    )


def extend(wc: WorkCenter, item_id: UUID, **additions: int) -> rl.LedgerState:
    return wc.extend_budget(
        item_id, expected_version=wc.ledger(item_id).version, additions=additions
    )


def runs_of(wc: WorkCenter, item_id: UUID, n: int = 1) -> list[UUID]:
    """Ids of ``n`` live Runs of the dynamic item: a request names a Run of its item."""
    plan(wc, item_id, *[action_spec(objective=f"Part {i}") for i in range(n)])
    return [claim(wc).run_id for _ in range(n)]


def done_item(wc: WorkCenter) -> wi.WorkItemState:
    item = make(wc, "linear", stages=("implement",))
    wc.finish_run(claim(wc), report())
    done = wc.work_item(item.id)
    assert done.status == "done"
    return done


def assert_stopped(
    wc: WorkCenter, item_id: UUID, code: str, status: str = "needs_attention"
) -> rl.StopReason:
    ledger = wc.ledger(item_id)
    item = wc.work_item(item_id)
    assert ledger.stop_reason is not None and ledger.stop_reason.code == code
    assert (item.stopped, item.status) == (code, status)
    return ledger.stop_reason


# --- service: creation and reads ---------------------------------------------------


def test_creation_opens_the_ledger_in_the_same_save(wc: WorkCenter) -> None:
    before = wc.event_count()
    item = make(wc, start=False, max_requests=7)
    assert written(wc, before) == ["WorkItemCreated", "LedgerOpened"]
    ledger = wc.ledger(item.id)
    assert ledger.id == rl.ledger_id_for(item.id) and ledger.work_item_id == item.id
    assert ledger.limits == rl.Limits(max_requests=7)


def test_invalid_limits_and_unknown_items(wc: WorkCenter) -> None:
    with refused(wc, InvalidInput):
        make(wc, max_widgets=3)
    missing = uuid.uuid4()
    with refused(wc, NotFound):
        wc.ledger(missing)
    with refused(wc, NotFound):
        wc.reserve_request(missing, request={})
    with refused(wc, NotFound):
        wc.settle_request(missing, "r", usage=None)
    with refused(wc, NotFound):
        wc.extend_budget(missing, expected_version=1, additions={"max_requests": 1})


# --- service: reserve, row by row ----------------------------------------------------


def test_allowed_request_writes_only_request_reserved(wc: WorkCenter) -> None:
    item = make(wc)
    before = wc.event_count()
    admission = wc.reserve_request(item.id, request=DECIDE, kind="coordinator", request_id="t1")
    assert (admission.allowed, admission.request_id, admission.code) == (True, "t1", None)
    assert written(wc, before) == ["RequestReserved"]
    row = wc.ledger(item.id).reservations["t1"]
    assert (row.kind, row.run_id, row.estimated_tokens, row.charged_tokens) == (
        "coordinator",
        None,
        117,
        117,
    )
    assert (row.status, row.usage, row.created_at) == ("reserved", None, T0)
    assert wc.work_item(item.id) == item
    # an Action request gets a fresh id of its own
    (run,) = runs_of(wc, item.id)
    first = wc.reserve_request(item.id, request={}, run_id=run)
    second = wc.reserve_request(item.id, request={}, run_id=run)
    assert first.allowed and second.allowed and first.request_id != second.request_id
    assert wc.ledger(item.id).reservations[first.request_id].kind == "action"
    assert wc.ledger(item.id).request_count == 3


def test_row1_duplicate_request_id_is_denied_and_writes_nothing(wc: WorkCenter) -> None:
    item = make(wc, max_requests=1)
    assert wc.reserve_request(item.id, request=req(10), request_id="r").allowed
    ledger = wc.ledger(item.id)
    before = wc.event_count()
    denied = wc.reserve_request(item.id, request=req(10), request_id="r")
    assert (denied.allowed, denied.code, denied.events) == (False, "request_already_reserved", ())
    assert wc.event_count() == before  # a replayed request is not counted again
    assert wc.ledger(item.id) == ledger
    # the id check comes before the stop
    stop_by_requests(wc, item.id)
    before = wc.event_count()
    assert wc.reserve_request(item.id, request={}, request_id="r").code == (
        "request_already_reserved"
    )
    assert wc.event_count() == before


@pytest.mark.parametrize("blank", ["", "   ", "\u200b"])
def test_a_blank_request_id_given_is_refused_not_replaced(wc: WorkCenter, blank: str) -> None:
    """A request id given blank is the caller's mistake (a settlement by that id could
    never be made): refused as a blank ``client_message_id`` is, where it was once
    replaced by a generated id and admitted (found by an embedder, ADR-0138)."""
    item = make(wc)
    with refused(wc, InvalidInput, "request_id is required"):
        wc.reserve_request(item.id, request=req(10), request_id=blank)


def test_row2_a_stopped_ledger_denies_with_its_reason_and_writes_nothing(
    wc: WorkCenter,
) -> None:
    item = make(wc, max_tokens=1_000)
    (run,) = runs_of(wc, item.id)
    assert wc.reserve_request(item.id, request=req(900)).allowed
    assert wc.reserve_request(item.id, request=req(200)).code == "work_item_tokens_exhausted"
    stopped = wc.ledger(item.id)
    before = wc.event_count()
    for request, run_id in ((req(2), None), (req(2), run), ({}, None)):
        denied = wc.reserve_request(item.id, request=request, run_id=run_id)
        assert (denied.allowed, denied.code, denied.events) == (
            False,
            "work_item_tokens_exhausted",
            (),
        )
    assert wc.event_count() == before
    assert wc.ledger(item.id) == stopped


@pytest.mark.parametrize("how", ["cancelled", "done"])
def test_row3_an_inactive_item_denies_and_writes_nothing(wc: WorkCenter, how: str) -> None:
    if how == "cancelled":
        made = make(wc)
        (run,) = runs_of(wc, made.id)
        item = wc.cancel(made.id)
    else:
        item = done_item(wc)
        (action,) = wc.actions(item).values()
        run = action.runs[0].id
    assert item.status == how
    before = wc.event_count()
    denied = wc.reserve_request(item.id, request=req(2), run_id=run)
    assert (denied.allowed, denied.code, denied.events) == (False, "work_item_inactive", ())
    assert wc.event_count() == before
    assert wc.ledger(item.id).stop_reason is None


def test_row2_comes_before_row3(wc: WorkCenter) -> None:
    item = make(wc, max_requests=1)
    stop_by_requests(wc, item.id)
    wc.cancel(item.id)
    before = wc.event_count()
    assert wc.reserve_request(item.id, request={}).code == "work_item_requests_exhausted"
    assert wc.event_count() == before


def test_row4_run_requests_exhausted_stops_the_item(wc: WorkCenter, clock: FakeClock) -> None:
    item = make(wc, max_run_requests=2)
    plan(wc, item.id, action_spec(), action_spec("test", "Run it"))
    claimed = claim(wc)
    other_run = claim(wc).run_id
    for run_id in (claimed.run_id, claimed.run_id, None, other_run, None):
        assert wc.reserve_request(item.id, request=req(50), run_id=run_id).allowed
    clock.advance(5)
    before = wc.event_count()
    count = wc.ledger(item.id).request_count
    denied = wc.reserve_request(item.id, request=req(50), run_id=claimed.run_id)
    assert (denied.allowed, denied.code, denied.stops) == (False, "run_requests_exhausted", True)
    assert written(wc, before) == STOP_WRITES
    stop = assert_stopped(wc, item.id, "run_requests_exhausted")
    assert stop.at == clock.now()
    assert stop.details == {"run_id": str(claimed.run_id), "estimated_next_tokens": 50}
    assert wc.ledger(item.id).request_count == count  # a denial adds no request
    assert wc.action(claimed.action_id).status == "running"  # the live Run may still end


def test_row4_comes_before_row5(wc: WorkCenter) -> None:
    item = make(wc, max_run_requests=1, max_requests=1)
    (run,) = runs_of(wc, item.id)
    assert wc.reserve_request(item.id, request=req(2), run_id=run).allowed
    assert wc.reserve_request(item.id, request=req(2), run_id=run).code == (
        "run_requests_exhausted"
    )


def test_row5_item_requests_exhausted_stops_the_item(wc: WorkCenter) -> None:
    item = make(wc, max_requests=2)
    assert wc.reserve_request(item.id, request=req(3), kind="coordinator").allowed
    assert wc.reserve_request(item.id, request=req(3), run_id=runs_of(wc, item.id)[0]).allowed
    before = wc.event_count()
    denied = wc.reserve_request(item.id, request=req(3), kind="coordinator")
    assert (denied.allowed, denied.code) == (False, "work_item_requests_exhausted")
    assert written(wc, before) == STOP_WRITES
    stop = assert_stopped(wc, item.id, "work_item_requests_exhausted")
    assert stop.details == {"run_id": None, "estimated_next_tokens": 3}
    assert wc.ledger(item.id).request_count == 2


def test_row5_comes_before_row6(wc: WorkCenter) -> None:
    item = make(wc, max_requests=1, max_tokens=10)
    assert wc.reserve_request(item.id, request=req(10)).allowed
    assert wc.reserve_request(item.id, request=req(10)).code == "work_item_requests_exhausted"


def test_row6_tokens_exhausted_stops_the_item(wc: WorkCenter) -> None:
    item = make(wc, max_tokens=1_000)
    (run,) = runs_of(wc, item.id)
    assert wc.reserve_request(item.id, request=req(600), run_id=run).allowed
    assert wc.reserve_request(item.id, request=req(400)).allowed  # charged + estimate == max
    before = wc.event_count()
    denied = wc.reserve_request(item.id, request=req(2), run_id=run)
    assert (denied.allowed, denied.code) == (False, "work_item_tokens_exhausted")
    assert written(wc, before) == STOP_WRITES
    stop = assert_stopped(wc, item.id, "work_item_tokens_exhausted")
    assert stop.details == {"run_id": str(run), "estimated_next_tokens": 2}
    assert wc.ledger(item.id).charged_tokens == 1_000


def test_row6_counts_reported_usage_not_the_estimate(wc: WorkCenter) -> None:
    item = make(wc, max_tokens=1_000)
    first = wc.reserve_request(item.id, request=req(600))
    assert wc.settle_request(item.id, first.request_id, usage={"total_tokens": 100})
    assert wc.reserve_request(item.id, request=req(900)).allowed
    assert wc.ledger(item.id).charged_tokens == 1_000


def test_first_stop_reason_wins(wc: WorkCenter, budget: BudgetCommands) -> None:
    item = make(wc, max_run_requests=1, max_tokens=1_000)
    (run,) = runs_of(wc, item.id)
    pending = wc.reserve_request(item.id, request=req(500), run_id=run)
    assert wc.reserve_request(item.id, request=req(2), run_id=run).code == (
        "run_requests_exhausted"
    )
    first = wc.ledger(item.id).stop_reason
    # an overrun and the last coordinator failure would each stop; neither replaces it
    assert wc.settle_request(item.id, pending.request_id, usage={"total_tokens": 5_000})
    for n in range(3):
        budget.record_coordinator_failure(item.id, turn_id=f"t{n}")
    ledger = wc.ledger(item.id)
    assert ledger.stop_reason == first
    assert ledger_names(wc, item.id).count("ExecutionStopped") == 1
    assert (ledger.charged_tokens, ledger.coordinator_failures) == (5_000, 3)
    assert wc.work_item(item.id).stopped == "run_requests_exhausted"


# --- service: settle ---------------------------------------------------------------


def test_settle_no_ops_return_false_and_write_nothing(wc: WorkCenter) -> None:
    item = make(wc)
    a = wc.reserve_request(item.id, request=DECIDE).request_id
    b = wc.reserve_request(item.id, request=DECIDE).request_id
    assert wc.settle_request(item.id, a, usage={"total_tokens": 20})
    assert wc.settle_request(item.id, b, usage=None, complete=False)
    before = wc.event_count()
    ledger = wc.ledger(item.id)
    assert not wc.settle_request(item.id, "no-such-request", usage={"total_tokens": 20})
    assert not wc.settle_request(item.id, a, usage={"total_tokens": 99})  # already reported
    assert not wc.settle_request(item.id, a, usage=None, complete=False)
    assert not wc.settle_request(item.id, b, usage=None)  # unknown and no usage
    assert not wc.settle_request(item.id, b, usage=None, complete=False)
    assert wc.event_count() == before
    assert wc.ledger(item.id) == ledger


def test_complete_usage_is_reported_and_charged_even_below_the_estimate(wc: WorkCenter) -> None:
    item = make(wc)
    request_id = wc.reserve_request(item.id, request=DECIDE).request_id
    before = wc.event_count()
    assert wc.settle_request(item.id, request_id, usage={"input_tokens": 30, "output_tokens": 10})
    assert written(wc, before) == ["RequestSettled"]
    row = wc.ledger(item.id).reservations[request_id]
    assert (row.status, row.estimated_tokens, row.charged_tokens) == ("reported", 117, 40)
    assert row.usage == usage(input_tokens=30, output_tokens=10, total_tokens=40)
    assert wc.work_item(item.id).version == item.version


@pytest.mark.parametrize(
    ("payload", "complete", "charged"),
    [
        ({"total_tokens": 50}, False, 117),
        ({"total_tokens": 500}, False, 500),
        ({}, True, 117),
        ({"input_tokens": 0, "output_tokens": 0}, True, 117),
        (None, True, 117),
        (None, False, 117),
    ],
)
def test_incomplete_or_zero_usage_is_unknown_at_least_at_the_estimate(
    wc: WorkCenter, payload: dict[str, Any] | None, complete: bool, charged: int
) -> None:
    item = make(wc)
    request_id = wc.reserve_request(item.id, request=DECIDE).request_id
    assert wc.settle_request(item.id, request_id, usage=payload, complete=complete)
    row = wc.ledger(item.id).reservations[request_id]
    assert (row.status, row.charged_tokens) == ("unknown", charged)
    assert row.usage == rl.normalize_usage(payload)


def test_later_complete_usage_turns_unknown_into_reported(wc: WorkCenter) -> None:
    item = make(wc)
    request_id = wc.reserve_request(item.id, request=DECIDE).request_id
    assert wc.settle_request(item.id, request_id, usage=None, complete=False)
    assert wc.settle_request(item.id, request_id, usage={"total_tokens": 30}, complete=False)
    row = wc.ledger(item.id).reservations[request_id]
    assert (row.status, row.charged_tokens, row.usage) == ("unknown", 117, usage(total_tokens=30))
    assert wc.settle_request(item.id, request_id, usage={"total_tokens": 30})
    row = wc.ledger(item.id).reservations[request_id]
    assert (row.status, row.charged_tokens) == ("reported", 30)
    assert not wc.settle_request(item.id, request_id, usage={"total_tokens": 31})


def test_an_overrun_after_settle_stops_and_stays_recorded(wc: WorkCenter) -> None:
    item = make(wc, max_tokens=1_000)
    a = wc.reserve_request(item.id, request=req(500)).request_id
    assert wc.reserve_request(item.id, request=req(400)).allowed
    before = wc.event_count()
    assert wc.settle_request(item.id, a, usage={"total_tokens": 700})
    assert written(wc, before) == ["RequestSettled", *STOP_WRITES]
    stop = assert_stopped(wc, item.id, "work_item_tokens_exhausted")
    assert stop.details == {}
    ledger = wc.ledger(item.id)
    assert ledger.charged_tokens == 1_100 and ledger.reservations[a].charged_tokens == 700
    # the overrun blocks admission, and resume, until the limit is above it
    assert wc.reserve_request(item.id, request=req(2)).code == "work_item_tokens_exhausted"
    extend(wc, item.id, max_tokens=100)  # 1_100: still spent
    with refused(wc, CommandRefused, EXTEND_FIRST):
        resume(wc, item.id)
    extend(wc, item.id, max_tokens=2)  # 1_102
    resume(wc, item.id)
    assert wc.ledger(item.id).charged_tokens == 1_100
    assert wc.reserve_request(item.id, request=req(2)).allowed
    assert wc.reserve_request(item.id, request=req(2)).code == "work_item_tokens_exhausted"


@pytest.mark.parametrize("how", ["cancelled", "done"])
def test_a_late_overrun_leaves_a_finished_item_alone(wc: WorkCenter, how: str) -> None:
    """resource-ledger.md 8: record the stop, do not reopen done or cancelled items."""
    if how == "done":
        item = make(wc, "linear", stages=("implement",), max_tokens=1_000)
        claimed = claim(wc)
        admission = wc.reserve_request(item.id, request=req(500), run_id=claimed.run_id)
        wc.finish_run(claimed, report())
    else:
        item = make(wc, max_tokens=1_000)
        admission = wc.reserve_request(item.id, request=req(500))
        wc.cancel(item.id)
    before = wc.event_count()
    assert wc.settle_request(item.id, admission.request_id, usage={"total_tokens": 1_001})
    assert written(wc, before) == ["RequestSettled", "ExecutionStopped", "BudgetStopRecorded"]
    assert_stopped(wc, item.id, "work_item_tokens_exhausted", status=how)
    # What a resume needs is said only of an item that may be resumed (ADR-0133).
    needs = {} if how == "done" else {"maxTokens": 2}
    assert wc.detail(item.id)["executionControl"].get("resumeNeeds", {}) == needs
    assert wc.web_reads.budget(item.id)["executionControl"].get("resumeNeeds", {}) == needs
    assert bool(budget_json(wc, item.id)["resume_needs"]) == bool(needs)
    extend(wc, item.id, max_tokens=10_000)
    if how == "done":  # its final result is written once (ADR-0133; it was resumed)
        with refused(wc, CommandRefused, "WorkItem is done; only a cancelled or stopped"):
            resume(wc, item.id)
        assert wc.work_item(item.id).status == "done"
    else:
        assert resume(wc, item.id).stopped is None


def test_a_crash_after_reserve_stays_counted_and_charged(
    wc: WorkCenter, db_path: Path, clock: FakeClock
) -> None:
    """Invariant 3: restarts, replayed responses and re-settles never double-count."""
    item = make(wc)
    request_id = wc.reserve_request(item.id, request=DECIDE, request_id="t1").request_id
    restarted = WorkCenter.open(db_path, clock=clock, boot_id="boot-2")
    try:
        ledger = restarted.ledger(item.id)
        assert (ledger.request_count, ledger.charged_tokens) == (1, 117)
        assert ledger.reservations[request_id].status == "reserved"
        replay = restarted.reserve_request(item.id, request=DECIDE, request_id="t1")
        assert replay.code == "request_already_reserved"
        assert restarted.settle_request(item.id, request_id, usage={"total_tokens": 90})
        assert not wc.settle_request(item.id, request_id, usage={"total_tokens": 90})
        assert (wc.ledger(item.id).request_count, wc.ledger(item.id).charged_tokens) == (1, 90)
    finally:
        restarted.close()


def test_a_reserve_whose_answer_was_lost_after_it_committed_is_allowed_once(
    wc: WorkCenter, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The connection lost after the ledger's write committed: the recorder sends it
    again, loses the version check to itself, and the reservation is decided again. It
    was denied ``request_already_reserved``, so the request was never sent and its
    estimate stayed charged (found by acceptance testing, ADR-0136). A reservation
    whose id the call made itself can only be its own: allowed, nothing written again.
    An id the caller gave may be another's, and is still denied (above)."""
    item = make(wc, "linear")
    claimed = claim(wc)
    save = Repository.save
    lost: list[bool] = []

    def committed_then_lost(self: Repository, unit: Any) -> None:
        save(self, unit)
        if not lost:
            lost.append(True)
            raise IntegrityError("the write sent again lost to its own first send")

    monkeypatch.setattr(Repository, "save", committed_then_lost)
    before = wc.event_count()
    admission = wc.reserve_request(item.id, request=DECIDE, run=claimed)
    assert lost and (admission.allowed, admission.code) == (True, None)
    ledger = wc.ledger(item.id)
    assert (ledger.request_count, ledger.charged_tokens) == (1, 117)
    assert ledger.reservations[admission.request_id].run_id == claimed.run_id
    assert wc.event_count() == before + 1  # the one reservation


def test_a_hidden_retry_is_a_second_request_and_the_first_stays_at_estimate(
    wc: WorkCenter,
) -> None:
    """Invariant 4."""
    item = make(wc)
    assert wc.reserve_request(item.id, request=DECIDE, kind="coordinator", request_id="t").allowed
    retry_id = f"t:retry:{uuid.uuid4()}"
    assert wc.reserve_request(
        item.id, request=DECIDE, kind="coordinator", request_id=retry_id
    ).allowed
    assert wc.settle_request(item.id, "t", usage=None, complete=False)
    assert wc.settle_request(item.id, retry_id, usage={"total_tokens": 40})
    ledger = wc.ledger(item.id)
    assert ledger.request_count == 2
    assert [(r.status, r.charged_tokens) for r in ledger.reservations.values()] == [
        ("unknown", 117),
        ("reported", 40),
    ]


# --- service: the attempt gate through claim -----------------------------------------


def assert_attempts_stop(
    wc: WorkCenter, item_id: UUID, action_id: UUID, attempts: int, original: int, effective: int
) -> None:
    before = wc.event_count()
    assert wc.claim_next(WORKER) is None
    assert written(wc, before) == STOP_WRITES
    stop = assert_stopped(wc, item_id, "action_attempts_exhausted")
    assert stop.details == {
        "action_id": str(action_id),
        "attempts": attempts,
        "original_max_attempts": original,
        "effective_max_attempts": effective,
    }
    action = wc.action(action_id)
    assert (action.status, len(action.runs)) == ("ready", attempts)  # no Run was created
    assert_nothing_claimable(wc)


def no_attempt_left(wc: WorkCenter, item_id: UUID) -> list[UUID]:
    """The Actions whose timeline entry tells the dashboard its retry, answer and
    guidance are refused for their attempts (ADR-0127)."""
    actions = wc.web_reads.timeline(item_id)["actions"]
    return [UUID(a["id"]) for a in actions if a.get("noAttemptLeft")]


def test_a_retry_with_no_attempt_left_is_refused_until_attempts_are_extended(
    wc: WorkCenter,
) -> None:
    """ADR-0091: taken, the retry would only stop the item at its next claim. The
    timeline says so before a click (ADR-0127)."""
    item = make(wc)
    plan(wc, item.id)
    first = claim(wc)
    wc.finish_run(first, report("retryable"))
    assert wc.action(first.action_id).status == "ready"
    assert no_attempt_left(wc, item.id) == []
    wc.finish_run(claim(wc), report("retryable"))
    assert wc.action(first.action_id).status == "failed"
    assert no_attempt_left(wc, item.id) == [first.action_id]
    for answer in ("", "Try the other parser"):
        with refused(
            wc,
            CommandRefused,
            r"Action 1 has no attempt left \(used 2 of 2\): extend max_action_attempts first, "
            "then retry",
        ):
            wc.retry(
                item.id,
                first.action_id,
                expected_version=wc.work_item(item.id).version,
                answer=answer,
            )
    extend(wc, item.id, max_action_attempts=1)
    assert no_attempt_left(wc, item.id) == []
    wc.retry(
        item.id,
        first.action_id,
        expected_version=wc.work_item(item.id).version,
        answer="Try the other parser",
    )
    third = claim(wc)
    assert (third.action_id, len(wc.action(third.action_id).runs)) == (first.action_id, 3)
    assert wc.action(first.action_id).context[-1].text == "Try the other parser"
    assert wc.ledger(item.id).stop_reason is None


def test_a_linear_retry_is_a_new_action_with_its_own_attempts(wc: WorkCenter) -> None:
    item = make(wc, "linear", stages=("implement",))
    for _ in range(2):
        failed = claim(wc)
        wc.finish_run(failed, report("retryable"))
    assert wc.action(failed.action_id).status == "failed"
    assert no_attempt_left(wc, item.id) == []  # its retry plans a new Action
    wc.retry(item.id, failed.action_id, expected_version=wc.work_item(item.id).version)
    replacement = claim(wc)
    assert replacement.action_id != failed.action_id
    assert len(wc.action(replacement.action_id).runs) == 1


def guide(wc: WorkCenter, item_id: UUID, action_id: UUID, guidance: str) -> None:
    wc.guide(item_id, action_id, expected_version=wc.work_item(item_id).version, guidance=guidance)


def test_guidance_resets_do_not_reset_the_attempt_count(wc: WorkCenter) -> None:
    item = make(wc)
    plan(wc, item.id)
    claimed = claim(wc)
    guide(wc, item.id, claimed.action_id, "Look at the parser first")
    claimed = claim(wc)  # the second of two attempts, running
    assert no_attempt_left(wc, item.id) == [claimed.action_id]
    with refused(wc, CommandRefused, r"no attempt left \(used 2 of 2\).*then guide it"):
        guide(wc, item.id, claimed.action_id, "Look at the lexer instead")
    action = wc.action(claimed.action_id)
    assert (action.generation, action.status, len(action.runs)) == (2, "running", 2)


def test_a_guided_action_whose_last_attempt_ends_retryable_stops_its_item(
    wc: WorkCenter,
) -> None:
    """ADR-0132: the Action's own rule counts its generation's Runs and re-queues it; the
    ledger counts every Run and stops the item at its next claim, naming the Action; the
    human extends its attempts and resumes, and the Coordinator plans again. The
    contract's two rules, kept (lifecycle's auto-retry, the ledger's claim gate)."""
    item = make(wc)
    plan(wc, item.id)
    claimed = claim(wc)
    guide(wc, item.id, claimed.action_id, "Look at the parser first")
    wc.finish_run(claim(wc), report("retryable"))  # the second of two, generation 2's first
    action = wc.action(claimed.action_id)
    assert (action.generation, action.attempt, action.status) == (2, 1, "ready")
    assert no_attempt_left(wc, item.id) == [claimed.action_id]
    assert_attempts_stop(wc, item.id, claimed.action_id, 2, 2, 2)
    with refused(wc, CommandRefused, EXTEND_ATTEMPTS):
        resume(wc, item.id)
    extend(wc, item.id, max_action_attempts=1)
    resumed = resume(wc, item.id)  # a dynamic item's Coordinator plans again on resume
    assert (resumed.status, resumed.stopped, wc.action(claimed.action_id).status) == (
        "running",
        None,
        "superseded",
    )
    plan(wc, item.id)
    assert claim(wc).work_item_id == item.id


def test_the_limit_caps_a_larger_planned_maximum(wc: WorkCenter) -> None:
    item = make(wc)
    plan(wc, item.id, action_spec(maxAttempts=5))
    for _ in range(3):
        claimed = claim(wc)
        wc.finish_run(claimed, report("retryable"))
    assert wc.action(claimed.action_id).status == "ready"  # the Action itself would retry
    assert_attempts_stop(wc, item.id, claimed.action_id, 3, 5, 3)


def test_two_cancel_resume_rounds_exhaust_two_attempts(wc: WorkCenter) -> None:
    """Invariant 10, then invariant 8 for the stopping Action."""
    item = make(wc, "linear", max_action_attempts=2)
    for _ in range(2):
        claimed = claim(wc)
        wc.cancel(item.id)
        resume(wc, item.id)
    assert wc.action(claimed.action_id).status == "ready"
    assert_attempts_stop(wc, item.id, claimed.action_id, 2, 2, 2)
    with refused(wc, CommandRefused, EXTEND_ATTEMPTS):
        resume(wc, item.id)
    extend(wc, item.id, max_requests=10, max_tokens=10)
    with refused(wc, CommandRefused, EXTEND_ATTEMPTS):
        resume(wc, item.id)
    ledger = extend(wc, item.id, max_action_attempts=1)
    assert (ledger.attempts_extension, ledger.effective_max_attempts(2)) == (1, 3)
    assert wc.ledger(item.id).stop_reason is not None  # extend cleared nothing
    resumed = resume(wc, item.id)
    assert (resumed.status, resumed.stopped, resumed.current_action_id) == (
        "ready",
        None,
        claimed.action_id,
    )
    third = claim(wc)
    assert (third.action_id, len(wc.action(third.action_id).runs)) == (claimed.action_id, 3)


def test_a_stopped_item_claims_nothing_and_writes_nothing(wc: WorkCenter) -> None:
    item = make(wc, max_requests=1)
    plan(wc, item.id)
    stop_by_requests(wc, item.id)
    assert_nothing_claimable(wc)
    assert wc.work_item(item.id).entries("ready")  # the Action waits for a resume
    # other items are still claimed
    other = make(wc)
    plan(wc, other.id)
    assert claim(wc).work_item_id == other.id


def stop_while_running(wc: WorkCenter, mode: wi.Mode, stages: tuple[str, ...] | None) -> Claim:
    item = make(wc, mode, stages=stages, max_run_requests=1)
    if mode == "dynamic":
        plan(wc, item.id)
    claimed = claim(wc)
    assert wc.reserve_request(item.id, request=req(10), run_id=claimed.run_id).allowed
    assert wc.reserve_request(item.id, request=req(10), run_id=claimed.run_id).stops
    assert_stopped(wc, item.id, "run_requests_exhausted")
    return claimed


@pytest.mark.parametrize(
    ("mode", "stages"),
    [("dynamic", None), ("linear", None), ("linear", ("implement",))],
    ids=["dynamic", "linear", "linear-final-stage"],
)
@pytest.mark.parametrize("ending", ["interrupt", "completed", "retryable", "failed", "waiting"])
def test_a_live_run_may_end_while_stopped_and_the_item_keeps_needing_attention(
    wc: WorkCenter, mode: wi.Mode, stages: tuple[str, ...] | None, ending: str
) -> None:
    claimed = stop_while_running(wc, mode, stages)
    item_id = claimed.work_item_id
    first = next(iter(wc.ledger(item_id).reservations))
    assert wc.renew_lease(claimed)
    assert wc.settle_request(item_id, first, usage={"total_tokens": 5})  # final usage kept
    if ending == "interrupt":
        wc.interrupt(claimed, reason="worker shutting down")
    else:
        wc.finish_run(claimed, report(ending))
    item = wc.work_item(item_id)
    assert (item.status, item.stopped, item.final_result) == (
        "needs_attention",
        "run_requests_exhausted",
        None,
    )
    assert wc.action(claimed.action_id).status != "running"
    assert_nothing_claimable(wc)


# --- service: coordinator failures ---------------------------------------------------


def test_coordinator_failures_back_off_and_the_last_one_stops(
    wc: WorkCenter, budget: BudgetCommands, clock: FakeClock
) -> None:
    """Invariant 9: failures 1..10 back off 1, 2, 4 ... 256, 256 s; failure max stops."""
    item = make(wc, max_coordinator_failures=10)
    expected = [1, 2, 4, 8, 16, 32, 64, 128, 256, 256]
    for n, seconds in enumerate(expected, start=1):
        clock.advance(1_000)
        before = wc.event_count()
        ledger = budget.record_coordinator_failure(item.id, turn_id=f"turn-{n}")
        assert ledger.coordinator_failures == n
        assert ledger.retry_after == clock.now() + timedelta(seconds=seconds)
        if n < 10:
            assert written(wc, before) == ["CoordinatorFailureRecorded"]
            assert ledger.stop_reason is None
    assert written(wc, before) == ["CoordinatorFailureRecorded", *STOP_WRITES]
    stop = assert_stopped(wc, item.id, "coordinator_failures_exhausted")
    assert stop.details == {"turn_id": "turn-10", "failures": 10}


def test_default_three_coordinator_failures_stop(wc: WorkCenter, budget: BudgetCommands) -> None:
    item = make(wc)
    for n in range(2):
        budget.record_coordinator_failure(item.id, turn_id=f"t{n}")
    assert wc.ledger(item.id).stop_reason is None
    budget.record_coordinator_failure(item.id, turn_id="t2")
    assert assert_stopped(wc, item.id, "coordinator_failures_exhausted").details == {
        "turn_id": "t2",
        "failures": 3,
    }


def test_can_coordinate_automatically(
    wc: WorkCenter, budget: BudgetCommands, clock: FakeClock
) -> None:
    item = make(wc)
    assert budget.can_coordinate_automatically(item.id)
    budget.record_coordinator_failure(item.id, turn_id="t1")
    assert not budget.can_coordinate_automatically(item.id)
    assert budget.can_coordinate_automatically(item.id, user_message=True)  # skips the backoff
    clock.advance(0.999)
    assert not budget.can_coordinate_automatically(item.id)
    clock.advance(0.001)
    assert budget.can_coordinate_automatically(item.id)  # now >= retry_after
    # a stop is never skipped, not even by a user message
    stopped = make(wc, max_requests=1)
    stop_by_requests(wc, stopped.id)
    assert not budget.can_coordinate_automatically(stopped.id, user_message=True)
    # missing, cancelled and done items are never coordinated
    assert not budget.can_coordinate_automatically(uuid.uuid4(), user_message=True)
    cancelled = wc.cancel(make(wc).id)
    assert not budget.can_coordinate_automatically(cancelled.id, user_message=True)
    assert not budget.can_coordinate_automatically(done_item(wc).id, user_message=True)


def test_resume_keeps_failures_and_clears_the_backoff(
    wc: WorkCenter, budget: BudgetCommands
) -> None:
    item = make(wc)
    for n in range(3):
        budget.record_coordinator_failure(item.id, turn_id=f"t{n}")
    assert_stopped(wc, item.id, "coordinator_failures_exhausted")
    with refused(wc, CommandRefused, EXTEND_FIRST):
        resume(wc, item.id)
    extend(wc, item.id, max_coordinator_failures=1)
    resume(wc, item.id)
    ledger = wc.ledger(item.id)
    assert (ledger.coordinator_failures, ledger.retry_after, ledger.stop_reason) == (3, None, None)
    assert budget.can_coordinate_automatically(item.id)
    budget.record_coordinator_failure(item.id, turn_id="t3")  # 4 of 4: stops again
    assert_stopped(wc, item.id, "coordinator_failures_exhausted")


def test_resuming_a_cancelled_item_clears_the_backoff(
    wc: WorkCenter, budget: BudgetCommands
) -> None:
    """resume: retry_after = 0 and the control version moves, for a cancelled item too."""
    item = make(wc)
    budget.record_coordinator_failure(item.id, turn_id="t1")
    wc.cancel(item.id)
    before = wc.event_count()
    resumed = resume(wc, item.id)
    assert resumed.status == "running" and resumed.stopped is None
    assert "ExecutionResumed" in written(wc, before)
    assert "BudgetStopCleared" not in written(wc, before)  # there was no stop to clear
    ledger = wc.ledger(item.id)
    assert (ledger.retry_after, ledger.coordinator_failures) == (None, 1)
    assert ledger.control_version == ledger.version
    assert budget.can_coordinate_automatically(item.id)


# --- service: extend -----------------------------------------------------------------

SAFE = 2**53 - 1


@pytest.mark.parametrize(
    "additions",
    [
        {},
        {"max_widgets": 1},
        {"max_requests": 1, "max_widgets": 1},
        {"max_requests": 1.5},
        {"max_requests": 2.0},
        {"max_requests": "2"},
        {"max_requests": None},
        {"max_requests": True},
        {"max_requests": 0},
        {"max_requests": -1},
        {"max_tokens": 2**53},
        {"max_tokens": SAFE - 2_000_000 + 1},
        {"max_requests": 1, "max_tokens": SAFE},
        [("max_requests", 1)],
        None,
    ],
    ids=repr,
)
def test_invalid_additions_are_refused_and_write_nothing(wc: WorkCenter, additions: Any) -> None:
    item = make(wc)
    with refused(wc, InvalidInput):
        wc.extend_budget(item.id, expected_version=wc.ledger(item.id).version, additions=additions)
    assert wc.ledger(item.id).limits == rl.Limits()


def test_extend_up_to_the_largest_safe_integer(wc: WorkCenter) -> None:
    item = make(wc)
    ledger = extend(wc, item.id, max_tokens=SAFE - 2_000_000)
    assert ledger.limits.max_tokens == SAFE
    with refused(wc, InvalidInput):
        extend(wc, item.id, max_tokens=1)


def test_extend_raises_limits_and_writes_only_budget_extended(
    wc: WorkCenter, budget: BudgetCommands
) -> None:
    item = make(wc)
    wc.reserve_request(item.id, request=DECIDE)
    budget.record_coordinator_failure(item.id, turn_id="t")
    before_ledger = wc.ledger(item.id)
    before = wc.event_count()
    ledger = extend(
        wc,
        item.id,
        max_requests=1,
        max_tokens=2,
        max_run_requests=3,
        max_action_attempts=4,
        max_coordinator_failures=5,
    )
    assert written(wc, before) == ["BudgetExtended"]
    assert ledger.limits == rl.Limits(
        max_requests=201,
        max_tokens=2_000_002,
        max_run_requests=43,
        max_action_attempts=7,
        max_coordinator_failures=8,
    )
    assert ledger.attempts_extension == 4
    assert ledger.control_version == ledger.version == before_ledger.version + 1
    assert ledger.reservations == before_ledger.reservations
    assert ledger.coordinator_failures == 1 and ledger.retry_after == before_ledger.retry_after
    assert wc.work_item(item.id).version == item.version  # the WorkItem is untouched
    extend(wc, item.id, max_action_attempts=1)
    assert wc.ledger(item.id).attempts_extension == 5


def test_extend_clears_no_stop(wc: WorkCenter) -> None:
    item = make(wc, max_requests=1)
    plan(wc, item.id)
    stop_by_requests(wc, item.id)
    extend(wc, item.id, max_requests=100)
    assert_stopped(wc, item.id, "work_item_requests_exhausted")
    assert wc.reserve_request(item.id, request={}).code == "work_item_requests_exhausted"
    assert_nothing_claimable(wc)


def test_reservations_settlements_and_failures_never_conflict_with_extend(
    wc: WorkCenter,
    budget: BudgetCommands,
) -> None:
    item = make(wc)
    seen = wc.ledger(item.id).version
    request_id = wc.reserve_request(item.id, request=DECIDE).request_id
    wc.settle_request(item.id, request_id, usage={"total_tokens": 3})
    budget.record_coordinator_failure(item.id, turn_id="t")
    ledger = wc.extend_budget(item.id, expected_version=seen, additions={"max_requests": 1})
    assert ledger.limits.max_requests == 201


def conflict_after_stop(wc: WorkCenter, item_id: UUID, seen: int) -> None:
    wc.reserve_request(item_id, request=req(2))
    stop_by_requests(wc, item_id)


def conflict_after_extend(wc: WorkCenter, item_id: UUID, seen: int) -> None:
    wc.extend_budget(item_id, expected_version=seen, additions={"max_tokens": 1})


def conflict_after_resume(wc: WorkCenter, item_id: UUID, seen: int) -> None:
    wc.cancel(item_id)
    resume(wc, item_id)


@pytest.mark.parametrize(
    "move",
    [conflict_after_stop, conflict_after_extend, conflict_after_resume],
    ids=lambda move: move.__name__,
)
def test_extend_and_resume_after_a_control_event_are_refused(wc: WorkCenter, move: Any) -> None:
    """Invariant 7: a stop, extend or resume after the expected version conflicts."""
    item = make(wc, max_requests=2)
    seen = wc.ledger(item.id).version
    move(wc, item.id, seen)
    ledger = wc.ledger(item.id)
    with refused(wc, VersionConflict):
        wc.extend_budget(item.id, expected_version=seen, additions={"max_requests": 5})
    if ledger.stop_reason is None:
        wc.cancel(item.id)
    with refused(wc, VersionConflict):
        wc.resume(
            item.id,
            expected_version=wc.work_item(item.id).version,
            expected_ledger_version=seen,
        )
    assert wc.ledger(item.id).limits == ledger.limits


def test_an_unknown_expected_version_is_refused(wc: WorkCenter) -> None:
    item = make(wc)
    version = wc.ledger(item.id).version
    for expected in (version + 1, 0):
        with refused(wc, VersionConflict):
            wc.extend_budget(item.id, expected_version=expected, additions={"max_requests": 1})


def test_of_two_extensions_from_one_version_exactly_one_wins(wc: WorkCenter) -> None:
    item = make(wc)
    seen = wc.ledger(item.id).version
    wc.extend_budget(item.id, expected_version=seen, additions={"max_requests": 5})
    with refused(wc, VersionConflict):
        wc.extend_budget(item.id, expected_version=seen, additions={"max_requests": 7})
    assert wc.ledger(item.id).limits.max_requests == 205


def test_two_services_racing_to_extend_exactly_one_wins(
    wc: WorkCenter, db_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The loser decided on the same version, lost the write, re-checked and conflicted."""
    item = make(wc)
    seen = wc.ledger(item.id).version
    other = WorkCenter.open(db_path, clock=clock, boot_id="boot-2")
    try:
        other.ledger(item.id)  # both caches hold the version both users saw
        put = wc.store.events.put  # where a command's save writes its events
        raced: list[int] = []

        def put_after_the_other(events: Any, **kwargs: Any) -> Any:
            if not raced:
                raced.append(1)
                other.extend_budget(item.id, expected_version=seen, additions={"max_requests": 5})
            return put(events, **kwargs)

        monkeypatch.setattr(wc.store.events, "put", put_after_the_other)
        with pytest.raises(VersionConflict):
            wc.extend_budget(item.id, expected_version=seen, additions={"max_requests": 7})
        assert raced
        for center in (wc, other):
            assert center.ledger(item.id).limits.max_requests == 205
        assert ledger_names(wc, item.id) == ["LedgerOpened", "BudgetExtended"]
    finally:
        other.close()


# --- service: resume -----------------------------------------------------------------


def stop_by_tokens(wc: WorkCenter, item_id: UUID) -> None:
    assert wc.reserve_request(item_id, request=req(2_000_000)).allowed
    assert wc.reserve_request(item_id, request=req(2)).stops


def stop_by_failures(wc: WorkCenter, item_id: UUID) -> None:
    for n in range(3):
        budget_commands(wc).record_coordinator_failure(item_id, turn_id=f"t{n}")


@pytest.mark.parametrize(
    ("stop", "limit", "need"),
    [
        (stop_by_requests, "max_requests", 1),
        (stop_by_tokens, "max_tokens", 2),  # room for the refused request of 2 tokens
        (stop_by_failures, "max_coordinator_failures", 1),
    ],
    ids=["requests", "tokens", "failures"],
)
def test_resume_is_refused_while_a_budget_is_spent(
    wc: WorkCenter, stop: Any, limit: str, need: int
) -> None:
    """Invariant 8: refused while spent, works after extend."""
    item = make(wc, max_requests=3)
    stop(wc, item.id)
    with refused(wc, CommandRefused, f"{limit} is exhausted: {EXTEND_FIRST}"):
        resume(wc, item.id)
    wc.cancel(item.id)  # cancelling changes nothing: still spent
    with refused(wc, CommandRefused, EXTEND_FIRST):
        resume(wc, item.id)
    extend(wc, item.id, **{limit: need})
    resumed = resume(wc, item.id)
    assert (resumed.status, resumed.stopped) == ("running", None)


def stop_with_room_for_100_of_300(wc: WorkCenter) -> wi.WorkItemState:
    """A token stop whose refused request (300 tokens) lacks 200: 900 of 1,000 charged."""
    item = make(wc, max_tokens=1_000)
    assert wc.reserve_request(item.id, request=req(900)).allowed
    assert wc.reserve_request(item.id, request=req(300)).code == "work_item_tokens_exhausted"
    return item


def test_a_token_stop_resumes_only_once_the_request_it_refused_fits(wc: WorkCenter) -> None:
    """ADR-0091: a resume while the refused request still does not fit would stop the
    item again at its next request, and count a Coordinator failure for nothing."""
    item = stop_with_room_for_100_of_300(wc)
    assert wc.ledger(item.id).charged_tokens < 1_000  # nothing is spent, yet it cannot go on
    with refused(wc, CommandRefused, r"extend the budget first.*needs 200 more tokens"):
        resume(wc, item.id)
    extend(wc, item.id, max_tokens=199)
    with refused(wc, CommandRefused, r"needs 1 more token\)"):
        resume(wc, item.id)
    extend(wc, item.id, max_tokens=1)
    assert resume(wc, item.id).status == "running"
    assert wc.reserve_request(item.id, request=req(300)).allowed  # the refused one fits


def test_a_resume_names_every_limit_still_spent(wc: WorkCenter) -> None:
    """A token stop whose turns also used up the Coordinator's failures: the refusal
    named the tokens only, and a person learnt of the failures a round later."""
    item = spend_tokens_and_failures(wc)
    both = r"^max_tokens and max_coordinator_failures are exhausted: extend the budget first"
    with refused(wc, CommandRefused, both + r".*needs 200 more tokens\)$"):
        resume(wc, item.id)
    extend(wc, item.id, max_tokens=200)
    with refused(wc, CommandRefused, r"^max_coordinator_failures is exhausted: "):
        resume(wc, item.id)
    extend(wc, item.id, max_coordinator_failures=1)
    assert resume(wc, item.id).status == "running"


def test_a_token_stop_by_an_overrun_names_no_request_and_resumes_once_under_the_limit(
    wc: WorkCenter,
) -> None:
    item = overrun(wc)
    stop = wc.ledger(item.id).stop_reason
    assert stop is not None and stop.details == {}
    with refused(wc, CommandRefused, f"max_tokens is exhausted: {EXTEND_FIRST}"):
        resume(wc, item.id)
    extend(wc, item.id, max_tokens=201)
    assert resume(wc, item.id).status == "running"


def spend_tokens_and_failures(wc: WorkCenter) -> wi.WorkItemState:
    item = stop_with_room_for_100_of_300(wc)
    for n in range(3):
        budget_commands(wc).record_coordinator_failure(item.id, turn_id=f"t{n}")
    return item


def overrun(wc: WorkCenter) -> wi.WorkItemState:
    item = make(wc, max_tokens=1_000)
    allowed = wc.reserve_request(item.id, request=req(900))
    assert wc.settle_request(item.id, allowed.request_id, usage={"total_tokens": 1_200})
    return item


def stop_by_attempts(wc: WorkCenter) -> wi.WorkItemState:
    item = make(wc)
    plan(wc, item.id, action_spec(maxAttempts=5))
    for _ in range(3):
        wc.finish_run(claim(wc), report("retryable"))
    assert wc.claim_next(WORKER) is None  # the stop, 3 of 3 attempts used
    return item


def cancel_with_requests_spent(wc: WorkCenter) -> wi.WorkItemState:
    item = make(wc, max_requests=1)
    assert wc.reserve_request(item.id, request={}).allowed
    wc.cancel(item.id)
    return item


def by_requests(wc: WorkCenter) -> wi.WorkItemState:
    item = make(wc, max_requests=3)
    stop_by_requests(wc, item.id)
    return item


SNAKE = {
    "maxRequests": "max_requests",
    "maxTokens": "max_tokens",
    "maxActionAttempts": "max_action_attempts",
    "maxCoordinatorFailures": "max_coordinator_failures",
}


@pytest.mark.parametrize(
    ("spend", "needs"),
    [
        (by_requests, {"maxRequests": 1}),
        (stop_with_room_for_100_of_300, {"maxTokens": 200}),
        (spend_tokens_and_failures, {"maxTokens": 200, "maxCoordinatorFailures": 1}),
        (overrun, {"maxTokens": 201}),
        (stop_by_attempts, {"maxActionAttempts": 1}),
        (cancel_with_requests_spent, {"maxRequests": 1}),
    ],
    ids=["requests", "tokens", "tokens-and-failures", "overrun", "attempts", "cancelled"],
)
def test_the_snapshot_says_the_least_each_limit_needs_before_a_resume(
    wc: WorkCenter, spend: Any, needs: dict[str, int]
) -> None:
    """ADR-0096: the page reads what a resume needs instead of repeating the ledger's
    rule; each figure is the least: one fewer of any, and the resume is refused."""
    item = spend(wc)
    assert wc.detail(item.id)["executionControl"]["resumeNeeds"] == needs
    short = max(needs, key=lambda name: needs[name])
    fewer = {SNAKE[name]: need - (name == short) for name, need in needs.items()}
    if any(fewer.values()):
        extend(wc, item.id, **{name: n for name, n in fewer.items() if n})
    with refused(wc, CommandRefused, "extend"):
        resume(wc, item.id)
    assert wc.detail(item.id)["executionControl"]["resumeNeeds"] == {short: 1}
    extend(wc, item.id, **{SNAKE[short]: 1})
    assert "resumeNeeds" not in wc.detail(item.id)["executionControl"]
    assert resume(wc, item.id).status in ("running", "ready")


def test_a_cancelled_item_with_a_spent_budget_needs_an_extend(wc: WorkCenter) -> None:
    item = cancel_with_requests_spent(wc)  # spent, but nothing stopped it
    assert wc.ledger(item.id).stop_reason is None
    with refused(wc, CommandRefused, f"max_requests is exhausted: {EXTEND_FIRST}"):
        resume(wc, item.id)
    extend(wc, item.id, max_requests=1)
    assert resume(wc, item.id).status == "running"


def test_resume_clears_the_stop_and_keeps_everything_else(
    wc: WorkCenter, budget: BudgetCommands
) -> None:
    item = make(wc, max_requests=3)
    plan(wc, item.id)
    claimed = claim(wc)
    wc.finish_run(claimed, report("retryable"))
    budget.record_coordinator_failure(item.id, turn_id="t")
    stop_by_requests(wc, item.id)
    stopped_item = wc.work_item(item.id)
    extended = extend(wc, item.id, max_requests=1)
    before = wc.event_count()
    resumed = wc.resume(
        item.id, expected_version=stopped_item.version, expected_ledger_version=extended.version
    )
    names = written(wc, before)
    assert {"ExecutionResumed", "BudgetStopCleared", "WorkItemResumed"} <= set(names)
    assert names.count("ActionInvalidated") == 2  # cancelled, then superseded
    ledger = wc.ledger(item.id)
    assert (ledger.stop_reason, ledger.retry_after) == (None, None)
    assert ledger.control_version == ledger.version == extended.version + 1
    assert ledger.reservations == extended.reservations
    assert (ledger.limits, ledger.coordinator_failures) == (extended.limits, 1)
    assert (resumed.stopped, resumed.status, resumed.current_action_id) == (
        None,
        "running",
        None,
    )
    assert resumed.contract_revision == item.contract_revision
    action = wc.action(claimed.action_id)
    assert (action.status, len(action.runs)) == ("superseded", 1)  # cancelled, then superseded
    assert wc.reserve_request(item.id, request={}).allowed


def test_resume_with_a_stale_ledger_version_is_refused(wc: WorkCenter) -> None:
    item = make(wc, max_requests=1)
    stopped = stop_by_requests(wc, item.id)
    extended = extend(wc, item.id, max_requests=1)
    with refused(wc, VersionConflict):
        wc.resume(
            item.id,
            expected_version=wc.work_item(item.id).version,
            expected_ledger_version=stopped.version,
        )
    wc.resume(
        item.id,
        expected_version=wc.work_item(item.id).version,
        expected_ledger_version=extended.version,
    )
    refusal = "only a cancelled or stopped WorkItem that is not done can be resumed"
    with refused(wc, CommandRefused, refusal):
        resume(wc, item.id)


def test_settlements_after_the_seen_version_do_not_conflict_with_resume(wc: WorkCenter) -> None:
    item = make(wc, max_requests=2)
    pending = wc.reserve_request(item.id, request=req(10)).request_id
    stop_by_requests(wc, item.id)
    seen = extend(wc, item.id, max_requests=1).version
    assert wc.settle_request(item.id, pending, usage={"total_tokens": 4})
    wc.resume(item.id, expected_version=wc.work_item(item.id).version, expected_ledger_version=seen)
    assert wc.ledger(item.id).stop_reason is None


def test_only_resume_clears_a_stop(wc: WorkCenter, db_path: Path, clock: FakeClock) -> None:
    """Invariant 6: not cancel, retry, guidance, contract edits, restarts or recovery."""
    item = make(wc, max_requests=1)
    plan(wc, item.id, action_spec(), action_spec("implement", "Change it"))
    claimed = claim(wc)
    wc.finish_run(claimed, report("failed"))
    stop_by_requests(wc, item.id)
    code = "work_item_requests_exhausted"
    wc.retry(item.id, claimed.action_id, expected_version=wc.work_item(item.id).version)
    assert_stopped(wc, item.id, code)
    ready = wc.work_item(item.id).entries("ready")[0].action_id
    wc.guide(item.id, ready, expected_version=wc.work_item(item.id).version, guidance="Go on")
    assert_stopped(wc, item.id, code)
    restarted = WorkCenter.open(db_path, clock=clock, boot_id="boot-2")
    try:
        restarted.recover()
        assert_stopped(restarted, item.id, code)
        assert restarted.claim_next("w2") is None
    finally:
        restarted.close()
    wc.update_contract(item.id, expected_version=wc.work_item(item.id).version, goal="New goal")
    assert_stopped(wc, item.id, code)
    with refused(wc, CommandRefused, "stopped by its budget"):
        plan(wc, item.id)
    wc.cancel(item.id)
    assert_stopped(wc, item.id, code, status="cancelled")
    extend(wc, item.id, max_requests=1)
    assert resume(wc, item.id).stopped is None


@pytest.mark.parametrize(
    "limits",
    [
        {"max_tokens": 0},
        {"max_tokens": -1},
        {"max_tokens": "3"},
        {"max_tokens": True},
        {"max_tokens": 2.0},
        {"max_tokens": 2**53},
        {"not_a_limit": 1},
    ],
)
def test_create_refuses_invalid_limits_and_writes_nothing(wc: WorkCenter, limits: dict) -> None:
    before = wc.event_count()
    with pytest.raises(
        InvalidInput, match=r"^(limits\.max_tokens must be|.not_a_limit. is not a limit)"
    ):
        wc.create_work_item(title="t", goal="g", limits=limits)
    assert wc.event_count() == before
