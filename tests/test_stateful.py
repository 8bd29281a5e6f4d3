"""Stateful property test: two workers on one ledger, random commands.

A hypothesis ``RuleBasedStateMachine`` drives two workers (each its own
``WorkCenter`` and boot id on the SAME SQLite file, or PostgreSQL schema, sharing
one fake clock)
through item creation, planning, claims, renewals, every kind of finish,
interrupts, lease expiry, restarts with recovery, cancel/resume, contract
updates, guidance, retries and completion.

Each rule predicts from the states it reads (and from the test's own model of
which claims are live) whether the command is accepted. A refusal must be a
typed error from ``workcenter.domain.errors`` and must leave the event count
unchanged. After every step the invariants of lifecycle.md section 4 are
checked on every WorkItem and Action, on states loaded three ways: through
each worker's cached service, by folding the raw events from scratch, and
through a freshly opened ``WorkCenter`` (snapshots, no cache).
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import postgres
import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from workcenter.application import Claim, WorkCenter
from workcenter.domain import action as act
from workcenter.domain import errors
from workcenter.domain import lifecycle as lc
from workcenter.domain import work_item as wi
from workcenter.service_layer import repository as workcenter_store

WORKERS = ("w1", "w2")
START = datetime(2030, 1, 1, 9, 0, tzinfo=UTC)
TICK = timedelta(milliseconds=1)
MAX_ITEMS = 6
TERMINAL = ("done", "cancelled")
STATS: Counter[str] = Counter()


class FakeClock:
    def __init__(self) -> None:
        self.at = START

    def now(self) -> datetime:
        return self.at

    def advance(self, delta: timedelta) -> None:
        self.at += delta


@dataclass
class Held:
    """A claim a worker holds, and what the test's model says about its Run."""

    worker: str
    claim: Claim
    item_id: UUID
    expires_at: datetime
    live: bool = True  # the Run is still `running` (it may have expired)
    finished_with: dict[str, Any] | None = None  # the report its finish recorded


def run_identity(run: act.Run) -> tuple[Any, ...]:
    return (
        run.id,
        run.ordinal,
        run.worker,
        run.owner_boot_id,
        run.lease_epoch,
        run.started_at,
        run.generation,
        run.spec_hash,
        run.attempt,
        run.contract_revision,
    )


def auto_retry_status(action: act.ActionState) -> str:
    return (
        "ready" if action.type != "deliver" and action.attempt < action.max_attempts else "failed"
    )


def completed_report(claim: Claim, decision: str = "approved") -> dict[str, Any]:
    report: dict[str, Any] = {
        "outcome": "completed",
        "summary": f"{claim.action_type} done",
        "evidence": ["ran pytest: 3 passed"],
        "acceptanceChecks": [
            {"criterion": c, "status": "passed", "evidence": f"checked {c}"}
            for c in claim.acceptance_criteria
        ],
    }
    if claim.action_type == "review":
        report["reviewDecision"] = decision
    return report


GARBAGE_ITEMS: list[dict[str, Any]] = [
    {"title": "  ", "goal": "g"},
    {"title": "t", "goal": ""},
    {"title": "t", "goal": "g", "delivery_target": "email"},
    {"title": "t", "goal": "g", "mode": "graph"},
    {"title": "t", "goal": "g", "acceptance_criteria": [1, 2]},
]
GARBAGE_PLANS: list[Any] = [
    [],
    [{"type": "research", "objective": " ", "approach": "a", "expectedOutcome": "e"}],
    [{"type": "triage", "objective": "o", "approach": "a", "expectedOutcome": "e"}],
    [{"objective": "o"}],
    "too many",
]

FINISH_KINDS = (
    "completed",
    "completed",
    "completed",
    "completed_without_evidence",
    "waiting",
    "retryable",
    "retryable",
    "failed",
    "garbage",
)
SETBACKS = ("waiting", "retryable", "failed", "completed_without_evidence")
GARBAGE = ("garbage_outcome", "waiting_without_reason", "malformed_patch", "missing_outcome")


def finish_report(kind: str, claim: Claim, decision: str) -> dict[str, Any]:
    if kind == "completed":
        return completed_report(claim, decision)
    if kind == "completed_without_evidence":
        return {**completed_report(claim, decision), "evidence": []}
    if kind == "waiting":
        return {"outcome": "waiting", "summary": "blocked", "waitingReason": "Which database?"}
    if kind == "retryable":
        return {"outcome": "retryable", "error": "network flaked"}
    if kind == "failed":
        return {"outcome": "failed", "error": "tool crashed"}
    if kind == "garbage_outcome":
        return {"outcome": "finished", "summary": "?"}
    if kind == "waiting_without_reason":
        return {"outcome": "waiting", "waitingReason": "   "}
    if kind == "malformed_patch":
        return {**completed_report(claim, decision), "contractPatch": "rewrite everything"}
    return {"summary": "no outcome at all"}


