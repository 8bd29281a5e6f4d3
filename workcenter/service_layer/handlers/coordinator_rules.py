"""What the Coordinator's service layer needs of the decision rules, and the
domain's rules in that shape (ADR-0024).

The rules (parsing a reply, applying a decision behind its fences, the conflict
class, the Action fingerprint, the request the model sees) are domain code of
their own (``domain/decisions.py``, ``domain/coordinator_request.py``); the turn
machinery depends only on this shape, so the two can be tested apart and the
machinery never decides what a decision means.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol
from uuid import UUID

from workcenter.domain import action as act
from workcenter.domain import conversation as conv
from workcenter.domain import coordinator_request, decisions
from workcenter.domain import resource_ledger as rl
from workcenter.domain import work_item as wi
from workcenter.domain.actor import Actor
from workcenter.domain.errors import CommandRefused, InvalidInput
from workcenter.domain.goal_progress import GoalProgress
from workcenter.domain.model import DomainEvent
from workcenter.domain.unit import Unit


class RequestBody(Protocol):
    """The request of one attempt: chat messages, the reply schema and the reply's
    bound in tokens (None: none), hashed canonically."""

    @property
    def messages(self) -> Sequence[dict[str, str]]: ...

    @property
    def reply_schema(self) -> dict[str, Any]: ...

    @property
    def max_output_tokens(self) -> int | None: ...

    def canonical(self) -> bytes: ...

    def hash(self) -> str: ...


class ParsedReply(Protocol):
    """A reply that passed every at-parse rule: the text for the user and the decision."""

    @property
    def reply(self) -> str: ...


# What the Coordinator's turns and their replay call on their rules.
RULES_METHODS = ("action_fingerprint", "conflicts_since", "build_request", "parse_reply")


def check_rules(rules: object, name: str) -> None:
    """``InvalidInput`` unless ``rules`` has DecisionRules' methods: else it fails only in
    the first turn or replay that calls one, as another error."""
    if any(not callable(getattr(rules, method, None)) for method in RULES_METHODS):
        raise InvalidInput(
            f"{name} must be DecisionRules (with {', '.join(RULES_METHODS)}),"
            f" not {type(rules).__name__}"
        )


class DecisionRules(Protocol):
    def action_fingerprint(
        self, item: wi.WorkItemState, actions: Mapping[UUID, act.ActionState]
    ) -> str: ...

    def conflicts_since(self, item_events: Sequence[DomainEvent]) -> list[str]:
        """Names of the WorkItem events after a turn's fence in the decision's conflict class."""
        ...

    def build_request(
        self,
        item: wi.WorkItemState,
        actions: Mapping[UUID, act.ActionState],
        progress: GoalProgress,
        messages: Sequence[conv.Message],
        turn: conv.Turn,
        prompt: str,
        correction: str | None,
        max_output_tokens: int | None = None,
        ledger: rl.LedgerState | None = None,
    ) -> RequestBody:
        """Raises ``CommandRefused`` when the turn may take no decision on the item, so
        it fails before any request is paid for. ``max_output_tokens`` is the provider's
        bound on a reply, which the body carries and the budget reserves; with the item's
        ``ledger`` the snapshot marks the Actions that have no attempt left."""
        ...

    def parse_reply(
        self,
        text: str,
        turn: conv.Turn,
        item: wi.WorkItemState,
        actions: Mapping[UUID, act.ActionState],
    ) -> ParsedReply:
        """Raises ``InvalidInput`` carrying a ``correction`` (<= 2000 chars) for the
        second attempt when an at-parse rule fails."""
        ...

    def apply_decision(
        self,
        reply: ParsedReply,
        turn: conv.Turn,
        item: wi.WorkItemState,
        actions: Mapping[UUID, act.ActionState],
        ledger: rl.LedgerState,
        *,
        at: datetime,
        by: Actor,
    ) -> Unit:
        """The decision's effects (WorkItem, Action and ledger events only); raises
        ``CommandRefused`` when an at-apply rule fails."""
        ...

    def summary(self, reply: ParsedReply) -> conv.DecisionSummary:
        """What the completed assistant message records of the decision."""
        ...


class DomainRules:
    """The decision rules of ``workcenter.domain.decisions`` and the request of
    ``workcenter.domain.coordinator_request``, in the shape the turn machinery uses."""

    def action_fingerprint(
        self, item: wi.WorkItemState, actions: Mapping[UUID, act.ActionState]
    ) -> str:
        return decisions.action_fingerprint(item, actions)

    def conflicts_since(self, item_events: Sequence[DomainEvent]) -> list[str]:
        return decisions.conflicts_since(item_events)

    def build_request(
        self,
        item: wi.WorkItemState,
        actions: Mapping[UUID, act.ActionState],
        progress: GoalProgress,
        messages: Sequence[conv.Message],
        turn: conv.Turn,
        prompt: str,
        correction: str | None,
        max_output_tokens: int | None = None,
        ledger: rl.LedgerState | None = None,
    ) -> RequestBody:
        kinds = decisions.offered_kinds(_authority(turn), item)
        if not kinds:
            raise CommandRefused("this turn may take no decision on this WorkItem")
        lines = [
            coordinator_request.ConversationLine(
                role=m.role,
                text=m.text if m.status != "failed" else (m.error or ""),
                status=m.status,
                at=m.finished_at or m.created_at,
            )
            for m in messages
        ]
        return coordinator_request.build_request(
            item,
            actions,
            progress,
            lines,
            prompt,
            correction,
            kinds=kinds,
            max_output_tokens=max_output_tokens,
            ledger=ledger,
        )

    def parse_reply(
        self,
        text: str,
        turn: conv.Turn,
        item: wi.WorkItemState,
        actions: Mapping[UUID, act.ActionState],
    ) -> ParsedReply:
        return decisions.parse_reply(text, _authority(turn), item, actions)

    def apply_decision(
        self,
        reply: ParsedReply,
        turn: conv.Turn,
        item: wi.WorkItemState,
        actions: Mapping[UUID, act.ActionState],
        ledger: rl.LedgerState,
        *,
        at: datetime,
        by: Actor,
    ) -> Unit:
        assert isinstance(reply, decisions.CoordinatorReply)
        return decisions.apply_decision(
            reply, _authority(turn), item, actions, ledger, at=at, by=by
        )

    def summary(self, reply: ParsedReply) -> conv.DecisionSummary:
        assert isinstance(reply, decisions.CoordinatorReply)
        decision = reply.decision
        return conv.DecisionSummary(
            kind=decision.kind, reason=decision.reason, question=decision.question
        )


def _authority(turn: conv.Turn) -> decisions.TurnAuthority:
    """From the persisted turn, never from what a caller claims (4.7)."""
    return decisions.TurnAuthority(user_originated=turn.user_originated, automatic=turn.automatic)
