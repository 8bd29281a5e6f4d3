"""Pure-domain WorkItem histories for decision tests: states built by the domain's own
decision functions, no store. ``History`` keeps the latest item, Actions and ledger."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID, uuid4

from workcenter.domain import action as act
from workcenter.domain import decisions, lifecycle, planning, runs
from workcenter.domain import resource_ledger as rl
from workcenter.domain import work_item as wi
from workcenter.domain.actor import COORDINATOR, USER, Actor, worker
from workcenter.domain.unit import Unit

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
CRITERIA: tuple[str, ...] = ("Tests pass", "Docs updated")
TURN = Actor(kind="coordinator", id="turn-1")
WORKER = worker("w1", "boot-1")


def brief(
    type: str = "research", objective: str = "Find the cause", **extra: Any
) -> dict[str, Any]:
    return {
        "type": type,
        "objective": objective,
        "approach": "Read the code and run the tests",
        "expectedOutcome": "A verified answer with evidence",
        "workspaceMode": "read",
    } | extra


def decision(kind: str, reply: str = "Noted.", **fields: Any) -> dict[str, Any]:
    return {"reply": reply, "decision": {"kind": kind, "reason": "Because it helps"} | fields}


def passing(criteria: Sequence[str] = CRITERIA, **extra: Any) -> dict[str, Any]:
    return {
        "outcome": "completed",
        "summary": "Done and verified",
        "evidence": ["pytest: 12 passed"],
        "acceptanceChecks": [
            {"criterion": c, "status": "passed", "evidence": "checked"} for c in criteria
        ],
    } | extra


class History:
    def __init__(
        self,
        *,
        criteria: Sequence[str] = CRITERIA,
        delivery_target: str | None = "response",
        mode: wi.Mode = "dynamic",
        goal: str = "Ship the feature",
    ) -> None:
        self.at = T0
        unit = lifecycle.create(
            work_item_id=uuid4(),
            mode=mode,
            contract=wi.validate_contract(
                title="Dynamic item",
                goal=goal,
                acceptance_criteria=list(criteria),
                delivery_target=delivery_target,
            ),
            stages=None,
            start=True,
            at=self.at,
            by=USER,
        )
        self.item: wi.WorkItemState = unit.item
        self.actions: dict[UUID, act.ActionState] = dict(unit.actions)
        assert unit.ledger is not None
        self.ledger: rl.LedgerState = unit.ledger
        self.events = list(unit.events)

    def tick(self) -> datetime:
        self.at += timedelta(seconds=1)
        return self.at

    def take(self, unit: Unit) -> Unit:
        self.item = unit.item
        self.actions.update(unit.actions)
        if unit.ledger is not None:
            self.ledger = unit.ledger
        self.events.extend(unit.events)
        return unit

    def item_events_after(self, version: int) -> list[Any]:
        return [
            e
            for e in self.events
            if e.originator_id == self.item.id and e.originator_version > version
        ]

    def plan(self, *specs: dict[str, Any], **payload: Any) -> list[act.ActionState]:
        before = {a for a in self.actions}
        self.take(
            planning.plan_actions(
                self.item,
                self.actions,
                {"actions": list(specs) or [brief()]} | payload,
                at=self.tick(),
                by=COORDINATOR,
            )
        )
        return sorted(
            (a for a in self.actions.values() if a.id not in before), key=lambda a: a.sequence
        )

    def claim(self, action_id: UUID) -> act.RunRef:
        unit = self.take(
            runs.claim(
                self.item,
                self.actions[action_id],
                self.ledger,
                worker="w1",
                boot_id="boot-1",
                lease=timedelta(seconds=60),
                at=self.tick(),
                by=WORKER,
            )
        )
        action = unit.action(action_id)
        assert action.current_run_id is not None
        return act.RunRef(
            action_id=action_id,
            run_id=action.current_run_id,
            boot_id="boot-1",
            lease_epoch=action.lease_epoch,
        )

    def finish(self, action_id: UUID, report: dict[str, Any]) -> UUID:
        ref = self.claim(action_id)
        self.take(
            runs.finish(self.item, self.actions[action_id], ref, report, at=self.tick(), by=WORKER)
        )
        return ref.run_id

    def parse(
        self, reply: dict[str, Any] | str, authority: decisions.TurnAuthority = decisions.USER_TURN
    ) -> decisions.CoordinatorReply:
        text = reply if isinstance(reply, str) else json.dumps(reply)
        return decisions.parse_reply(text, authority, self.item, self.actions)

    def apply(
        self,
        reply: decisions.CoordinatorReply,
        authority: decisions.TurnAuthority = decisions.USER_TURN,
    ) -> Unit:
        return decisions.apply_decision(
            reply, authority, self.item, self.actions, self.ledger, at=self.tick(), by=TURN
        )

    def decide(
        self, reply: dict[str, Any], authority: decisions.TurnAuthority = decisions.USER_TURN
    ) -> Unit:
        return self.take(self.apply(self.parse(reply, authority), authority))

    def snapshot(self) -> tuple[wi.WorkItemState, dict[UUID, act.ActionState], int]:
        return self.item, dict(self.actions), len(self.events)
