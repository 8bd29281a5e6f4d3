"""What a decision must pass after parsing before it applies (coordinator.md 5.2, 5.3):
the item not stopped, not closed, and nothing in its conflict class moved since the
turn began. Shared by the turn's apply and by the replay of stored decisions
(ADR-0061), so that both judge a reply by the same checks in the same order."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from uuid import UUID

from workcenter.domain import action as act
from workcenter.domain import conversation as conv
from workcenter.domain import resource_ledger as rl
from workcenter.domain import work_item as wi
from workcenter.domain.errors import CommandRefused, ResourceStopError
from workcenter.domain.model import DomainEvent
from workcenter.service_layer.handlers.coordinator_rules import DecisionRules

FENCED = "the WorkItem changed while the Coordinator was thinking"


def fence_refusal(
    rules: DecisionRules,
    turn: conv.Turn,
    item: wi.WorkItemState,
    actions: Mapping[UUID, act.ActionState],
    item_events_since: Sequence[DomainEvent],
) -> str | None:
    """Why the decision is fenced (its conflict class moved since the turn began), or None."""
    clashing = rules.conflicts_since(item_events_since)
    if rules.action_fingerprint(item, actions) != turn.fingerprint:
        clashing.append("Actions changed")
    if not clashing:
        return None
    return f"{FENCED} ({', '.join(clashing)}); resend your message"


def check_before_apply(
    rules: DecisionRules,
    turn: conv.Turn,
    item: wi.WorkItemState,
    actions: Mapping[UUID, act.ActionState],
    ledger: rl.LedgerState,
    item_events_since: Sequence[DomainEvent],
) -> None:
    """ResourceStopError when stopped, CommandRefused when closed or fenced."""
    if ledger.stop_reason is not None:
        # The request was admitted and answered (its usage may be what spent the budget):
        # it is the decision that is refused, not the request.
        code = ledger.stop_reason.code
        raise ResourceStopError(
            code,
            f"the model answered, but the WorkItem's budget stopped it ({code}) before the"
            " decision could be applied: the decision was not applied",
        )
    wi.refuse_if_terminal(item, "apply a decision to")
    refusal = fence_refusal(rules, turn, item, actions, item_events_since)
    if refusal is not None:
        raise CommandRefused(refusal)
