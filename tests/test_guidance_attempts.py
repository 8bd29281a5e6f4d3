"""The Coordinator's guidance of an Action with no attempt left (ADR-0130): marked in
its snapshot, refused at apply as a user's guidance is (ADR-0091), where it was applied
and stopped the item at the Action's next claim (found by acceptance testing)."""

from __future__ import annotations

import pytest
from domain_states import History, brief, decision

from workcenter.domain import planning
from workcenter.domain.coordinator_request import build_snapshot
from workcenter.domain.decisions import AUTOMATIC_TURN
from workcenter.domain.errors import DecisionRefused


def spent_action(h: History) -> str:
    """A planned Action of one attempt that failed on it; its id."""
    (action,) = h.plan(brief(maxAttempts=1))
    h.finish(action.id, {"outcome": "failed", "error": "boom"})
    assert h.actions[action.id].status == "failed"
    return str(action.id)


def test_guidance_of_an_action_with_no_attempt_left_is_refused_at_apply() -> None:
    h = History()
    action_id = spent_action(h)
    reply = h.parse(
        decision("guide_actions", guidance=[{"actionId": action_id, "instruction": "Again"}]),
        AUTOMATIC_TURN,
    )
    before = h.snapshot()
    with pytest.raises(DecisionRefused, match="no attempt left"):
        h.apply(reply, AUTOMATIC_TURN)
    assert h.snapshot() == before


def test_the_snapshot_marks_an_action_with_no_attempt_left() -> None:
    h = History()
    action_id = spent_action(h)
    progress = planning.progress(h.item, h.actions)
    marked = build_snapshot(h.item, h.actions, progress, [], h.ledger)
    assert [a.get("noAttemptLeft") for a in marked["actions"]] == [True]
    assert marked["actions"][0]["id"] == action_id
    unmarked = build_snapshot(h.item, h.actions, progress, [])  # no ledger: not known
    assert "noAttemptLeft" not in unmarked["actions"][0]
