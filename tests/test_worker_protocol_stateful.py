"""Stateful property test of the worker protocol's service part (ADR-0063): remote
workers that the network duplicates, delays and reorders.

A hypothesis ``RuleBasedStateMachine`` claims Runs for two remote processes, and
sends finishes, reservations and settlements, each possibly again later, with
fences that may have gone stale (the clock jumps past leases, idle claims recover
them). The test's model says what each call must do: a fresh write on a live
fence is written; the same finish, reservation or settlement again answers what
the first answered and writes nothing; another report or usage for one already
recorded is refused; anything on a stale fence is ``StaleRun``, but a first settlement
of the Run's own reservation, which records what was spent (ADR-0133). Every refusal is a
typed error and leaves the event count unchanged.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from conftest import FakeClock
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from workcenter.application import Claim, WorkCenter
from workcenter.domain import action as act
from workcenter.domain.errors import CommandRefused, StaleRun, WorkcenterError

OUTCOMES = ("completed", "failed", "retryable")
REQUEST_IDS = ("r1", "r2")
USAGES = ({"input_tokens": 10, "output_tokens": 5}, {"input_tokens": 3, "output_tokens": 1})


@dataclass
class Held:
    """A claim as its worker holds it, and what the test has sent for it."""

    claim: Claim
    finished: tuple[str, str, str] | None = None  # (outcome sent, outcome, action status)
    reserved: set[str] = field(default_factory=set)
    settled: dict[str, int] = field(default_factory=dict)  # request id -> usage index


class Protocol(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.directory = tempfile.mkdtemp()
        self.clock = FakeClock(datetime(2030, 1, 1, tzinfo=UTC))
        self.wc = WorkCenter.open(Path(self.directory) / "p.db", clock=self.clock)
        for n in range(2):
            item = self.wc.create_work_item(
                title=f"item {n}",
                goal="Drain",
                acceptance_criteria=["It ran"],
                delivery_target="response",
                start=True,
            )
            steps = [
                {
                    "type": "implement",
                    "objective": f"step {k}",
                    "approach": "echo",
                    "expectedOutcome": "ok",
                    "workspaceMode": "read",
                }
                for k in range(3)
            ]
            self.wc.plan_actions(item.id, expected_version=item.version, actions=steps)
        self.held: list[Held] = []

    def teardown(self) -> None:
        self.wc.close()
        shutil.rmtree(self.directory, ignore_errors=True)

    # --- the model ----------------------------------------------------------------

    def live(self, held: Held) -> bool:
        ref = held.claim.ref
        action = self.wc.action(ref.action_id)
        try:
            act.live_run(action, ref, at=self.clock.now())
        except StaleRun:
            return False
        return True

    def call(self, send: Any) -> tuple[Any, int]:
        """The call's answer (or its typed error) and how many events it wrote."""
        before = self.wc.event_count()
        try:
            answer = send()
        except WorkcenterError as error:
            assert self.wc.event_count() == before, f"{type(error).__name__} wrote events"
            return error, 0
        return answer, self.wc.event_count() - before

    # --- rules --------------------------------------------------------------------

    @initialize()
    def a_first_claim(self) -> None:
        self.claim("proc-a", 60)

    @rule(boot=st.sampled_from(("proc-a", "proc-b")), lease=st.sampled_from((5, 60)))
    def claim(self, boot: str, lease: int) -> None:
        claimed, _ = self.call(lambda: self.wc.worker_protocol.claim("remote", boot, lease))
        if isinstance(claimed, Claim):
            assert claimed.boot_id == boot
            self.held.append(Held(claimed))

    @rule(seconds=st.sampled_from((1, 6, 61)))
    def time_passes(self, seconds: int) -> None:
        self.clock.advance(seconds)

    @rule()
    def idle_claims_recover(self) -> None:
        recovered, _ = self.call(self.wc.worker_protocol.recover_expired)
        for run_id in recovered:
            assert all(h.finished is None for h in self.held if h.claim.run_id == run_id)

    @precondition(lambda self: self.held)
    @rule(data=st.data())
    def finish(self, data: st.DataObject) -> None:
        held = data.draw(st.sampled_from(self.held))
        # A network mostly duplicates what was sent; now and then a worker errs.
        again = [held.finished[0]] * 3 if held.finished else []
        outcome = data.draw(st.sampled_from([*again, *OUTCOMES]))
        checks = [{"criterion": c, "status": "passed"} for c in held.claim.acceptance_criteria]
        report = {"outcome": outcome, "evidence": ["ok"], "acceptanceChecks": checks}
        live = self.live(held)
        answer, wrote = self.call(lambda: self.wc.worker_protocol.finish(held.claim.ref, report))
        event(f"finish: {_kind(answer)}")
        if held.finished is not None:
            sent, first_outcome, first_status = held.finished
            if sent == outcome:
                assert not isinstance(answer, WorkcenterError), answer
                assert answer.replayed and wrote == 0
                assert (answer.outcome, answer.action_status) == (first_outcome, first_status)
            else:
                assert type(answer) is CommandRefused
        elif live:
            assert not isinstance(answer, WorkcenterError), answer
            assert not answer.replayed and wrote > 0
            held.finished = (outcome, answer.outcome, answer.action_status)
        else:
            assert type(answer) is StaleRun

    @precondition(lambda self: self.held)
    @rule(data=st.data(), suffix=st.sampled_from(REQUEST_IDS))
    def reserve(self, data: st.DataObject, suffix: str) -> None:
        held = data.draw(st.sampled_from(self.held))
        request_id = f"{held.claim.run_id}:{suffix}"  # as the reference worker names them
        request = {"messages": [{"role": "user", "content": "go"}], "max_tokens": 64}
        live = self.live(held)
        answer, wrote = self.call(
            lambda: self.wc.worker_protocol.reserve(held.claim.ref, request_id, request)
        )
        event(f"reserve: {_kind(answer)}")
        if request_id in held.reserved and live:
            assert not isinstance(answer, WorkcenterError), answer
            # Resent: "send it" while it is not settled, never once it is (ADR-0136).
            settled = request_id in held.settled
            assert answer.replayed and answer.allowed is not settled and wrote == 0
            assert answer.code == ("request_already_settled" if settled else None)
        elif live:
            assert not isinstance(answer, WorkcenterError), answer
            assert not answer.replayed
            if answer.allowed:
                held.reserved.add(request_id)
        else:
            assert type(answer) is StaleRun

    @precondition(lambda self: any(h.reserved for h in self.held))
    @rule(data=st.data())
    def settle(self, data: st.DataObject) -> None:
        held = data.draw(st.sampled_from([h for h in self.held if h.reserved]))
        request_id = data.draw(st.sampled_from(sorted(held.reserved)))
        again = [held.settled[request_id]] * 3 if request_id in held.settled else []
        usage = data.draw(st.sampled_from([*again, *range(len(USAGES))]))
        event(f"settle by a live Run: {self.live(held)}")
        answer, wrote = self.call(
            lambda: self.wc.worker_protocol.settle(held.claim.ref, request_id, USAGES[usage], True)
        )
        event(f"settle: {_kind(answer)}")
        if request_id in held.settled:
            if held.settled[request_id] == usage:
                assert not isinstance(answer, WorkcenterError), answer
                assert answer.replayed and wrote == 0
            else:
                assert type(answer) is CommandRefused
        else:  # live or not: what was spent is recorded (ADR-0133)
            assert not isinstance(answer, WorkcenterError), answer
            assert not answer.replayed and answer.status == "reported" and wrote > 0
            held.settled[request_id] = usage

    # --- invariants ---------------------------------------------------------------

    @invariant()
    def every_recorded_finish_is_the_one_the_test_sent_first(self) -> None:
        for held in self.held:
            run = self.wc.action(held.claim.action_id).run(held.claim.run_id)
            assert run is not None
            if held.finished is not None:
                assert run.status == held.finished[1]

    @invariant()
    def each_settled_request_is_charged_its_first_usage(self) -> None:
        for held in self.held:
            ledger = self.wc.ledger(held.claim.work_item_id)
            for request_id, usage in held.settled.items():
                reservation = ledger.reservations[request_id]
                assert reservation.run_id == held.claim.run_id
                expected = sum(USAGES[usage].values())
                assert reservation.charged_tokens == expected


def _kind(answer: Any) -> str:
    if isinstance(answer, WorkcenterError):
        return type(answer).__name__
    return "replayed" if answer.replayed else "written"


def test_the_worker_protocol_under_duplicated_delayed_and_stale_messages() -> None:
    Protocol.TestCase.settings = settings(
        max_examples=25,
        stateful_step_count=40,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    Protocol.TestCase().runTest()
