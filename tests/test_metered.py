"""The metered provider (resource-ledger.md 5): every request of a Run is reserved
before it is sent and settled after it, and a denied request never reaches the
provider (invariant 2)."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Any
from uuid import UUID

import pytest
from conftest import action_spec, claim, plan
from pydantic import BaseModel

import workcenter
from workcenter.adapters.metered import MeteredProvider, usage_of
from workcenter.application import Claim, WorkCenter, WriteContention
from workcenter.domain import resource_ledger as rl
from workcenter.domain.errors import ResourceStopError, WorkcenterError

REQUEST: dict[str, Any] = {
    "messages": [{"role": "user", "content": "Decide"}],
    "max_tokens": 100,
}
ESTIMATE = 117  # resource-ledger.md 1, the spec's own example
USAGE = {"input_tokens": 30, "output_tokens": 40}


def claimed_run(wc: WorkCenter, **limits: int) -> Claim:
    item = wc.create_work_item(
        title="Metered",
        goal="Spend carefully",
        acceptance_criteria=["It works"],
        delivery_target="response",
        start=True,
        limits=limits or None,
    )
    plan(wc, item.id, action_spec())
    return claim(wc)


def rows(wc: WorkCenter, item_id: UUID) -> list[rl.Reservation]:
    return list(wc.ledger(item_id).reservations.values())


class CountingProvider:
    """Records how many requests reached it and what the ledger held at that moment."""

    def __init__(
        self, wc: WorkCenter, item_id: UUID, usage: Mapping[str, Any] | None = USAGE
    ) -> None:
        self.wc, self.item_id, self.usage = wc, item_id, usage
        self.calls = 0
        self.seen: list[list[str]] = []

    def __call__(self, request: Mapping[str, Any]) -> dict[str, Any]:
        self.calls += 1
        self.seen.append([r.status for r in rows(self.wc, self.item_id)])
        return {"content": "ok"} | ({"usage": self.usage} if self.usage is not None else {})


def test_a_request_is_reserved_before_it_is_sent_and_reported_after(wc: WorkCenter) -> None:
    run = claimed_run(wc)
    provider = CountingProvider(wc, run.work_item_id)
    metered = MeteredProvider.for_claim(wc, run, provider=provider)

    assert metered(REQUEST) == {"content": "ok", "usage": USAGE}

    assert provider.seen == [["reserved"]]
    [row] = rows(wc, run.work_item_id)
    assert (row.kind, row.run_id, row.estimated_tokens) == ("action", run.run_id, ESTIMATE)
    assert (row.status, row.charged_tokens) == ("reported", 70)
    assert row.usage == rl.Usage(input_tokens=30, output_tokens=40, total_tokens=70)


def test_a_response_without_usage_stays_charged_at_its_estimate(wc: WorkCenter) -> None:
    run = claimed_run(wc)
    metered = MeteredProvider.for_claim(
        wc, run, provider=CountingProvider(wc, run.work_item_id, usage=None)
    )
    metered(REQUEST)
    [row] = rows(wc, run.work_item_id)
    assert (row.status, row.charged_tokens, row.usage) == ("unknown", ESTIMATE, None)


def test_a_failing_call_settles_incomplete_and_its_error_propagates(wc: WorkCenter) -> None:
    run = claimed_run(wc)

    def broken(request: Mapping[str, Any]) -> Any:
        raise ConnectionError("reset by peer")

    metered = MeteredProvider.for_claim(wc, run, provider=broken)
    with pytest.raises(ConnectionError):
        metered(REQUEST)
    [row] = rows(wc, run.work_item_id)
    assert (row.status, row.charged_tokens) == ("unknown", ESTIMATE)
    assert wc.ledger(run.work_item_id).request_count == 1  # nothing is refunded


def chunks(closed: list[bool]) -> Iterator[dict[str, Any]]:
    try:
        yield {"type": "message_start", "usage": {"input_tokens": 30}}
        yield {"type": "delta", "text": "thinking..."}
        yield {"type": "message_delta", "usage": {"output_tokens": 40}}
    finally:
        closed.append(True)


def test_a_stream_read_to_its_end_is_reported_with_its_summed_usage(wc: WorkCenter) -> None:
    run = claimed_run(wc)
    closed: list[bool] = []
    metered = MeteredProvider.for_claim(wc, run, provider_stream=lambda r: chunks(closed))

    stream = metered.stream(REQUEST)
    assert rows(wc, run.work_item_id) == []  # admitted when iteration starts
    assert [c["type"] for c in stream] == ["message_start", "delta", "message_delta"]

    [row] = rows(wc, run.work_item_id)
    assert (row.status, row.charged_tokens) == ("reported", 70)
    assert row.usage == rl.Usage(input_tokens=30, output_tokens=40, total_tokens=70)
    assert closed == [True]


def test_an_abandoned_stream_settles_incomplete_with_the_usage_so_far(wc: WorkCenter) -> None:
    run = claimed_run(wc)
    closed: list[bool] = []
    metered = MeteredProvider.for_claim(wc, run, provider_stream=lambda r: chunks(closed))

    stream = metered.stream(REQUEST)
    next(stream)
    assert [r.status for r in rows(wc, run.work_item_id)] == ["reserved"]
    stream.close()

    [row] = rows(wc, run.work_item_id)
    assert (row.status, row.charged_tokens) == ("unknown", ESTIMATE)
    assert row.usage == rl.Usage(input_tokens=30, total_tokens=30)
    assert closed == [True], "the provider's stream is closed too"


def test_a_stream_left_open_is_settled_before_the_next_request(wc: WorkCenter) -> None:
    run = claimed_run(wc)
    provider = CountingProvider(wc, run.work_item_id)
    metered = MeteredProvider(
        wc,
        work_item_id=run.work_item_id,
        run_id=run.run_id,
        provider=provider,
        provider_stream=lambda r: chunks([]),
    )
    stream = metered.stream(REQUEST)
    next(stream)  # kept open: never read to its end, never closed

    metered(REQUEST)

    assert provider.seen == [["unknown", "reserved"]]
    assert [r.status for r in rows(wc, run.work_item_id)] == ["unknown", "reported"]
    before = wc.event_count()
    stream.close()  # a late close finds nothing left to settle
    assert wc.event_count() == before


def test_a_denied_request_never_reaches_the_provider(wc: WorkCenter) -> None:
    run = claimed_run(wc, max_tokens=ESTIMATE - 1)
    provider = CountingProvider(wc, run.work_item_id)
    streamed: list[Any] = []
    metered = MeteredProvider.for_claim(
        wc, run, provider=provider, provider_stream=lambda r: streamed.append(r) or []
    )

    with pytest.raises(ResourceStopError) as denied:
        metered(REQUEST)

    assert denied.value.code == "work_item_tokens_exhausted"
    assert denied.value.failure_kind == "resource_limit"
    assert denied.value.retryable is False
    assert provider.calls == 0
    ledger = wc.ledger(run.work_item_id)
    assert ledger.request_count == 0
    assert ledger.stop_reason is not None
    assert ledger.stop_reason.details == {
        "run_id": str(run.run_id),
        "estimated_next_tokens": ESTIMATE,
    }
    item = wc.work_item(run.work_item_id)
    assert (item.status, item.stopped) == ("needs_attention", "work_item_tokens_exhausted")

    # Stopped: every later request, streamed or not, is denied with the stop's code.
    before = wc.event_count()
    with pytest.raises(ResourceStopError, match="work_item_tokens_exhausted"):
        metered(REQUEST)
    with pytest.raises(ResourceStopError) as again:
        list(metered.stream(REQUEST))
    assert again.value.code == "work_item_tokens_exhausted"
    assert (provider.calls, streamed) == (0, [])
    assert wc.event_count() == before


def test_the_run_request_cap_stops_the_next_request(wc: WorkCenter) -> None:
    run = claimed_run(wc, max_run_requests=2)
    provider = CountingProvider(wc, run.work_item_id)
    metered = MeteredProvider.for_claim(wc, run, provider=provider)
    metered(REQUEST)
    metered(REQUEST)
    with pytest.raises(ResourceStopError) as denied:
        metered(REQUEST)
    assert denied.value.code == "run_requests_exhausted"
    assert provider.calls == wc.ledger(run.work_item_id).request_count == 2


def test_a_cancelled_item_admits_nothing(wc: WorkCenter) -> None:
    run = claimed_run(wc)
    provider = CountingProvider(wc, run.work_item_id)
    wc.cancel(run.work_item_id)
    with pytest.raises(ResourceStopError) as denied:
        MeteredProvider.for_claim(wc, run, provider=provider)(REQUEST)
    assert denied.value.code == "work_item_inactive"
    assert provider.calls == 0


def test_a_failed_settlement_does_not_hide_the_response(
    wc: WorkCenter, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = claimed_run(wc)
    metered = MeteredProvider.for_claim(wc, run, provider=CountingProvider(wc, run.work_item_id))
    settle = wc.settle_request

    def contended(*args: Any, **kwargs: Any) -> bool:
        raise WriteContention("busy")

    monkeypatch.setattr(wc, "settle_request", contended)
    assert metered(REQUEST)["content"] == "ok"
    assert [r.status for r in rows(wc, run.work_item_id)] == ["reserved"]  # charged at estimate

    monkeypatch.setattr(wc, "settle_request", settle)
    assert metered.settle_pending() is True
    [row] = rows(wc, run.work_item_id)
    assert (row.status, row.charged_tokens) == ("unknown", ESTIMATE)
    assert metered.settle_pending() is False


def test_a_usage_past_what_the_ledger_counts_leaves_the_request_at_its_estimate(
    wc: WorkCenter,
) -> None:
    """A server's usage past 2^53 - 1 was refused at the settlement, which the wrapper
    swallowed (the request stayed in flight); then it was charged as 2^53 - 1, which
    stopped the item past any extension (ADR-0140). It is no figure: settled unknown, at
    the request's estimate."""
    run = claimed_run(wc)
    # Past 2^53 - 1, past a float's range (Python's JSON reads it as an int), infinite.
    for huge in ({"prompt_tokens": 10**400, "completion_tokens": 3}, {"total_tokens": math.inf}):
        provider = CountingProvider(wc, run.work_item_id, usage=huge)
        metered = MeteredProvider.for_claim(wc, run, provider=provider)
        metered(REQUEST)
        assert metered.settle_pending() is False  # nothing left in flight
    for row in rows(wc, run.work_item_id):
        assert (row.status, row.charged_tokens, row.usage) == ("unknown", ESTIMATE, None)
    assert wc.ledger(run.work_item_id).stop_reason is None


def test_usage_is_read_from_keys_attributes_and_sdk_objects() -> None:
    class SdkUsage(BaseModel):
        input_tokens: int
        output_tokens: int

    class SdkResponse:
        usage = SdkUsage(input_tokens=3, output_tokens=4)

    assert usage_of({"usage": USAGE}) == USAGE
    assert usage_of({"content": "no usage"}) is None
    assert usage_of(SdkResponse()) == {"input_tokens": 3, "output_tokens": 4}
    assert usage_of("text") is None


def test_the_resource_stop_error_is_a_typed_public_error() -> None:
    error = workcenter.ResourceStopError("run_requests_exhausted")
    assert isinstance(error, WorkcenterError)
    assert error.code == "run_requests_exhausted"
    assert error.failure_kind == "resource_limit"
    assert "run_requests_exhausted" in str(error)
