"""Claims that do not herd (issue 18, ADR-0054).

On PostgreSQL a claim holds each candidate it tries (a transaction-scoped
advisory lock) and passes over the ones other claims hold, so concurrent claims
take different Actions instead of all racing for the oldest; the optimistic save
stays the fence. Here, in one process with two stores open: a held candidate is
passed over without being tried, it is claimable again once the other claim
ends, and the order stays oldest first. ``candidates_tried`` counts the
candidates a claim tried (instrumented, not timed); the 16-process test in
``test_scaleout_16.py`` reads it under real contention.
"""

from __future__ import annotations

from uuid import UUID

import pytest
from conftest import create_linear

from workcenter.application import WorkCenter
from workcenter.projections import sql


@pytest.fixture(params=("sqlite", "postgresql"))
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def three_items(wc: WorkCenter) -> list[UUID]:
    """Three linear items, oldest first; the current Action of each is claimable."""
    actions = []
    for n in range(3):
        item = create_linear(wc, stages=("implement",), title=f"Item {n}")
        assert item.current_action_id is not None
        actions.append(item.current_action_id)
    return actions


def test_claims_take_the_oldest_first_each_trying_one(wc: WorkCenter) -> None:
    actions = three_items(wc)
    claims = [wc.claim_next("w1") for _ in actions]
    assert [c.action_id for c in claims if c] == actions
    assert [c.candidates_tried for c in claims if c] == [1, 1, 1]
    assert wc.claim_next("w1") is None


# SQLite has one writer: its claims hold nothing.
@pytest.mark.parametrize("backend", ["postgresql"])
def test_a_candidate_held_by_another_claim_is_passed_over_on_postgresql(
    wc: WorkCenter, other: WorkCenter
) -> None:
    actions = three_items(wc)
    # Another claim is in flight on the oldest Action: it holds it until its claim ends.
    with other._runs.claim_candidates(16) as candidates:
        assert next(candidates).action_id == actions[0]
        claim = wc.claim_next("w1")
        assert claim is not None
        assert (claim.action_id, claim.candidates_tried) == (actions[1], 1)
    # That claim ended without saving: the oldest is claimable again, and comes first.
    claim = wc.claim_next("w1")
    assert claim is not None
    assert (claim.action_id, claim.candidates_tried) == (actions[0], 1)


@pytest.mark.parametrize("backend", ["sqlite"])
def test_on_sqlite_a_claim_walks_the_queue_without_holding(
    wc: WorkCenter, other: WorkCenter
) -> None:
    actions = three_items(wc)
    with other._runs.claim_candidates(16) as candidates:
        assert [c.action_id for c in candidates] == actions
    claim = wc.claim_next("w1")
    assert claim is not None and claim.action_id == actions[0]


def test_a_stale_candidate_is_tried_and_counted(wc: WorkCenter) -> None:
    """The queue's row says ready, the aggregates say otherwise: the claim moves on to the
    next candidate and counts both (the fence is the aggregates, never the queue)."""
    actions = three_items(wc)
    first = wc.claim_next("w1")
    assert first is not None and first.action_id == actions[0]
    # Put the queue's row back to ready, as a view lagging behind the events would show it.
    view = wc.work_queue
    with sql.transaction(view.datastore, commit=True) as c:
        c.execute(
            "UPDATE wq_actions SET status = 'ready', ready_since = 0 WHERE action_id = ?",
            (actions[0].hex,),
        )
    claim = wc.claim_next("w1")
    assert claim is not None
    assert (claim.action_id, claim.candidates_tried) == (actions[1], 2)
