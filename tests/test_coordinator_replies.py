"""What a provider reports that the Coordinator cannot take as it is: a reply with no
text fails its turn, and a usage past what the ledger counts is charged as the most it
counts; neither stops the pass over the other items due, nor escapes as an untyped
error (coordinator.md 5, resource-ledger.md 4)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import BOOT_ID, FakeClock, action_spec, create_dynamic
from coordinator_fakes import FakeRules, create_actions

from workcenter.adapters.providers.scripted import Reply, ScriptedProvider
from workcenter.application import WorkCenter
from workcenter.domain import bounds


@pytest.fixture
def wc(db_path: Path, clock: FakeClock) -> Iterator[WorkCenter]:
    center = WorkCenter.open(db_path, clock=clock, boot_id=BOOT_ID, coordinator_rules=FakeRules())
    yield center
    center.close()


class Answers:
    """A provider that reserves its request, then answers ``reply`` whatever it is."""

    max_output_tokens = None

    def __init__(self, reply: Any) -> None:
        self.reply = reply

    def answer(self, request: Any, before_request: Callable[[], None]) -> Any:
        before_request()
        return self.reply


def errors(wc: WorkCenter, item_id: Any) -> list[str | None]:
    state = wc.conversation(item_id)
    assert state is not None
    return [m.error for m in state.messages if m.role == "assistant"]


@pytest.mark.parametrize("reply", [None, "a bare string", 42])
def test_a_reply_without_text_fails_its_turn_and_the_pass_goes_on(
    wc: WorkCenter, reply: Any
) -> None:
    first, second = create_dynamic(wc, title="First"), create_dynamic(wc, title="Second")
    steps = wc.coordinate_once(Answers(reply))
    assert [step.status for step in steps] == ["failed", "failed"]
    what = type(reply).__name__
    for item in (first, second):
        assert errors(wc, item.id) == [f"provider error: a reply without text ({what})"]


def test_a_usage_past_what_the_ledger_counts_leaves_the_request_at_its_estimate(
    wc: WorkCenter,
) -> None:
    """Charged as 2^53 - 1, such a figure stopped the item past any extension of its
    budget, its decision thrown away (found by acceptance testing, ADR-0140): no server
    spends that many, so the reply's figures are not taken."""
    first, second = create_dynamic(wc, title="First"), create_dynamic(wc, title="Second")
    huge = {"prompt_tokens": 10**400, "completion_tokens": 5}  # past a float's range too
    provider = ScriptedProvider(
        [Reply(create_actions(action_spec()), usage=huge), Reply(create_actions(action_spec()))]
    )
    steps = wc.coordinate_once(provider)
    assert [step.status for step in steps] == ["decided", "decided"]
    ledger = wc.ledger(steps[0].work_item_id)
    [reservation] = ledger.reservations.values()
    assert reservation.status == "unknown" and reservation.usage is None
    assert reservation.charged_tokens == reservation.estimated_tokens == ledger.charged_tokens
    assert ledger.stop_reason is None
    assert {step.work_item_id for step in steps} == {first.id, second.id}


def test_a_turn_whose_item_is_cancelled_meanwhile_says_so_not_budget(wc: WorkCenter) -> None:
    """The ledger refuses a request of a cancelled item (work_item_inactive): the turn
    read "budget: LLM request refused by the ResourceLedger", as if a budget had stopped
    it (found by acceptance testing)."""
    item = create_dynamic(wc)

    class CancelsFirst(Answers):
        def answer(self, request: Any, before_request: Callable[[], None]) -> Any:
            wc.cancel(item.id)
            return super().answer(request, before_request)

    (step,) = wc.coordinate_once(CancelsFirst(None))
    assert step.status == "failed"
    assert errors(wc, item.id) == [
        "the WorkItem was cancelled or ended before the request was sent"
    ]


def test_a_reply_past_the_bound_fails_its_turn_charged_what_it_cost(wc: WorkCenter) -> None:
    """Failed before it was recorded, its reservation was settled unknown at the
    estimate: 402,000 tokens reported, 17,211 charged and no stop (found by acceptance
    testing; resource-ledger.md 5 settles a refused reply's real spending)."""
    item = create_dynamic(wc, limits={"max_tokens": 100_000})
    big = create_actions(action_spec()) + " " * bounds.PAYLOAD_TEXT
    spent = {"input_tokens": 2_000, "output_tokens": 400_000, "total_tokens": 402_000}
    (step,) = wc.coordinate_once(ScriptedProvider([Reply(big, usage=spent)]))
    assert step.status == "failed" and step.error == "the provider's reply is too large"
    ledger = wc.ledger(item.id)
    [reservation] = ledger.reservations.values()
    assert (reservation.status, ledger.charged_tokens) == ("reported", 402_000)
    assert ledger.stop_reason is not None
    assert ledger.stop_reason.code == "work_item_tokens_exhausted"
    assert wc.work_item(item.id).plan == ()  # the decision in it was not applied
