"""Stand-in decision rules for the Coordinator's turn machinery, built on the planning
commands. They exercise claims, provider turns, fences and failures apart from the
domain's decision rules (ADR-0024), which have their own tests."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from workcenter.domain import action as act
from workcenter.domain import conversation as conv
from workcenter.domain import lifecycle, planning
from workcenter.domain import resource_ledger as rl
from workcenter.domain import work_item as wi
from workcenter.domain.actor import Actor
from workcenter.domain.errors import CommandRefused, InvalidInput
from workcenter.domain.goal_progress import GoalProgress
from workcenter.domain.unit import Unit
from workcenter.service_layer.handlers.coordinator_rules import DomainRules

PATCH_KEYS = ("title", "goal", "acceptanceCriteria", "deliveryTarget")


class Invalid(InvalidInput):
    def __init__(self, correction: str) -> None:
        super().__init__(correction)
        self.correction = correction


@dataclass(frozen=True)
class Body:
    messages: tuple[dict[str, str], ...]
    reply_schema: dict[str, Any]
    max_output_tokens: int | None = None

    def canonical(self) -> bytes:
        return json.dumps(
            {
                "messages": list(self.messages),
                "schema": self.reply_schema,
                "max": self.max_output_tokens,
            },
            sort_keys=True,
            separators=(",", ":"),
        ).encode()

    def hash(self) -> str:
        return hashlib.sha256(self.canonical()).hexdigest()


@dataclass(frozen=True)
class Parsed:
    reply: str
    decision: dict[str, Any]


class FakeRules(DomainRules):
    """Kinds: answer, create_actions (through planning.plan_actions), request_human,
    complete (through planning.complete); a contract patch only on a user turn.

    The fence (fingerprint, conflict class) is the domain's own: only the request,
    parsing, applying and the summary are fake."""

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
    ) -> Body:
        snapshot = {
            "item": {"id": str(item.id), "status": item.status, "goal": item.goal},
            "actions": sorted(f"{a.id}:{a.status}:{a.generation}" for a in actions.values()),
            "remaining": list(progress.remaining_criteria),
            "messages": [f"{m.role}:{m.status}:{m.text}" for m in messages],
        }
        chat = [
            {"role": "system", "content": json.dumps(snapshot, sort_keys=True)},
            {"role": "user", "content": prompt},
        ]
        if correction:
            chat.append({"role": "user", "content": f"Correction: {correction}"})
        return Body(
            messages=tuple(chat),
            reply_schema={"type": "object"},
            max_output_tokens=max_output_tokens,
        )

    def parse_reply(
        self,
        text: str,
        turn: conv.Turn,
        item: wi.WorkItemState,
        actions: Mapping[UUID, act.ActionState],
    ) -> Parsed:
        try:
            data = json.loads(text)
        except ValueError:
            raise Invalid("the reply is not JSON") from None
        if not isinstance(data, dict) or not isinstance(data.get("decision"), dict):
            raise Invalid("the reply needs a decision object")
        decision = data["decision"]
        kind = decision.get("kind")
        if kind == "answer" and not turn.user_originated:
            raise Invalid("an automatic turn cannot answer")
        if kind not in ("answer", "create_actions", "request_human", "complete"):
            raise Invalid(f"unknown kind {kind!r}")
        patch = decision.get("contractPatch") or {}
        if not turn.user_originated and any(k in patch for k in PATCH_KEYS):
            raise Invalid("only a user turn may change the contract")
        return Parsed(reply=str(data.get("reply", "")), decision=decision)

    def apply_decision(
        self,
        reply: Parsed,
        turn: conv.Turn,
        item: wi.WorkItemState,
        actions: Mapping[UUID, act.ActionState],
        ledger: rl.LedgerState,
        *,
        at: datetime,
        by: Actor,
    ) -> Unit:
        decision = reply.decision
        kind = decision["kind"]
        patch = decision.get("contractPatch") or {}
        if patch and not turn.user_originated:
            raise CommandRefused("only a user turn may change the contract")
        if kind == "create_actions":
            return planning.plan_actions(
                item, actions, {"actions": decision.get("actions", [])}, at=at, by=by
            )
        if kind == "complete":
            return planning.complete(item, actions, decision.get("completion", {}), at=at, by=by)
        if kind == "request_human" and "goal" in patch:
            contract = wi.validate_contract(
                title=item.title,
                goal=patch["goal"],
                acceptance_criteria=item.acceptance_criteria,
                delivery_target=item.delivery_target,
            )
            open_actions = {k: a for k, a in actions.items() if a.status in act.OPEN_STATUSES}
            unit = lifecycle.update_contract(item, open_actions, contract, at, by)
        else:
            unit = Unit(item, actions, at, ledger, by=by)
        if kind == "request_human":
            unit.set_status("waiting", None)
        return unit

    def summary(self, reply: Parsed) -> conv.DecisionSummary:
        return conv.DecisionSummary(
            kind=reply.decision["kind"],
            reason=str(reply.decision.get("reason", "")),
            question=reply.decision.get("question"),
        )


def decision(kind: str, reply: str = "ok", **fields: Any) -> str:
    return json.dumps({"reply": reply, "decision": {"kind": kind, "reason": "because", **fields}})


def answer_text(text: str) -> str:
    return decision("answer", reply=text)


def create_actions(*specs: dict[str, Any], reply: str = "planned") -> str:
    return decision("create_actions", reply=reply, actions=list(specs))