class Ledger(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        STATS["examples"] += 1
        self.dir = tempfile.mkdtemp(prefix="wc-stateful-")
        self.path = self.store()
        self.clock = FakeClock()
        self.boots = itertools.count(1)
        self.wcs: dict[str, WorkCenter] = {w: self._open(w) for w in WORKERS}
        self.items: list[UUID] = []
        self.held: list[Held] = []
        self.names = itertools.count(1)
        # model of what was seen after the previous step
        self.seen_runs: dict[UUID, act.Run] = {}
        self.seen_run_ids: dict[UUID, list[UUID]] = {}
        self.seen_epochs: dict[UUID, int] = {}
        self.seen_plans: dict[UUID, list[UUID]] = {}
        self.seen_final: dict[UUID, wi.FinalResult] = {}

    def _open(self, worker: str) -> WorkCenter:
        return WorkCenter.open(
            self.path, clock=self.clock, boot_id=f"{worker}-boot-{next(self.boots)}"
        )

    def store(self) -> str:
        return os.path.join(self.dir, "ledger.db")

    def teardown(self) -> None:
        for wc in self.wcs.values():
            wc.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    # --- helpers ----------------------------------------------------------------

    @property
    def now(self) -> datetime:
        return self.clock.at

    def tick(self) -> None:
        """Time passes between commands (a millisecond), never during one."""
        self.clock.advance(TICK)
        STATS["steps"] += 1

    def attempt(self, wc: WorkCenter, expect_ok: bool, command: Callable[[], Any]) -> Any:
        """Run ``command``; a refusal must be typed and write nothing; check the prediction."""
        before = wc.event_count()
        try:
            result = command()
        except errors.WorkcenterError as error:
            assert type(error).__module__ == errors.__name__, f"untyped refusal {error!r}"
            assert wc.event_count() == before, f"refused command wrote events: {error!r}"
            assert not expect_ok, f"unexpected refusal: {error!r}"
            STATS["refused"] += 1
            STATS[f"refused_{type(error).__name__}"] += 1
            event(f"refused {type(error).__name__}")
            return error
        assert expect_ok, f"expected a refusal, got {result!r}"
        return result

    def load(
        self, wc: WorkCenter
    ) -> tuple[dict[UUID, wi.WorkItemState], dict[UUID, act.ActionState]]:
        items = {i: wc.work_item(i) for i in self.items}
        actions = {
            e.action_id: wc.action(e.action_id) for item in items.values() for e in item.plan
        }
        return items, actions

    def live_held(self) -> list[Held]:
        return [h for h in self.held if h.live]

    def kill_held(self, predicate: Callable[[Held], bool]) -> None:
        for held in self.held:
            if held.live and predicate(held):
                held.live = False

    def pick_item(self, data: st.DataObject, mode: str | None = None) -> UUID:
        wc = self.wcs[WORKERS[0]]
        choices = [i for i in self.items if mode is None or wc.work_item(i).mode == mode]
        return data.draw(st.sampled_from(choices or self.items))

    def pick_action(
        self, data: st.DataObject, likely: Callable[[wi.WorkItemState, wi.PlanEntry], bool]
    ) -> tuple[wi.WorkItemState, act.ActionState]:
        """Any Action; more often one for which ``likely(item, entry)`` holds."""
        wc = self.wcs[WORKERS[0]]
        items = [wc.work_item(i) for i in self.items]
        entries = [(item, e) for item in items for e in item.plan]
        preferred = [(item, e) for item, e in entries if likely(item, e)]
        if preferred and data.draw(st.integers(0, 3)) > 0:
            entries = preferred
        item, entry = data.draw(st.sampled_from(entries))
        return item, wc.action(entry.action_id)

    def has_actions(self) -> bool:
        wc = self.wcs[WORKERS[0]]
        return any(wc.work_item(i).plan for i in self.items)

    @staticmethod
    def claimable(item: wi.WorkItemState, action: act.ActionState) -> bool:
        """lifecycle.md 3.3, restated: which Actions a claim may take right now."""
        if action.status != "ready" or action.current_run_id is not None:
            return False
        if item.mode == "linear":
            return (
                item.status == "ready"
                and item.current_action_id == action.id
                and not item.entries("failed")
            )
        return item.status in wi.ACTIVE

    def check_invalidated(
        self, before: act.ActionState, after: act.ActionState, status: str
    ) -> None:
        """Invariant 5: an invalidated Action's epoch moved past every earlier Run."""
        assert after.status == status, (before.status, after.status)
        assert after.lease_epoch == before.lease_epoch + 1
        assert after.current_run_id is None
        if before.current_run_id is not None:
            run = after.run(before.current_run_id)
            assert run is not None and run.status == status and run.ended_at == self.now

    # --- items --------------------------------------------------------------------

    @initialize()
    def seed(self) -> None:
        """Start every example with two planned dynamic items and a short linear one."""
        wc = self.wcs["w1"]
        for n in range(2):
            item = wc.create_work_item(
                title=f"Seed {n}",
                goal="Answer the question",
                acceptance_criteria=["Answer is cited"],
                delivery_target="response",
                start=True,
            )
            item = wc.plan_actions(
                item.id,
                expected_version=item.version,
                actions=[
                    self.spec("research", "read", max_attempts=1),
                    self.spec("review", "read"),
                    self.spec("implement", "shared"),
                ],
            )
            self.items.append(item.id)
            self.allow_many_attempts(wc, item.id)
        linear = wc.create_work_item(
            title="Seed linear",
            goal="Fix it",
            acceptance_criteria=["Bug fixed"],
            delivery_target="response",
            mode="linear",
            stages=("implement", "review", "deliver"),
            start=True,
        )
        self.items.append(linear.id)
        self.allow_many_attempts(wc, linear.id)

    @staticmethod
    def allow_many_attempts(wc: WorkCenter, item_id: UUID) -> None:
        """This machine tests the lifecycle; the ledger's attempt gate has its own tests."""
        ledger = wc.ledger(item_id)
        wc.extend_budget(
            item_id, expected_version=ledger.version, additions={"max_action_attempts": 10_000}
        )

    def spec(self, kind: str, mode: str, max_attempts: int = 2) -> dict[str, Any]:
        return {
            "type": kind,
            "objective": f"{kind} objective {next(self.names)}",
            "approach": "look and verify",
            "expectedOutcome": "verified answer",
            "workspaceMode": mode,
            "maxAttempts": max_attempts,
        }

    @precondition(lambda self: len(self.items) < MAX_ITEMS)
    @rule(
        worker=st.sampled_from(WORKERS),
        linear=st.booleans(),
        criteria=st.integers(0, 2),
        delivery=st.sampled_from(["response", "response", None]),
        start=st.sampled_from([True, True, False]),
        stages=st.sampled_from([None, ("research",), ("implement", "review", "deliver")]),
    )
    def create_item(
        self,
        worker: str,
        linear: bool,
        criteria: int,
        delivery: str | None,
        start: bool,
        stages: tuple[str, ...] | None,
    ) -> None:
        self.tick()
        wc = self.wcs[worker]
        item = wc.create_work_item(
            title=f"Item {next(self.names)}",
            goal="Make it work",
            acceptance_criteria=[f"Criterion {n}" for n in range(criteria)],
            delivery_target=delivery,
            mode="linear" if linear else "dynamic",
            stages=stages if linear else None,
            start=start,
        )
        self.items.append(item.id)
        self.allow_many_attempts(wc, item.id)
        if not start:
            assert item.status == "draft" and not item.plan
        elif linear:
            assert item.status == "ready" and len(item.plan) == 1
            assert item.current_action_id == item.plan[0].action_id
            assert item.plan[0].type == (stages or wi.DEFAULT_STAGES)[0]
        else:
            assert (item.status, item.current_action_id, item.plan) == ("running", None, ())
        STATS["create"] += 1

    @rule(worker=st.sampled_from(WORKERS), data=st.data())
    def start_item(self, worker: str, data: st.DataObject) -> None:
        self.tick()
        wc = self.wcs[worker]
        item = wc.work_item(self.pick_item(data))
        current = wc.action(item.current_action_id) if item.current_action_id else None
        noop = current is not None and current.status == "ready"  # already started
        ok = item.status not in TERMINAL and (noop or item.status == "draft")
        before = wc.event_count()
        after = self.attempt(wc, ok, lambda: wc.start(item.id, expected_version=item.version))
        if not ok:
            return
        if noop:
            assert wc.event_count() == before and after == item
            return
        assert isinstance(after, wi.WorkItemState)
        if item.mode == "linear":
            assert after.status == "ready" and len(after.plan) == len(item.plan) + 1
        elif item.mode == "dynamic":
            assert after.status == wi.derived_status(after)[0]
        STATS["start"] += 1

    @rule(
        worker=st.sampled_from(WORKERS),
        data=st.data(),
        count=st.integers(1, 3),
        read_only=st.booleans(),
        max_attempts=st.sampled_from([1, 2, 3]),
        kinds=st.lists(
            st.sampled_from(["research", "implement", "review", "deliver"]), min_size=3, max_size=3
        ),
        stale=st.sampled_from([False, False, False, True]),
        supersede=st.booleans(),
        close=st.booleans(),
    )
    def plan(
        self,
        worker: str,
        data: st.DataObject,
        count: int,
        read_only: bool,
        max_attempts: int,
        kinds: list[str],
        stale: bool,
        supersede: bool,
        close: bool,
    ) -> None:
        self.tick()
        wc = self.wcs[worker]
        item = wc.work_item(self.pick_item(data, mode="dynamic"))
        actions = wc.actions(item)
        specs = [
            self.spec(kinds[n], "read" if read_only else "shared", max_attempts)
            for n in range(count)
        ]
        supersede_ids = (
            [a.id for a in actions.values() if a.status in ("ready", "waiting", "failed")][:1]
            if supersede
            else []
        )
        close_actions = (
            [
                {"actionId": a.id, "reason": "no longer needed"}
                for a in actions.values()
                if a.status in ("waiting", "failed") and a.id not in supersede_ids
            ][:1]
            if close
            else []
        )
        goal = wc.goal_progress(item.id)
        goal_met = bool(
            goal.total_criteria_count
            and not goal.remaining_criteria
            and goal.delivery.status == "passed"
            and not goal.blockers
        )
        stale = stale and item.version > 1
        ok = (
            not stale
            and item.mode == "dynamic"
            and item.status in wi.ACTIVE
            and len(item.plan) + count <= 64
            and not item.entries("running")
            and (item.delivery_target is not None or read_only)
            and not goal_met
        )
        expected = item.version - 1 if stale else item.version
        after = self.attempt(
            wc,
            ok,
            lambda: wc.plan_actions(
                item.id,
                expected_version=expected,
                actions=specs,
                supersede_action_ids=supersede_ids,
                close_actions=close_actions,
            ),
        )
        if stale:
            assert isinstance(after, errors.VersionConflict)
        if not ok:
            return
        assert isinstance(after, wi.WorkItemState)
        new = after.plan[len(item.plan) :]
        assert len(new) == count
        assert [e.sequence for e in new] == list(
            range(item.next_sequence, item.next_sequence + count)
        )
        for entry in new:
            planned = wc.action(entry.action_id)
            assert (planned.status, planned.lease_epoch, planned.attempt) == ("ready", 0, 0)
            assert planned.contract_revision == after.contract_revision
        for action_id in supersede_ids:
            self.check_invalidated(actions[action_id], wc.action(action_id), "superseded")
        for closed in close_actions:
            assert wc.action(closed["actionId"]).status == "closed"
        STATS["plan"] += 1

    @rule(worker=st.sampled_from(WORKERS), data=st.data(), count=st.integers(1, 3))
    def plan_again(self, worker: str, data: st.DataObject, count: int) -> None:
        self.plan(worker, data, count, True, 2, ["research"] * 3, False, False, False)

    @rule(worker=st.sampled_from(WORKERS), data=st.data(), count=st.integers(1, 3))
    def plan_more(self, worker: str, data: st.DataObject, count: int) -> None:
        self.plan(
            worker, data, count, False, 3, ["implement", "test", "deliver"], False, False, False
        )

    @rule(worker=st.sampled_from(WORKERS), data=st.data(), create=st.booleans())
    def garbage(self, worker: str, data: st.DataObject, create: bool) -> None:
        """Malformed commands are refused with InvalidInput (or a refusal) and write nothing."""
        wc = self.wcs[worker]
        if create:
            fields = data.draw(st.sampled_from(GARBAGE_ITEMS))
            error = self.attempt(wc, False, lambda: wc.create_work_item(**fields))
            assert isinstance(error, errors.InvalidInput)
            return
        item = wc.work_item(self.pick_item(data, mode="dynamic"))
        specs = data.draw(st.sampled_from(GARBAGE_PLANS))
        if specs == "too many":
            specs = [self.spec("research", "read") for _ in range(9)]
        self.attempt(
            wc,
            False,
            lambda: wc.plan_actions(item.id, expected_version=item.version, actions=specs),
        )

    # --- runs -----------------------------------------------------------------------

    @rule(worker=st.sampled_from(WORKERS), lease=st.sampled_from([30.0, 60.0]))
    def claim(self, worker: str, lease: float) -> None:
        self.tick()
        wc = self.wcs[worker]
        items, actions = self.load(wc)
        candidates = [a for a in actions.values() if self.claimable(items[a.work_item_id], a)]
        before = wc.event_count()
        claim = wc.claim_next(worker, lease_seconds=lease)
        if not candidates:
            assert claim is None, f"claimed {claim} with nothing claimable"
            assert wc.event_count() == before
            STATS["claim_none"] += 1
            return
        assert claim is not None, "claimable Actions exist but nothing was claimed"
        assert claim.action_id in {a.id for a in candidates}
        # Order: oldest ready (updated_at), then sequence.
        key = {a.id: (a.updated_at, a.sequence) for a in candidates}
        assert key[claim.action_id] == min(key.values())
        prior = actions[claim.action_id]
        assert items[prior.work_item_id].status not in TERMINAL  # invariant 15
        after = wc.action(claim.action_id)
        run = after.current_run
        assert run is not None and run.id == claim.run_id
        assert after.status == "running"
        assert after.lease_epoch == prior.lease_epoch + 1 == claim.lease_epoch  # invariant 3
        assert after.attempt == prior.attempt + 1 == claim.attempt
        assert (run.owner_boot_id, run.worker) == (wc.boot_id, worker)
        assert run.expires_at == claim.expires_at == self.now + timedelta(seconds=lease)
        assert run.generation == prior.generation and run.spec_hash == prior.spec_hash
        item = wc.work_item(claim.work_item_id)
        assert item.status == "running" and item.current_action_id == claim.action_id
        self.held.append(Held(worker, claim, claim.work_item_id, claim.expires_at))
        STATS["claim"] += 1
        event("claimed")

    @precondition(lambda self: any(h.live for h in self.held))
    @rule(
        data=st.data(),
        kind=st.sampled_from(FINISH_KINDS),
        decision=st.sampled_from(["approved", "approved", "changes_requested"]),
    )
    def finish(self, data: st.DataObject, kind: str, decision: str) -> None:
        held = data.draw(st.sampled_from(self.live_held()))
        if kind == "garbage":
            kind = data.draw(st.sampled_from(GARBAGE))
        self.finish_held(held, kind, decision)

    def finish_held(self, held: Held, kind: str, decision: str) -> None:
        self.tick()
        wc = self.wcs[held.worker]
        garbage = kind in GARBAGE
        expired = held.expires_at <= self.now
        ok = not garbage and not expired
        prior = wc.action(held.claim.action_id)
        item_before = wc.work_item(held.item_id)
        report = finish_report(kind, held.claim, decision)
        result = self.attempt(wc, ok, lambda: wc.finish_run(held.claim, report))
        if garbage:
            assert isinstance(result, errors.InvalidInput)
            STATS["finish_garbage_refused"] += 1
            return
        if expired:
            assert isinstance(result, errors.StaleRun)
            STATS["finish_expired_refused"] += 1
            return
        held.live = False
        held.finished_with = report
        after = wc.action(held.claim.action_id)
        assert result == after
        run = after.run(held.claim.run_id)
        assert run is not None and run.ended_at == self.now and after.current_run_id is None
        outcome = {"completed_without_evidence": "failed"}.get(kind, kind)
        assert run.status == outcome, (kind, run.status, run.result)
        expected_status = {
            "completed": "completed",
            "waiting": "waiting",
            "failed": "failed",
            "retryable": "ready" if prior.attempt < prior.max_attempts else "failed",
        }[outcome]
        assert after.status == expected_status
        assert after.lease_epoch == prior.lease_epoch  # finishing does not bump the epoch
        if outcome == "completed":
            assert after.result_run_id == run.id
        item = wc.work_item(held.item_id)
        if item.mode == "linear" and outcome == "completed":
            stages = item.stages
            index = stages.index(prior.type)
            if prior.type == "review" and decision == "changes_requested":
                assert item.status == "ready" and len(item.plan) == len(item_before.plan) + 1
                assert item.plan[-1].type == "implement"
            elif index + 1 < len(stages):
                assert item.status == "ready" and item.plan[-1].type == stages[index + 1]
                assert item.current_action_id == item.plan[-1].action_id
            else:
                assert item.status == "done" and item.final_result is not None
                STATS["linear_done"] += 1
        elif item.mode == "linear":
            linear_status = {"waiting": "waiting", "ready": "ready", "failed": "needs_attention"}
            assert item.status == linear_status[after.status]
            assert item.current_action_id == after.id
        STATS[f"finish_{kind}"] += 1
        event(f"finished {kind}")

    # Claims run four times as often as most rules and finishes have one rule per
    # kind of outcome (plan runs three times), so examples reach deep states
    # before a cancel or contract change resets them, whichever rules the
    # example's swarm leaves enabled.

    @rule(worker=st.sampled_from(WORKERS), lease=st.sampled_from([30.0, 60.0]))
    def claim_again(self, worker: str, lease: float) -> None:
        self.claim(worker, lease)

    @rule(worker=st.sampled_from(WORKERS), lease=st.sampled_from([30.0, 60.0]))
    def claim_more(self, worker: str, lease: float) -> None:
        self.claim(worker, lease)

    @rule(worker=st.sampled_from(WORKERS), lease=st.sampled_from([30.0, 60.0]))
    def claim_once_more(self, worker: str, lease: float) -> None:
        self.claim(worker, lease)

    @precondition(lambda self: any(h.live for h in self.held))
    @rule(data=st.data(), decision=st.sampled_from(["approved", "changes_requested"]))
    def finish_completed(self, data: st.DataObject, decision: str) -> None:
        self.finish(data, "completed", decision)

    @precondition(lambda self: any(h.live for h in self.held))
    @rule(data=st.data(), kind=st.sampled_from(SETBACKS))
    def finish_setback(self, data: st.DataObject, kind: str) -> None:
        self.finish(data, kind, "approved")

    @precondition(lambda self: any(h.live for h in self.held))
    @rule(data=st.data(), kind=st.sampled_from(GARBAGE))
    def finish_garbage(self, data: st.DataObject, kind: str) -> None:
        self.finish(data, kind, "approved")

    @rule(
        worker=st.sampled_from(WORKERS),
        rounds=st.integers(1, 6),
        forge=st.sampled_from(["boot_id", "older_epoch", "newer_epoch", "run_id"]),
    )
    def drain(self, worker: str, rounds: int, forge: str) -> None:
        """A busy worker: claim, renew and complete, round after round, with every check
        above; a forged ref to each live Run is fenced out on the way."""
        for _ in range(rounds):
            claims = len(self.held)
            self.claim(worker, 60.0)
            if len(self.held) == claims:
                break
            self.forged_attempt(self.held[-1], forge, "finish")
            self.renew_held(self.held[-1], 60.0)
            self.finish_held(self.held[-1], "completed", "approved")
        STATS["drain"] += 1

    @precondition(lambda self: bool(self.held))
    @rule(data=st.data(), lease=st.sampled_from([30.0, 60.0]))
    def renew(self, data: st.DataObject, lease: float) -> None:
        live = self.live_held()
        held = data.draw(st.sampled_from(live if live and data.draw(st.booleans()) else self.held))
        self.renew_held(held, lease)

    def renew_held(self, held: Held, lease: float) -> None:
        self.tick()
        wc = self.wcs[held.worker]
        ok = held.live and held.expires_at > self.now
        before = wc.event_count()
        renewed = wc.renew_lease(held.claim, lease_seconds=lease)
        assert renewed is ok
        if not ok:
            assert wc.event_count() == before
            STATS["renew_expired_refused" if held.live else "renew_refused"] += 1
            return
        held.expires_at = self.now + timedelta(seconds=lease)
        run = wc.action(held.claim.action_id).run(held.claim.run_id)
        assert run is not None and run.expires_at == held.expires_at
        STATS["renew"] += 1

    @precondition(lambda self: bool(self.held))
    @rule(data=st.data())
    def interrupt(self, data: st.DataObject) -> None:
        self.tick()
        held = data.draw(st.sampled_from(self.held))
        wc = self.wcs[held.worker]
        ok = held.live  # LRF only: an expired lease may still be given up
        prior = wc.action(held.claim.action_id)
        result = self.attempt(wc, ok, lambda: wc.interrupt(held.claim, reason="worker stopping"))
        if not ok:
            assert isinstance(result, errors.StaleRun)
            STATS["stale_interrupt_refused"] += 1
            return
        held.live = False
        after = wc.action(held.claim.action_id)
        run = after.run(held.claim.run_id)
        assert run is not None and run.status == "interrupted"
        assert after.status == auto_retry_status(prior)
        STATS["interrupt"] += 1

    @precondition(lambda self: any(h.live for h in self.held))
    @rule(data=st.data())
    def defer(self, data: st.DataObject) -> None:
        """A busy workspace: the Run ends deferred and its attempt is given back (LRF+)."""
        self.tick()
        held = data.draw(st.sampled_from(self.live_held()))
        wc = self.wcs[held.worker]
        ok = held.live and held.expires_at > self.now
        prior = wc.action(held.claim.action_id)
        result = self.attempt(wc, ok, lambda: wc.defer(held.claim))
        if not ok:
            assert isinstance(result, errors.StaleRun)
            STATS["stale_defer_refused"] += 1
            return
        held.live = False
        after = wc.action(held.claim.action_id)
        run = after.run(held.claim.run_id)
        assert run is not None and run.status == "interrupted" and run.deferred
        assert (after.status, after.attempt) == ("ready", max(0, prior.attempt - 1))
        assert after.counted_attempts == prior.counted_attempts - 1
        assert after.lease_epoch == prior.lease_epoch
        item = wc.work_item(held.item_id)
        if item.mode == "linear":
            assert item.current_action_id == after.id
            assert item.status == ("needs_attention" if item.stopped else "ready")
        STATS["defer"] += 1
        event("deferred")

    @precondition(lambda self: any(not h.live for h in self.held))
    @rule(data=st.data(), op=st.sampled_from(["finish", "renew", "interrupt", "defer"]))
    def use_stale_claim(self, data: st.DataObject, op: str) -> None:
        """A claim whose Run ended (finished, recovered, cancelled, superseded) writes nothing."""
        self.tick()
        held = data.draw(st.sampled_from([h for h in self.held if not h.live]))
        self.use_stale(data.draw(st.sampled_from(list(self.wcs.values()))), held, op)

    def use_stale(self, wc: WorkCenter, held: Held, op: str) -> None:
        assert not held.live
        before = wc.event_count()
        if op == "renew":
            assert wc.renew_lease(held.claim) is False
            assert wc.event_count() == before
        elif op == "finish":
            report = completed_report(held.claim)
            # Its own finish sent again answers the Action, writing nothing (ADR-0140).
            again = held.finished_with == report
            result = self.attempt(wc, again, lambda: wc.finish_run(held.claim, report))
            if again:
                assert isinstance(result, act.ActionState) and wc.event_count() == before
                assert result == wc.action(held.claim.action_id)
                STATS["stale_finish_answered"] += 1
                event("stale finish sent again, answered")
                return
            assert isinstance(result, errors.StaleRun)
        elif op == "defer":
            error = self.attempt(wc, False, lambda: wc.defer(held.claim))
            assert isinstance(error, errors.StaleRun)
        else:
            error = self.attempt(wc, False, lambda: wc.interrupt(held.claim))
            assert isinstance(error, errors.StaleRun)
        STATS[f"stale_{op}_refused"] += 1
        event(f"stale {op} refused")

    @precondition(lambda self: any(h.live for h in self.held))
    @rule(
        data=st.data(),
        forge=st.sampled_from(["boot_id", "older_epoch", "newer_epoch", "run_id"]),
        op=st.sampled_from(["finish", "renew", "interrupt"]),
    )
    def forged_ref(self, data: st.DataObject, forge: str, op: str) -> None:
        """Invariant 3: a ref with another boot id, epoch or Run id is fenced out of a live Run."""
        self.tick()
        self.forged_attempt(data.draw(st.sampled_from(self.live_held())), forge, op)

    def forged_attempt(self, held: Held, forge: str, op: str) -> None:
        ref = held.claim.ref
        changes: dict[str, Any] = {
            "boot_id": {"boot_id": ref.boot_id + "-restarted"},
            "older_epoch": {"lease_epoch": ref.lease_epoch - 1},
            "newer_epoch": {"lease_epoch": ref.lease_epoch + 1},
            "run_id": {"run_id": act.run_id_for(ref.action_id, 999)},
        }[forge]
        forged = ref.model_copy(update=changes)
        wc = self.wcs[held.worker]
        before = wc.event_count()
        if op == "renew":
            assert wc.renew_lease(forged) is False
            assert wc.event_count() == before
        elif op == "finish":
            report = completed_report(held.claim)
            error = self.attempt(wc, False, lambda: wc.finish_run(forged, report))
            assert isinstance(error, errors.StaleRun)
        else:
            error = self.attempt(wc, False, lambda: wc.interrupt(forged))
            assert isinstance(error, errors.StaleRun)
        STATS["forged_refused"] += 1

    @rule(seconds=st.sampled_from([1, 10, 29, 30, 45, 59, 60, 61, 120]))
    def advance_clock(self, seconds: int) -> None:
        self.clock.advance(timedelta(seconds=seconds))

    def check_recovered(self, wc: WorkCenter, recovered: list[UUID], expected: list[Held]) -> None:
        assert sorted(recovered) == sorted(h.claim.run_id for h in expected)
        for held in expected:
            held.live = False
            after = wc.action(held.claim.action_id)
            run = after.run(held.claim.run_id)
            assert run is not None and run.status == "interrupted" and run.ended_at == self.now
            assert after.status == auto_retry_status(after)
            assert after.current_run_id is None
        STATS["recovered"] += len(expected)

    @precondition(lambda self: any(h.live for h in self.held))
    @rule(worker=st.sampled_from(WORKERS))
    def restart_and_recover(self, worker: str) -> None:
        """The worker's process restarts with a new boot id: it recovers the Runs whose
        lease ran out, never a live one, its own name's included (ADR-0048)."""
        self.tick()
        self.wcs[worker].close()
        wc = self.wcs[worker] = self._open(worker)
        expected = [h for h in self.live_held() if h.expires_at <= self.now]
        before = wc.event_count()
        recovered = wc.recover()
        self.check_recovered(wc, recovered, expected)
        if not expected:
            assert wc.event_count() == before
        STATS["restart"] += 1

    @precondition(lambda self: any(h.live and h.expires_at <= self.now for h in self.held))
    @rule(worker=st.sampled_from(WORKERS))
    def recover_expired(self, worker: str) -> None:
        """Plain recover(): every expired lease, and no live Run of any boot id."""
        self.tick()
        wc = self.wcs[worker]
        expected = [h for h in self.live_held() if h.expires_at <= self.now]
        self.check_recovered(wc, wc.recover(), expected)
        STATS["recover_plain"] += 1

    @precondition(lambda self: any(h.live for h in self.held))
    @rule(worker=st.sampled_from(WORKERS), data=st.data())
    def expire_and_recover(self, worker: str, data: st.DataObject) -> None:
        """Every lease runs out (no renewal beats 61 s): the expired Run may not renew or
        finish (LRF+); then plain recover() ends them all."""
        self.clock.advance(timedelta(seconds=61))
        held = data.draw(st.sampled_from(self.live_held()))
        self.renew_held(held, 60.0)
        self.finish_held(held, "completed", "approved")
        self.recover_expired(worker)

    @rule(
        worker=st.sampled_from(WORKERS),
        how=st.sampled_from(["guide", "cancel", "contract", "restart"]),
        op=st.sampled_from(["finish", "renew", "interrupt"]),
    )
    def disrupt_running_claim(self, worker: str, how: str, op: str) -> None:
        """Invariant 5: guidance, cancel, a contract change or recovery while a Run is
        running leave its claim stale, and the stale claim writes nothing."""
        claims = len(self.held)
        self.claim(worker, 60.0)
        if len(self.held) == claims:
            return
        held = self.held[-1]
        wc = self.wcs[worker]
        if how == "guide":
            item = wc.work_item(held.item_id)
            self.guide_action(wc, item, wc.action(held.claim.action_id), False)
        elif how == "cancel":
            self.cancel_item(wc, held.item_id)
        elif how == "contract":
            self.update_item(wc, held.item_id, "goal", False)
        else:  # the worker restarts after the lease ran out (a live one is kept)
            self.clock.advance(timedelta(seconds=61))
            self.restart_and_recover(worker)
            wc = self.wcs[worker]
        self.use_stale(wc, held, op)
        STATS[f"disrupted_by_{how}"] += 1

    # --- user commands ---------------------------------------------------------------

    @rule(worker=st.sampled_from(WORKERS), data=st.data())
    def cancel(self, worker: str, data: st.DataObject) -> None:
        self.cancel_item(self.wcs[worker], self.pick_item(data))

    def cancel_item(self, wc: WorkCenter, item_id: UUID) -> None:
        self.tick()
        item = wc.work_item(item_id)
        actions = wc.actions(item)
        before = wc.event_count()
        after = self.attempt(wc, item.status != "done", lambda: wc.cancel(item.id, reason="stop"))
        if item.status == "done":
            STATS["cancel_done_refused"] += 1
            return
        if item.status == "cancelled":
            assert after == item and wc.event_count() == before
            return
        assert isinstance(after, wi.WorkItemState)
        assert after.status == "cancelled" and after.current_action_id is None
        for prior in actions.values():
            if prior.status in act.OPEN_STATUSES:
                self.check_invalidated(prior, wc.action(prior.id), "cancelled")
            else:
                assert wc.action(prior.id) == prior
        self.kill_held(lambda h: h.item_id == item.id)
        STATS["cancel"] += 1

    @rule(
        worker=st.sampled_from(WORKERS),
        data=st.data(),
        stale=st.sampled_from([False, False, False, True]),
    )
    def resume(self, worker: str, data: st.DataObject, stale: bool) -> None:
        self.tick()
        wc = self.wcs[worker]
        item = wc.work_item(self.pick_item(data))
        expected = item.version
        if stale:
            # the version just before the item was last cancelled, if it ever was
            cancels = [e for e in wc.history(item.id) if isinstance(e, wi.WorkItemCancelled)]
            stale = bool(cancels)
            expected = cancels[-1].originator_version - 1 if cancels else expected
        ok = item.status == "cancelled" and not stale
        actions = wc.actions(item)
        after = self.attempt(
            wc,
            ok,
            lambda: wc.resume(
                item.id,
                expected_version=expected,
                expected_ledger_version=wc.ledger(item.id).version,
            ),
        )
        if stale:
            assert isinstance(after, errors.VersionConflict | errors.CommandRefused)
        if not ok:
            return
        assert isinstance(after, wi.WorkItemState)
        cancelled = [a for a in actions.values() if a.status == "cancelled"]
        if item.mode == "dynamic":
            for prior in cancelled:
                later = wc.action(prior.id)
                assert later.status == "superseded" and later.lease_epoch == prior.lease_epoch + 1
            assert after.status == wi.derived_status(after)[0]
        else:
            assert after.status == "ready"
            current = wc.action(after.current_action_id)  # type: ignore[arg-type]
            assert current.status == "ready"
            if cancelled:
                assert current.generation == cancelled[-1].generation + 1
            else:
                assert current.type == after.stages[0]
        STATS["resume"] += 1

    @rule(
        worker=st.sampled_from(WORKERS),
        data=st.data(),
        change=st.sampled_from(["title", "goal", "criteria", "target"]),
        stale=st.sampled_from([False, False, True]),
    )
    def update_contract(self, worker: str, data: st.DataObject, change: str, stale: bool) -> None:
        self.update_item(self.wcs[worker], self.pick_item(data), change, stale)

    def update_item(self, wc: WorkCenter, item_id: UUID, change: str, stale: bool) -> None:
        self.tick()
        item = wc.work_item(item_id)
        actions = wc.actions(item)
        expected = 1 if stale else item.version
        conflict = stale and any(
            isinstance(e, lc.UPDATE_CONFLICTS)
            for e in wc.history(item.id)
            if e.originator_version > 1
        )
        fields: dict[str, Any] = {
            "title": {"title": f"Renamed {next(self.names)}"},
            "goal": {"goal": f"New goal {next(self.names)}"},
            "criteria": {"acceptance_criteria": [f"New criterion {next(self.names)}"]},
            "target": {
                "delivery_target": "workspace_files"
                if item.delivery_target == "response"
                else "response"
            },
        }[change]
        ok = item.status not in TERMINAL and not conflict
        after = self.attempt(
            wc, ok, lambda: wc.update_contract(item.id, expected_version=expected, **fields)
        )
        if conflict:
            assert isinstance(after, errors.VersionConflict)
        if not ok:
            return
        assert isinstance(after, wi.WorkItemState)
        if change == "title":
            assert after.contract_revision == item.contract_revision
            assert after.status == item.status and after.plan == item.plan
            return
        assert after.contract_revision == item.contract_revision + 1
        for prior in actions.values():
            if prior.status in act.OPEN_STATUSES:
                self.check_invalidated(prior, wc.action(prior.id), "superseded")
        self.kill_held(lambda h: h.item_id == item.id)
        if item.mode == "linear":
            assert after.status == "ready" and after.plan[-1].type == after.stages[0]
            assert after.current_action_id == after.plan[-1].action_id
        elif item.status != "draft":
            assert after.status == wi.derived_status(after)[0]
        STATS["contract_change"] += 1

    @precondition(lambda self: self.has_actions())
    @rule(worker=st.sampled_from(WORKERS), data=st.data(), wrong_generation=st.booleans())
    def guide(self, worker: str, data: st.DataObject, wrong_generation: bool) -> None:
        item, prior = self.pick_action(
            data,
            lambda item, e: (
                item.status in wi.ACTIVE and e.status in ("ready", "running", "waiting")
            ),
        )
        self.guide_action(self.wcs[worker], item, prior, wrong_generation)

    def guide_action(
        self,
        wc: WorkCenter,
        item: wi.WorkItemState,
        prior: act.ActionState,
        wrong_generation: bool,
    ) -> None:
        self.tick()
        generation = prior.generation + (1 if wrong_generation else 0)
        linear = item.mode == "linear"
        allowed = wc.ledger(item.id).effective_max_attempts(prior.max_attempts)
        ok = (
            not wrong_generation
            and item.status in (("ready", "running") if linear else wi.ACTIVE)
            and prior.status
            in (("ready", "running") if linear else ("ready", "running", "waiting"))
            and (not linear or item.current_action_id == prior.id)
            # A dynamic Action guided runs again on the attempts it has left (ADR-0091).
            and (linear or prior.counted_attempts < allowed)
        )
        after = self.attempt(
            wc,
            ok,
            lambda: wc.guide(
                item.id,
                prior.id,
                expected_version=item.version,
                expected_generation=generation,
                guidance="Prefer the smaller change",
            ),
        )
        if not ok:
            return
        assert isinstance(after, wi.WorkItemState)
        target = wc.action(prior.id)
        if linear:
            self.check_invalidated(prior, target, "superseded")
            replacement = wc.action(after.plan[-1].action_id)
            assert after.current_action_id == replacement.id and after.status == "ready"
            assert replacement.context[-1].kind == "guidance"
        else:
            assert target.status == "ready" and target.generation == prior.generation + 1
            assert target.attempt == 0 and target.context[-1].kind == "guidance"
            if prior.status == "running":  # invariant 5: the running Run can no longer advance it
                assert target.lease_epoch == prior.lease_epoch + 1
                run = target.run(prior.current_run_id)  # type: ignore[arg-type]
                assert run is not None and run.status == "superseded"
            else:
                assert target.lease_epoch == prior.lease_epoch
        self.kill_held(lambda h: h.claim.action_id == prior.id)
        STATS["guide"] += 1
        STATS[f"guide_{item.mode}_{prior.status}"] += 1

    def has_blocked_item(self) -> bool:
        wc = self.wcs[WORKERS[0]]
        return any(wc.work_item(i).status in ("waiting", "needs_attention") for i in self.items)

    @rule(worker=st.sampled_from(WORKERS), kind=st.sampled_from(["waiting", "failed", "retryable"]))
    def setback_and_retry(self, worker: str, kind: str) -> None:
        """Claim, report a setback, and answer it with a retry (refused unless blocked)."""
        claims = len(self.held)
        self.claim(worker, 60.0)
        if len(self.held) == claims:
            return
        held = self.held[-1]
        self.finish_held(held, kind, "approved")
        wc = self.wcs[worker]
        self.tick()
        item = wc.work_item(held.item_id)
        self.retry_action(wc, item, wc.action(held.claim.action_id), "Use Postgres", False)

    @precondition(lambda self: self.has_blocked_item())
    @rule(
        worker=st.sampled_from(WORKERS),
        data=st.data(),
        answer=st.sampled_from(["Use Postgres", "Use Postgres", "  "]),
        wrong_generation=st.sampled_from([False, False, False, True]),
    )
    def retry_blocked(
        self, worker: str, data: st.DataObject, answer: str, wrong_generation: bool
    ) -> None:
        self.retry(worker, data, answer, wrong_generation)

    @precondition(lambda self: self.has_actions())
    @rule(
        worker=st.sampled_from(WORKERS),
        data=st.data(),
        answer=st.sampled_from(["Use Postgres", "", "  "]),
        wrong_generation=st.sampled_from([False, False, True]),
    )
    def retry(self, worker: str, data: st.DataObject, answer: str, wrong_generation: bool) -> None:
        self.tick()
        wc = self.wcs[worker]
        item, prior = self.pick_action(
            data,
            lambda item, e: item.status in wi.ACTIVE and e.status in ("waiting", "failed"),
        )
        self.retry_action(wc, item, prior, answer, wrong_generation)

    def retry_action(
        self,
        wc: WorkCenter,
        item: wi.WorkItemState,
        prior: act.ActionState,
        answer: str,
        wrong_generation: bool,
    ) -> None:
        generation = prior.generation + (1 if wrong_generation else 0)
        # A dynamic item's Actions run side by side, and its retried Action runs again
        # on the attempts it has left (ADR-0091); a linear retry plans a new Action.
        dynamic = item.mode == "dynamic"
        allowed = wc.ledger(item.id).effective_max_attempts(prior.max_attempts)
        ok = (
            not wrong_generation
            and item.status in (wi.ACTIVE if dynamic else ("waiting", "needs_attention"))
            and prior.status in ("waiting", "failed")
            and (prior.status != "waiting" or bool(answer.strip()))
            and (not dynamic or prior.counted_attempts < allowed)
        )
        after = self.attempt(
            wc,
            ok,
            lambda: wc.retry(
                item.id,
                prior.id,
                expected_version=item.version,
                expected_generation=generation,
                answer=answer,
            ),
        )
        if not ok:
            return
        assert isinstance(after, wi.WorkItemState)
        target = wc.action(prior.id)
        if item.mode == "linear":
            self.check_invalidated(prior, target, "superseded")
            replacement = wc.action(after.plan[-1].action_id)
            assert after.current_action_id == replacement.id and after.status == "ready"
            assert replacement.status == "ready" and replacement.type == prior.type
        else:
            assert (target.status, target.attempt) == ("ready", 0)
            assert target.generation == prior.generation + 1
            assert after.status == wi.derived_status(after)[0]
        STATS["retry"] += 1

    @rule(worker=st.sampled_from(WORKERS), data=st.data())
    def complete(self, worker: str, data: st.DataObject) -> None:
        """Complete a dynamic item from what goal progress says proves it."""
        self.tick()
        wc = self.wcs[worker]
        item = wc.work_item(self.pick_item(data, mode="dynamic"))
        actions = wc.actions(item)
        goal = wc.goal_progress(item.id)
        cited = list(dict.fromkeys([*goal.evidence_run_ids, *goal.delivery.evidence_run_ids]))
        completion = {
            "summary": "All criteria met",
            "acceptanceResults": [
                {
                    "criterion": row.criterion,
                    "status": "passed",
                    "evidenceRunIds": [str(r) for r in row.evidence_run_ids[:1]],
                }
                for row in goal.criteria
            ],
            "evidenceRunIds": [str(r) for r in cited],
            "closeActions": [
                {"actionId": str(a.id), "reason": "not needed"}
                for a in actions.values()
                if a.status in ("waiting", "failed")
            ],
        }
        ok = (
            item.mode == "dynamic"
            and item.status in wi.ACTIVE
            and bool(item.acceptance_criteria)
            and not item.entries("ready", "running")
            and not goal.remaining_criteria
            and item.delivery_target is not None
            and goal.delivery.status == "passed"
        )
        after = self.attempt(
            wc,
            ok,
            lambda: wc.complete(item.id, expected_version=item.version, completion=completion),
        )
        if not ok:
            return
        assert isinstance(after, wi.WorkItemState)
        assert after.status == "done" and after.final_result is not None
        assert not after.entries(*act.OPEN_STATUSES)
        STATS["dynamic_done"] += 1
        event("dynamic item completed")

    # --- invariants ------------------------------------------------------------------

    @invariant()
    def ledger_is_consistent(self) -> None:
        reference = self.wcs[WORKERS[0]]
        folded_items: dict[UUID, wi.WorkItemState] = {}
        folded_actions: dict[UUID, act.ActionState] = {}
        for item_id in self.items:
            item = wi.fold(None, reference.history(item_id))
            assert item is not None
            folded_items[item_id] = item
            for entry in item.plan:
                state = act.fold(None, reference.action_history(entry.action_id))
                assert state is not None
                folded_actions[entry.action_id] = state
        # cached services (both workers) and a fresh service (snapshots, no cache)
        fresh = WorkCenter.open(self.path, clock=self.clock, boot_id="observer")
        try:
            for wc in (*self.wcs.values(), fresh):
                for item_id, item in folded_items.items():
                    assert wc.work_item(item_id) == item
                for action_id, state in folded_actions.items():
                    assert wc.action(action_id) == state
            self.check_projection(fresh, folded_actions)
        finally:
            fresh.close()
        for item in folded_items.values():
            self.check_item(item, folded_actions)
        for state in folded_actions.values():
            self.check_action(state)
        run_ids = [r.id for state in folded_actions.values() for r in state.runs]
        assert len(run_ids) == len(set(run_ids)), "a Run id was used twice"
        for held in self.held:
            run = folded_actions[held.claim.action_id].run(held.claim.run_id)
            assert run is not None
            assert (run.status == "running") == held.live, (run.status, held)
            if held.live:
                assert run.expires_at == held.expires_at
                assert run.owner_boot_id == held.claim.boot_id

    def check_projection(self, wc: WorkCenter, actions: dict[UUID, act.ActionState]) -> None:
        wc.projections.catch_up()
        live = {r[1] for r in wc.work_queue.live_runs()}
        assert live == {a.current_run_id for a in actions.values() if a.current_run_id}
        ready = set(wc.work_queue.ready_actions(1000))
        assert ready == {a.id for a in actions.values() if a.status == "ready"}

    def check_item(self, item: wi.WorkItemState, actions: dict[UUID, act.ActionState]) -> None:
        plan_ids = [e.action_id for e in item.plan]
        seen = self.seen_plans.get(item.id, [])
        assert plan_ids[: len(seen)] == seen, "a plan entry disappeared"
        self.seen_plans[item.id] = plan_ids
        assert len({e.sequence for e in item.plan}) == len(item.plan)
        for entry in item.plan:
            action = actions[entry.action_id]
            # the WorkItem's mirror equals each Action's real status
            assert entry.status == action.status, (entry, action.status)
            assert (action.work_item_id, action.sequence, action.type) == (
                item.id,
                entry.sequence,
                entry.type,
            )
        open_entries = item.entries(*act.OPEN_STATUSES)
        if item.status in TERMINAL:
            # invariant 15: nothing left to claim, guide or run
            assert not open_entries, (item.status, open_entries)
            assert item.current_action_id is None
        if item.status == "done":
            assert item.final_result is not None
        if item.final_result is not None:
            assert self.seen_final.setdefault(item.id, item.final_result) == item.final_result
        if item.mode == "linear":
            # invariant 1: one unfinished current Action; only it is claimable
            assert len(open_entries) <= 1, open_entries
            if open_entries and item.status not in ("draft", *TERMINAL):
                current = open_entries[0]
                assert item.current_action_id == current.action_id
                mirrored = {
                    "ready": "ready",
                    "running": "running",
                    "waiting": "waiting",
                    "failed": "needs_attention",
                }
                assert item.status == mirrored[current.status], (item.status, current.status)
        elif item.status in wi.ACTIVE:
            assert item.status == wi.derived_status(item)[0]
            running = item.entries("running")
            if running:
                assert item.current_action_id in {e.action_id for e in running}

    def check_action(self, action: act.ActionState) -> None:
        running = [r for r in action.runs if r.status == "running"]
        # invariant 2: at most one running Run; Action running <=> current Run set
        assert len(running) <= 1
        assert (action.status == "running") == (action.current_run_id is not None)
        assert len(running) == (1 if action.status == "running" else 0)
        if running:
            run = running[0]
            assert run.id == action.current_run_id
            assert run.lease_epoch == action.lease_epoch
            assert (run.generation, run.spec_hash) == (action.generation, action.spec_hash)
            assert run.attempt == action.attempt
        # invariant 3: every claim bumps the epoch
        assert [r.ordinal for r in action.runs] == list(range(1, len(action.runs) + 1))
        epochs = [r.lease_epoch for r in action.runs]
        assert epochs == sorted(set(epochs)), epochs
        assert all(e <= action.lease_epoch for e in epochs)
        assert action.lease_epoch >= self.seen_epochs.get(action.id, 0)
        self.seen_epochs[action.id] = action.lease_epoch
        # invariant 4: identity never changes; a finished Run never changes at all
        ids = [r.id for r in action.runs]
        previous = self.seen_run_ids.get(action.id, [])
        assert ids[: len(previous)] == previous, "a Run disappeared"
        self.seen_run_ids[action.id] = ids
        for run in action.runs:
            before = self.seen_runs.get(run.id)
            if before is not None:
                assert run_identity(run) == run_identity(before)
                if before.status != "running":
                    assert run == before, f"finished Run changed: {before} -> {run}"
            elif run.status != "running":
                assert run.ended_at is not None
            self.seen_runs[run.id] = run
        if action.status == "completed":
            assert action.result_run is not None and action.result_run.status == "completed"


class PostgresLedger(Ledger):
    """The same machine on a PostgreSQL schema of its own per example."""

    def store(self) -> str:
        self.schema = f"wcs_{uuid.uuid4().hex[:12]}"
        return postgres.url(self.schema)

    def teardown(self) -> None:
        super().teardown()
        postgres.drop_schema(self.schema)


def _run(machine: type[Ledger], max_examples: int) -> None:
    STATS.clear()
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=max_examples,
            stateful_step_count=40,
            deadline=None,
            # Deterministic, so the reach assertions below cannot flake between runs.
            derandomize=True,
            database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )


