"""Stateful property test of the ResourceLedger through the service (resource-ledger.md 6).

A hypothesis ``RuleBasedStateMachine`` drives one dynamic WorkItem with small
limits through random reservations (Coordinator and Action requests of a few
Runs), settlements (complete, incomplete, missing usage, of known and unknown
ids), hidden retries, crashes (a reservation never settled, then a restarted
service), Coordinator failures, extensions and resumes (fresh or stale
versions). A reference model predicts every answer and every event count.

After each step: the ledger equals the model; per reservation charged >= the
reported total, reported => charged == total, else charged >= the estimate;
the request count never falls; a stop is cleared only by resume and never
replaced; the WorkItem mirrors the stop; folding the stored events equals the
service's state; and replaying the history shows no request was admitted past
``max_requests``, ``max_run_requests`` or ``max_tokens`` at its admission.
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
from collections import Counter
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, cast
from uuid import UUID

import pytest
from conftest import SHM, T0, FakeClock, action_spec, budget_commands
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.internal.cache import LRUCache
from hypothesis.internal.conjecture import providers
from hypothesis.internal.floats import float_to_int
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from sortedcontainers import SortedSet

from workcenter.application import WorkCenter
from workcenter.domain import resource_ledger as rl
from workcenter.domain.errors import CommandRefused, VersionConflict
from workcenter.service_layer import repository as workcenter_store

LIMITS = {
    "max_requests": 6,
    "max_tokens": 2_000,
    "max_run_requests": 3,
    "max_action_attempts": 3,
    "max_coordinator_failures": 4,
}
ADDITIONS = {
    "max_requests": 3,
    "max_tokens": 1_500,
    "max_run_requests": 2,
    "max_coordinator_failures": 1,
    "max_action_attempts": 1,
}
# Which of the item's three Runs a request names, or none (a Coordinator request): a
# request names a Run of its own item.
RUNS = [None, 0, 1, 2]
TICK = timedelta(milliseconds=1)
STATS: Counter[str] = Counter()


def request(tokens: int) -> dict[str, Any]:
    """A request whose estimate is exactly ``tokens``."""
    return {"max_tokens": tokens - 1}


@dataclass
class Row:
    """The model of one reservation."""

    run_id: UUID | None
    estimate: int
    charged: int
    status: str = "reserved"
    usage: rl.Usage | None = None


# usage payload shapes, with the total the spec gives each
Payload = tuple[dict[str, Any], int]
payloads = st.one_of(
    st.integers(0, 2_500).map(lambda t: ({"total_tokens": t}, t)),
    st.integers(0, 2_500).map(lambda t: ({"input_tokens": t}, t)),
    st.tuples(st.integers(0, 1_000), st.integers(0, 1_000)).map(
        lambda p: ({"inputTokens": p[0], "cache_read_input_tokens": p[1]}, p[0] + p[1])
    ),
    st.tuples(st.integers(0, 1_000), st.integers(0, 1_000)).map(
        lambda p: (
            {
                "input_tokens": p[0],
                "cache_read_tokens": p[1],
                "cacheTokensAreIncludedInInput": True,
            },
            p[0],
        )
    ),
)


class LedgerMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        STATS["examples"] += 1
        shm = SHM if SHM.is_dir() and os.access(SHM, os.W_OK) else None
        self.dir = tempfile.mkdtemp(prefix="wc-ledger-", dir=shm)
        self.path = os.path.join(self.dir, "ledger.db")
        self.clock = FakeClock(T0)
        self.boots = itertools.count(1)
        self.wc = self._open()
        item = self.wc.create_work_item(
            title="Budgeted", goal="Spend carefully", mode="dynamic", start=True, limits=LIMITS
        )
        self.item_id = item.id
        # Live for the whole example (the clock moves a millisecond a step); the ledger
        # does not see them: only requests naming them.
        self.wc.plan_actions(
            item.id,
            expected_version=item.version,
            actions=[action_spec(objective=f"Part {n}") for n in range(3)],
        )
        self.runs = [self.wc.claim_next("w", lease_seconds=3_600).run_id for _ in range(3)]
        self.ledger_id = rl.ledger_id_for(item.id)
        self.ids = itertools.count(1)
        # the reference model
        self.limits = dict(LIMITS)
        self.rows: dict[str, Row] = {}
        self.crashed: set[str] = set()
        self.stop: str | None = None
        self.refused_tokens = 0  # the estimate of the request a token stop refused
        self.failures = 0
        self.version = 1  # the ledger's version: LedgerOpened
        self.control = [1]  # versions of LedgerOpened, stops, extensions, resumes
        # what the previous step left, for the step invariants
        self.last_rule = "init"
        self.seen_stop: rl.StopReason | None = None
        self.seen_count = 0

    def _open(self) -> WorkCenter:
        return WorkCenter.open(self.path, clock=self.clock, boot_id=f"boot-{next(self.boots)}")

    def teardown(self) -> None:
        self.wc.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    # --- the model -----------------------------------------------------------------

    def charged(self) -> int:
        return sum(r.charged for r in self.rows.values())

    def shortfall(self) -> int:
        """What max_tokens lacks for the request the stop refused (ADR-0091)."""
        if self.stop != "work_item_tokens_exhausted" or not self.refused_tokens:
            return 0
        return max(self.charged() + self.refused_tokens - self.limits["max_tokens"], 0)

    def spent(self) -> bool:
        """A budget is spent, or the refused request does not fit: resume is refused."""
        return (
            len(self.rows) >= self.limits["max_requests"]
            or self.charged() >= self.limits["max_tokens"]
            or self.failures >= self.limits["max_coordinator_failures"]
            or self.shortfall() > 0
        )

    def record_stop(self, code: str, refused_tokens: int = 0) -> None:
        if self.stop is None:
            self.stop, self.refused_tokens = code, refused_tokens
            self.version += 1
            self.control.append(self.version)
            STATS[f"stop_{code}"] += 1

    def predict_reserve(self, request_id: str, tokens: int, run_id: UUID | None) -> str | None:
        """The denial code, or None when the request is admitted."""
        if request_id in self.rows:
            return "request_already_reserved"
        if self.stop is not None:
            return self.stop
        if (
            run_id is not None
            and sum(1 for r in self.rows.values() if r.run_id == run_id)
            >= self.limits["max_run_requests"]
        ):
            return "run_requests_exhausted"
        if len(self.rows) >= self.limits["max_requests"]:
            return "work_item_requests_exhausted"
        if self.charged() + tokens > self.limits["max_tokens"]:
            return "work_item_tokens_exhausted"
        return None

    def addition(self, name: str) -> tuple[str, int]:
        """A fixed addition to ``name``; for "spent", enough to unblock a spent budget."""
        if name != "spent":
            return name, ADDITIONS[name]
        deficits = {
            "max_requests": len(self.rows) - self.limits["max_requests"],
            "max_tokens": max(self.charged() - self.limits["max_tokens"], self.shortfall() - 1),
            "max_coordinator_failures": self.failures - self.limits["max_coordinator_failures"],
        }
        spent = [(k, d) for k, d in deficits.items() if d >= 0]
        if not spent:
            return "max_tokens", ADDITIONS["max_tokens"]
        name, deficit = spent[0]
        return name, deficit + ADDITIONS[name]

    def pick_version(self, data: st.DataObject, stale: bool) -> int:
        return data.draw(st.integers(1, self.version)) if stale else self.version

    def conflicts(self, seen: int) -> bool:
        return any(version > seen for version in self.control)

    # --- step helpers --------------------------------------------------------------

    def step(self, name: str) -> None:
        self.last_rule = name
        self.clock.advance(TICK.total_seconds())

    def do_reserve(self, request_id: str, tokens: int, run_id: UUID | None) -> bool:
        before = self.wc.ledger(self.item_id)
        count = self.wc.event_count()
        expected = self.predict_reserve(request_id, tokens, run_id)
        admission = self.wc.reserve_request(
            self.item_id,
            request=request(tokens),
            kind="coordinator" if run_id is None else "action",
            run_id=run_id,
            request_id=request_id,
        )
        assert (admission.allowed, admission.code) == (expected is None, expected)
        if expected is None:
            # admitted within every limit, as the ledger stood at admission time
            assert before.stop_reason is None
            assert before.request_count < before.limits.max_requests
            assert run_id is None or before.run_requests(run_id) < before.limits.max_run_requests
            assert before.charged_tokens + tokens <= before.limits.max_tokens
            self.rows[request_id] = Row(run_id=run_id, estimate=tokens, charged=tokens)
            self.version += 1
            assert self.wc.event_count() == count + 1
            STATS["reserve_allowed"] += 1
            return True
        if expected in ("request_already_reserved", self.stop):
            assert self.wc.event_count() == count  # denials 1 to 3 write nothing
            STATS["reserve_denied_quietly"] += 1
        else:
            self.record_stop(expected, refused_tokens=tokens)
            assert self.wc.event_count() == count + 3  # the stop and the WorkItem status
        return False

    def do_settle(self, request_id: str, payload: Payload | None, complete: bool) -> None:
        count = self.wc.event_count()
        usage = rl.normalize_usage(payload[0]) if payload else None
        total = payload[1] if payload else 0
        assert (usage.total_tokens if usage else 0) == total
        row = self.rows.get(request_id)
        noop = (
            row is None or row.status == "reported" or (row.status == "unknown" and usage is None)
        )
        settled = self.wc.settle_request(
            self.item_id, request_id, usage=payload[0] if payload else None, complete=complete
        )
        assert settled == (not noop)
        if row is None or noop:
            assert self.wc.event_count() == count
            STATS["settle_noop"] += 1
            return
        if complete and total > 0:
            row.status, row.charged, row.usage = "reported", total, usage
        else:
            row.status, row.charged = "unknown", max(row.estimate, total)
            row.usage = usage if usage is not None else row.usage
        STATS[f"settle_{row.status}"] += 1
        self.version += 1
        stopped_before = self.stop
        if self.charged() > self.limits["max_tokens"]:
            STATS["overrun"] += 1
            self.record_stop("work_item_tokens_exhausted")
        writes = 1 if self.stop == stopped_before else 4
        assert self.wc.event_count() == count + writes

    # --- rules ---------------------------------------------------------------------

    @rule(tokens=st.integers(2, 1_200), run=st.sampled_from(RUNS))
    def reserve(self, tokens: int, run: int | None) -> None:
        self.step("reserve")
        self.do_reserve(f"r{next(self.ids)}", tokens, None if run is None else self.runs[run])

    @precondition(lambda self: bool(self.rows))
    @rule(data=st.data(), tokens=st.integers(2, 1_200))
    def replay_reservation(self, data: st.DataObject, tokens: int) -> None:
        """A replayed request id is denied and never counted twice."""
        self.step("replay")
        request_id = data.draw(st.sampled_from(sorted(self.rows)))
        assert not self.do_reserve(request_id, tokens, self.rows[request_id].run_id)

    @rule(
        data=st.data(),
        mode=st.sampled_from(["complete", "incomplete", "missing", "missing_complete"]),
        payload=payloads,
        pick=st.sampled_from(["pending"] * 6 + ["any"] * 3 + ["ghost"]),
    )
    def settle(self, data: st.DataObject, mode: str, payload: Payload, pick: str) -> None:
        self.step("settle")
        candidates = sorted(set(self.rows) - self.crashed)
        pending = [k for k in candidates if self.rows[k].status != "reported"]
        if pick == "pending" and pending:
            candidates = pending
        if pick == "ghost" or not candidates:
            request_id = f"ghost-{next(self.ids)}"
        else:
            request_id = data.draw(st.sampled_from(candidates))
        given = None if mode.startswith("missing") else payload
        self.do_settle(request_id, given, complete=mode in ("complete", "missing_complete"))

    @precondition(lambda self: bool(self.settleable()))
    @rule(data=st.data(), extra=st.integers(1, 500))
    def overrun(self, data: st.DataObject, extra: int) -> None:
        """A provider reports more than the budget has left: the item stops. A rule of
        its own, since ``settle`` meets it only by chance (once not at all, when other
        test modules were collected beside this one)."""
        self.step("settle")
        request_id = data.draw(st.sampled_from(self.settleable()))
        left = self.limits["max_tokens"] - self.charged() + self.rows[request_id].charged
        total = max(1, left + extra)
        self.do_settle(request_id, ({"total_tokens": total}, total), complete=True)

    def settleable(self) -> list[str]:
        return sorted(
            k for k, r in self.rows.items() if r.status != "reported" and k not in self.crashed
        )

    @precondition(lambda self: any(r.status == "reserved" for r in self.rows.values()))
    @rule(data=st.data(), tokens=st.integers(2, 1_200))
    def hidden_retry(self, data: st.DataObject, tokens: int) -> None:
        """A provider retry inside one call: a second request; the first becomes unknown."""
        self.step("hidden_retry")
        reserved = sorted(
            k for k, r in self.rows.items() if r.status == "reserved" and k not in self.crashed
        )
        if not reserved:
            return
        first = data.draw(st.sampled_from(reserved))
        run_id = self.rows[first].run_id
        if self.do_reserve(f"{first}:retry:{next(self.ids)}", tokens, run_id):
            STATS["hidden_retry"] += 1
            self.do_settle(first, None, complete=False)
            assert self.rows[first].charged == self.rows[first].estimate

    @rule(tokens=st.integers(2, 1_200), run=st.sampled_from(RUNS))
    def crash(self, tokens: int, run: int | None) -> None:
        """Reserve, then the process dies before settling: a restarted service still counts it."""
        self.step("crash")
        request_id = f"c{next(self.ids)}"
        run_id = None if run is None else self.runs[run]
        if self.do_reserve(request_id, tokens, run_id):
            self.crashed.add(request_id)
            self.wc.close()
            self.wc = self._open()
            row = self.wc.ledger(self.item_id).reservations[request_id]
            assert (row.status, row.charged_tokens) == ("reserved", tokens)
            STATS["crash"] += 1

    @precondition(lambda self: self.failures < 8)  # else failure stops crowd out the rest
    @rule()
    def coordinator_failure(self) -> None:
        self.step("failure")
        count = self.wc.event_count()
        ledger = budget_commands(self.wc).record_coordinator_failure(
            self.item_id, turn_id=f"t{next(self.ids)}"
        )
        self.failures += 1
        self.version += 1
        stopped_before = self.stop
        if self.failures >= self.limits["max_coordinator_failures"]:
            self.record_stop("coordinator_failures_exhausted")
        assert self.wc.event_count() == count + (1 if self.stop == stopped_before else 4)
        assert ledger.retry_after == self.clock.now() + rl.backoff(self.failures)

    @rule(
        data=st.data(),
        name=st.sampled_from([*sorted(ADDITIONS), "spent", "spent", "spent"]),
        stale=st.sampled_from([False, False, False, True]),
    )
    def extend(self, data: st.DataObject, name: str, stale: bool) -> None:
        self.step("extend")
        seen = self.pick_version(data, stale)
        name, amount = self.addition(name)
        count = self.wc.event_count()
        try:
            self.wc.extend_budget(self.item_id, expected_version=seen, additions={name: amount})
        except VersionConflict:
            assert self.conflicts(seen)
            assert self.wc.event_count() == count
            STATS["extend_conflict"] += 1
            return
        assert not self.conflicts(seen)
        self.limits[name] += amount
        self.version += 1
        self.control.append(self.version)
        assert self.wc.event_count() == count + 1
        STATS["extend"] += 1

    @precondition(lambda self: self.stop is not None)
    @rule()
    def unblock(self) -> None:
        """A user extends every spent budget at once, then resumes with fresh versions."""
        self.step("unblock")
        additions: dict[str, int] = {}
        while self.spent():
            name, amount = self.addition("spent")
            additions[name] = additions.get(name, 0) + amount
            self.limits[name] += amount
        if additions:
            self.wc.extend_budget(self.item_id, expected_version=self.version, additions=additions)
            self.version += 1
            self.control.append(self.version)
        self.wc.resume(
            self.item_id,
            expected_version=self.wc.work_item(self.item_id).version,
            expected_ledger_version=self.version,
        )
        self.last_rule = "resume"
        self.stop = None
        self.version += 1
        self.control.append(self.version)
        STATS["unblock"] += 1

    @rule(data=st.data(), stale=st.sampled_from([False, False, False, True]))
    def resume(self, data: st.DataObject, stale: bool) -> None:
        self.step("resume")
        seen = self.pick_version(data, stale)
        count = self.wc.event_count()
        item = self.wc.work_item(self.item_id)
        try:
            self.wc.resume(
                self.item_id, expected_version=item.version, expected_ledger_version=seen
            )
        except VersionConflict:
            assert self.conflicts(seen)
            outcome = "resume_conflict"
        except CommandRefused as error:
            assert not self.conflicts(seen)
            if self.stop is None:
                assert "can be resumed" in str(error)
                outcome = "resume_not_stopped"
            else:
                assert self.spent() and "extend the budget first" in str(error)
                outcome = "resume_spent"
                if self.charged() < self.limits["max_tokens"] and self.shortfall():
                    assert f"needs {self.shortfall()} more token" in str(error)
                    outcome = "resume_short"  # nothing is spent; the refused request lacks room
        else:
            assert not self.conflicts(seen) and self.stop is not None and not self.spent()
            self.stop = None
            self.version += 1
            self.control.append(self.version)
            STATS["resume"] += 1
            return
        assert self.wc.event_count() == count
        STATS[outcome] += 1

    # --- invariants ----------------------------------------------------------------

    @invariant()
    def ledger_matches_the_model(self) -> None:
        ledger = self.wc.ledger(self.item_id)
        assert ledger.version == self.version
        assert ledger.control_version == self.control[-1]
        assert ledger.limits == rl.Limits(**self.limits)
        assert ledger.coordinator_failures == self.failures
        assert (ledger.stop_reason.code if ledger.stop_reason else None) == self.stop
        actual = {
            k: (r.run_id, r.estimated_tokens, r.charged_tokens, r.status, r.usage)
            for k, r in ledger.reservations.items()
        }
        model = {
            k: (r.run_id, r.estimate, r.charged, r.status, r.usage) for k, r in self.rows.items()
        }
        assert actual == model
        for crashed in self.crashed:
            assert ledger.reservations[crashed].status == "reserved"

    @invariant()
    def every_charge_covers_its_usage(self) -> None:
        """Invariant 1."""
        for row in self.wc.ledger(self.item_id).reservations.values():
            total = row.usage.total_tokens if row.usage else 0
            assert row.charged_tokens >= total
            if row.status == "reported":
                assert row.charged_tokens == total > 0
            else:
                assert row.charged_tokens >= row.estimated_tokens

    @invariant()
    def requests_never_fall_and_only_resume_clears_a_stop(self) -> None:
        """Invariants 5 and 6, and the WorkItem mirrors the stop."""
        ledger = self.wc.ledger(self.item_id)
        assert ledger.request_count >= self.seen_count
        self.seen_count = ledger.request_count
        if self.seen_stop is not None:
            if ledger.stop_reason is None:
                assert self.last_rule == "resume"
            else:
                assert ledger.stop_reason == self.seen_stop  # the first reason wins
        self.seen_stop = ledger.stop_reason
        item = self.wc.work_item(self.item_id)
        assert item.stopped == self.stop
        assert item.status == ("needs_attention" if self.stop else "running")

    @invariant()
    def replay_equals_the_service_and_admitted_only_within_limits(self) -> None:
        events = cast(list[rl.LedgerEvent], list(self.wc.store.events.get(self.ledger_id)))
        assert rl.fold(None, events) == self.wc.ledger(self.item_id)
        state: rl.LedgerState | None = None
        for event in events:
            if isinstance(event, rl.RequestReserved):
                assert state is not None and state.stop_reason is None
                assert state.request_count < state.limits.max_requests
                if event.run_id is not None:
                    assert state.run_requests(event.run_id) < state.limits.max_run_requests
                assert state.charged_tokens + event.estimated_tokens <= state.limits.max_tokens
            elif isinstance(event, rl.ExecutionStopped):
                assert state is not None and state.stop_reason is None
            state = rl.evolve(state, event)


def _no_constants() -> providers.Constants:
    return providers.Constants(
        integers=SortedSet(),
        floats=SortedSet(key=float_to_int),
        bytes=SortedSet(),
        strings=SortedSet(),
    )


def test_the_ledger_agrees_with_its_model(monkeypatch: pytest.MonkeyPatch) -> None:
    # Snapshot often, so a restarted service loads the ledger from a snapshot.
    monkeypatch.setattr(workcenter_store, "SNAPSHOT_INTERVAL", 5)
    # Hypothesis also draws constants found in the modules loaded so far (ours among
    # them), so what a derandomized run draws moved with the test modules collected
    # beside this one, and a rare outcome was once reached alone but not with them:
    # none are drawn here, whatever else was loaded.
    monkeypatch.setattr(providers, "_get_local_constants", _no_constants)
    monkeypatch.setattr(providers, "CONSTANTS_CACHE", LRUCache(1024))
    STATS.clear()
    run_state_machine_as_test(
        LedgerMachine,
        settings=settings(
            max_examples=120,
            stateful_step_count=50,
            deadline=None,
            derandomize=True,  # deterministic, so the reach assertions cannot flake
            database=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
    reached = [
        "reserve_allowed",
        "reserve_denied_quietly",
        "stop_run_requests_exhausted",
        "stop_work_item_requests_exhausted",
        "stop_work_item_tokens_exhausted",
        "stop_coordinator_failures_exhausted",
        "settle_reported",
        "settle_unknown",
        "settle_noop",
        "overrun",
        "hidden_retry",
        "crash",
        "extend",
        "extend_conflict",
        "resume",
        "resume_conflict",
        "resume_spent",
        "resume_short",
        "resume_not_stopped",
        "unblock",
    ]
    missing = [key for key in reached if not STATS[key]]
    assert not missing, f"never reached {missing}: {dict(STATS)}"
