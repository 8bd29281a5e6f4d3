"""The replay check under random interleavings (ADR-0061): the Coordinator machine of
test_coordinator_stateful, with guided Actions, fenced turns and refusals at apply
added, replays every stored decision the same after every step. Each example
begins with every decision and refusal kind but completion, then takes random
steps (user messages, automatic wakes, Run outcomes, provider failures, abandoned
turns, restarts), and ends by proving the criterion and completing; the test
checks that the run judged every kind."""

from __future__ import annotations

from typing import Any

from conftest import report
from coordinator_fakes import answer_text, decision
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import initialize, invariant, rule, run_state_machine_as_test
from test_coordinator_stateful import CoordinatorMachine

from workcenter.adapters.providers.scripted import ScriptedProvider, Step
from workcenter.domain.errors import WorkcenterError

SEEN_VERDICTS: set[str] = set()
SEEN_KINDS: set[str] = set()
VERDICTS = {"applied", "refused_parse", "refused_apply", "fenced"}
KINDS = {"answer", "create_actions", "guide_actions", "request_human", "complete"}


class ReplayMachine(CoordinatorMachine):
    def __init__(self) -> None:
        super().__init__()
        # Refusals count as failures: a higher limit keeps the item deciding longer.
        ledger = self.wc.ledger(self.item_id)
        self.wc.extend_budget(
            self.item_id,
            expected_version=ledger.version,
            additions={"max_coordinator_failures": 12},
        )

    def _script(self, reply: str) -> list[Step]:
        if reply == "guide":
            return [self._guide()]
        if reply == "unproven":
            unproven = {"summary": "Done", "acceptanceResults": [], "evidenceRunIds": []}
            return [decision("complete", completion=unproven)]
        return super()._script(reply)

    def _guide(self) -> str:
        item = self.wc.work_item(self.item_id)
        targets = [
            str(a.id)
            for a in self.wc.actions(item).values()
            if a.status in ("ready", "waiting", "failed")
        ]
        # None to guide: a made-up Action, refused at parse.
        target = targets[-1] if targets else "00000000-0000-4000-8000-000000000000"
        return decision("guide_actions", guidance=[{"actionId": target, "instruction": "Go on"}])

    # Guidance and completion need an Action in the right state: asked for more often.
    replies = st.sampled_from(
        [
            *("plan", "complete", "complete", "answer", "patch", "invalid"),
            *("guide", "guide", "unproven", "transient"),
        ]
    )

    @rule(reply=replies)
    def user_message(self, reply: str) -> None:
        super().user_message(reply)

    @rule(reply=replies)
    def coordinator_step(self, reply: str) -> None:
        super().coordinator_step(reply)

    @initialize()
    def every_kind_once(self) -> None:
        """Each kind once before the random steps: planned, fenced, guided, answered,
        refused at parse and at apply, a question with a contract patch."""
        self.coordinator_step("plan")
        for reply in ("guide", "answer", "invalid", "unproven"):
            self.user_message(reply)
        self.a_run_finishes_while_it_thinks()
        self.user_message("patch")

    def teardown(self) -> None:
        """Prove the criterion and complete, then replay once more."""
        try:
            for reply in ("plan", "complete"):
                running = self.wc.claim_next("w")
                if running is not None:
                    self.wc.finish_run(running, report(criteria=["It works"]))
                self.user_message(reply)
            self.every_decision_replays_the_same()
        finally:
            super().teardown()

    @rule()
    def a_run_finishes_while_it_thinks(self) -> None:
        """A user turn whose decision a Run's outcome fences."""
        running = self.wc.claim_next("w")
        if running is None:
            return
        try:
            self.wc.post_user_message(self.item_id, "Anything else?")
        except WorkcenterError:
            self.wc.finish_run(running, report(criteria=["It works"]))
            return

        def finish_meanwhile(request: Any) -> str:
            self.wc.finish_run(running, report(criteria=["It works"]))
            return answer_text("I will wait")

        self.wc.coordinate_once(ScriptedProvider([], respond=finish_meanwhile))

    @invariant()
    def every_decision_replays_the_same(self) -> None:
        replayed = self.wc.maintenance.replay_decisions(self.item_id)
        assert replayed.same, [r.differences for _, r in replayed.differing]
        SEEN_VERDICTS.update(r.recorded for _, r in replayed.results)
        for turn in self.wc.maintenance.decisions(self.item_id):
            if turn["verdict"]["kind"] == "applied" and turn["decision"]:
                SEEN_KINDS.add(turn["decision"]["kind"])


def test_replay_is_always_the_same_and_covers_every_kind() -> None:
    SEEN_VERDICTS.clear()
    SEEN_KINDS.clear()
    run_state_machine_as_test(
        ReplayMachine,
        settings=settings(
            max_examples=25,
            stateful_step_count=25,
            deadline=None,
            derandomize=True,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )
    assert SEEN_VERDICTS == VERDICTS, SEEN_VERDICTS
    assert SEEN_KINDS == KINDS, SEEN_KINDS
