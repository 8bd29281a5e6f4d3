"""Random interleavings of user messages, automatic wakes, Run outcomes, provider
failures, abandoned turns and process restarts, checked against the invariants of
coordinator.md 7."""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
from datetime import timedelta
from typing import Any

from conftest import FakeClock, action_spec
from coordinator_fakes import answer_text, create_actions, decision
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from workcenter.adapters.providers.scripted import ScriptedProvider, Step, permanent, transient
from workcenter.application import WorkCenter
from workcenter.domain import work_item as wi
from workcenter.domain.errors import WorkcenterError

CRITERION = "It works"
LEASE = timedelta(seconds=60)


class CoordinatorMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.folder = tempfile.mkdtemp(prefix="wc-coord-", dir=_tmp())
        self.path = f"{self.folder}/store.db"
        self.clock = FakeClock()
        self.boots = itertools.count()
        self.objectives = itertools.count()
        self.wc = self._open()
        item = self.wc.create_work_item(
            title="Machine",
            goal="Make it work",
            acceptance_criteria=[CRITERION],
            delivery_target="response",
            start=True,
        )
        self.item_id = item.id
        self.failures_seen = 0

    def _open(self) -> WorkCenter:
        return WorkCenter.open(self.path, clock=self.clock, boot_id=f"boot-{next(self.boots)}")

    def teardown(self) -> None:
        self.wc.close()
        shutil.rmtree(self.folder, ignore_errors=True)

    # --- what the model may answer -------------------------------------------------

    def _plan(self) -> str:
        return create_actions(action_spec(objective=f"Step {next(self.objectives)}"))

    def _complete(self) -> str:
        item = self.wc.work_item(self.item_id)
        runs = [
            str(a.result_run_id)
            for a in self.wc.actions(item).values()
            if a.status == "completed" and a.result_run_id
        ]
        completion = {
            "summary": "Done",
            "acceptanceResults": [
                {"criterion": CRITERION, "status": "passed", "evidenceRunIds": runs[-1:]}
            ],
            "evidenceRunIds": runs[-1:],
        }
        return decision("complete", completion=completion)

    def _script(self, reply: str) -> list[Step]:
        goal_patch = decision("request_human", question="?", contractPatch={"goal": "Changed"})
        scripts: dict[str, Any] = {
            "plan": lambda: [self._plan()],
            "complete": lambda: [self._complete()],
            "answer": lambda: [answer_text("fine")],
            "patch": lambda: [goal_patch, goal_patch],
            "invalid": lambda: ["nonsense", "still nonsense"],
            "transient": lambda: [transient(attempts=2)],
            "permanent": lambda: [permanent()],
        }
        steps: list[Step] = scripts[reply]()
        return steps

    # --- rules ------------------------------------------------------------------------

    replies = st.sampled_from(
        ["plan", "complete", "answer", "patch", "invalid", "transient", "permanent"]
    )

    @rule(reply=replies)
    def user_message(self, reply: str) -> None:
        try:
            self.wc.post_user_message(self.item_id, "What now?")
        except WorkcenterError:
            return
        self.wc.coordinate_once(ScriptedProvider(self._script(reply)))

    @rule(reply=replies)
    def coordinator_step(self, reply: str) -> None:
        self.wc.coordinate_once(ScriptedProvider(self._script(reply)))

    @rule(outcome=st.sampled_from(["completed", "failed", "waiting"]))
    def run_outcome(self, outcome: str) -> None:
        claimed = self.wc.claim_next("w")
        if claimed is None:
            return
        report: dict[str, Any] = {
            "outcome": outcome,
            "summary": f"{outcome} run",
            "evidence": ["checked"],
            "acceptanceChecks": [{"criterion": CRITERION, "status": "passed", "evidence": "seen"}],
        }
        if outcome == "failed":
            report["error"] = "broke"
        if outcome == "waiting":
            report["waitingReason"] = "Which one?"
        self.wc.finish_run(claimed, report)

    @rule()
    def abandon_a_turn(self) -> None:
        """A process that claims, begins and dispatches, then dies."""
        commands = self.wc._coordinator
        claimed = commands.claim_due(self.item_id, LEASE)
        if claimed is None:
            return
        if claimed.turn_id is None:
            claimed = commands.begin_automatic(claimed)
            if claimed is None:
                return
        _dispatch_only(self.wc, claimed)

    @rule()
    def restart(self) -> None:
        self.wc.close()
        self.clock.advance(120)
        self.wc = self._open()
        self.wc.recover_coordinator(at_open=True)

    @rule()
    def time_passes(self) -> None:
        self.clock.advance(300)

    @precondition(lambda self: self.wc.work_item(self.item_id).stopped is not None)
    @rule()
    def nothing_runs_while_stopped(self) -> None:
        before = self.wc.event_count()
        self.wc.coordinate_once(ScriptedProvider([self._plan()]))
        item = self.wc.work_item(self.item_id)
        assert self.wc.event_count() == before or item.status == "needs_attention"

    # --- invariants -------------------------------------------------------------------

    @invariant()
    def contract_changes_only_from_users(self) -> None:
        for event in self.wc.history(self.item_id):
            if isinstance(event, wi.ContractRefined | wi.TitleChanged):
                actor = event.actor
                assert actor.kind == "user" or (
                    actor.kind == "coordinator"
                    and actor.caused_by is not None
                    and actor.caused_by.kind == "user"
                ), actor

    @invariant()
    def done_only_when_every_criterion_is_met(self) -> None:
        if self.wc.work_item(self.item_id).status == "done":
            assert self.wc.goal_progress(self.item_id).remaining_criteria == ()

    @invariant()
    def no_entry_processed_twice(self) -> None:
        state = self.wc.conversation(self.item_id)
        if state is None:
            return
        decided = [t.entry_id for t in state.turns.values() if t.status == "decided"]
        assert len(decided) == len(set(decided))
        thinking = [t for t in state.turns.values() if t.status == "thinking"]
        assert len(thinking) <= 1
        for turn in thinking:
            entry = state.entry(turn.entry_id)
            assert entry is not None and entry.status in ("pending", "claimed")
        for entry in state.entries:
            if entry.status == "acked":
                assert entry.acked_at is not None

    @invariant()
    def the_failure_counter_stops_the_item_at_its_limit(self) -> None:
        ledger = self.wc.ledger(self.item_id)
        assert ledger.coordinator_failures >= self.failures_seen
        self.failures_seen = ledger.coordinator_failures
        if ledger.coordinator_failures >= ledger.limits.max_coordinator_failures:
            assert ledger.stop_reason is not None
            assert self.wc.work_item(self.item_id).status in ("needs_attention", "done")


def _dispatch_only(wc: WorkCenter, claimed: Any) -> None:
    """Prepare and dispatch the turn's first attempt; the caller then 'dies'."""
    from workcenter.domain import planning
    from workcenter.service_layer.handlers.coordinator_step import _lines, _prompt

    commands = wc._coordinator
    item = wc.work_item(claimed.work_item_id)
    actions = wc.actions(item)
    state = wc.conversation(item.id)
    assert state is not None
    body = commands.rules.build_request(
        item,
        actions,
        planning.progress(item, actions),
        _lines(state),
        state.turns[claimed.turn_id],
        _prompt(state.turns[claimed.turn_id]),
        None,
    )
    try:
        provider_turn = commands.prepare(claimed, 1, body)
        commands.dispatch(claimed, provider_turn.id, body, LEASE)
    except WorkcenterError:
        return


def _tmp() -> str | None:
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


CoordinatorMachine.TestCase.settings = settings(
    max_examples=25,
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestCoordinatorMachine = CoordinatorMachine.TestCase