def test_two_workers_keep_the_ledger_consistent(monkeypatch: pytest.MonkeyPatch) -> None:
    # Snapshot often, so fresh services load from snapshots, not only from replay.
    monkeypatch.setattr(workcenter_store, "SNAPSHOT_INTERVAL", 5)
    _run(Ledger, 50)
    # The machine must actually reach the interesting states.
    reached = (
        "claim",
        "renew",
        "finish_completed",
        "finish_retryable",
        "finish_waiting",
        "finish_failed",
        "finish_garbage_refused",
        "finish_expired_refused",
        "renew_expired_refused",
        "forged_refused",
        "recovered",
        "restart",
        "recover_plain",
        "stale_finish_refused",
        "stale_finish_answered",
        "stale_renew_refused",
        "stale_interrupt_refused",
        "cancel",
        "contract_change",
        "guide",
        "retry",
        "plan",
    )
    missing = [key for key in reached if not STATS[key]]
    assert not missing, f"never reached {missing}: {dict(STATS)}"
    assert STATS["linear_done"] + STATS["dynamic_done"] > 0, f"no item finished: {dict(STATS)}"
    disrupted = sum(n for key, n in STATS.items() if key.startswith("disrupted_by_"))
    assert disrupted > 0, f"no running claim was disrupted: {dict(STATS)}"


def test_two_workers_keep_a_postgresql_ledger_consistent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Fewer examples: every command is a round trip to the server."""
    postgres.require_server()
    monkeypatch.setattr(workcenter_store, "SNAPSHOT_INTERVAL", 5)
    # Every step opens a fresh service; one kept connection each (a claim takes a second
    # from the overflow, ADR-0095).
    monkeypatch.setenv("POSTGRES_POOL_SIZE", "1")
    _run(PostgresLedger, 8)
    reached = ("claim", "renew", "finish_completed", "finish_retryable", "recovered", "restart")
    missing = [key for key in reached if not STATS[key]]
    assert not missing, f"never reached {missing}: {dict(STATS)}"
