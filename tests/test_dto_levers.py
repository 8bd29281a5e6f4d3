"""ADR-0037: the detail, summary and broadcast DTOs built the faster way are the bytes the
plain path (tests/plain_dto.py, the code before ADR-0037) gives, for random states."""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any, get_args
from uuid import UUID

import orjson
import plain_dto
import test_dto as b
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workcenter.domain.action import ActionState, ActionStatus, Run, RunStatus
from workcenter.domain.evidence import normalize_evidence, normalize_outputs
from workcenter.domain.resource_ledger import LedgerState, StopReason
from workcenter.domain.run import RunCounters, RunProgress, RunResult
from workcenter.domain.work_item import (
    STATUSES,
    AcceptanceResult,
    FinalResult,
    ResultOutput,
    ResultResponse,
    WorkItemState,
)
from workcenter.projections import dto
from workcenter.projections.budget import MIN_BUDGET
from workcenter.projections.detail import build_detail
from workcenter.projections.sanitize import cnt

TEXTS = ("", "Done", "see /home/ann/x", "token=abc123", "Wait for review", "é" * 40, "a" * 200)
CRITERIA = ("Tests pass", "Docs updated", "token: s3cret")


@st.composite
def runs_of(draw: st.DrawFn, name: str) -> list[Run]:
    runs = []
    for j in range(draw(st.integers(0, 3))):
        status: RunStatus = draw(st.sampled_from(get_args(RunStatus)))
        criteria = draw(st.sampled_from([CRITERIA[:2], CRITERIA[:1], CRITERIA]))
        result = draw(
            st.one_of(
                st.none(),
                st.builds(
                    RunResult,
                    summary=st.sampled_from(TEXTS),
                    response=st.sampled_from(TEXTS),
                    evidence=st.sampled_from(
                        [(), normalize_evidence(["ran pytest", {"tool": "out", "isError": True}])]
                    ),
                    outputs=st.sampled_from(
                        [(), normalize_outputs([{"kind": "file", "label": "f", "ref": "d/f"}])]
                    ),
                    checks=st.sampled_from(
                        [(), b.checks(criteria=criteria), b.checks("failed", "passed")]
                    ),
                    waiting_reason=st.sampled_from([None, "Need a key"]),
                    error=st.sampled_from([None, "boom at /srv/x"]),
                    failure_code=st.sampled_from([None, "E1"]),
                    review_decision=st.sampled_from([None, "approved"]),
                ),
            )
        )
        progress = draw(
            st.sampled_from(
                [
                    None,
                    RunProgress(summary="half", counters=RunCounters(loop_count=3, tool_count=2)),
                ]
            )
        )
        start = draw(st.integers(0, 5_000))
        end = None if status == "running" else start + draw(st.integers(0, 5_000))
        run = b.run(
            f"{name}-r{j}",
            start,
            end,
            status=status,
            revision=draw(st.integers(1, 2)),
            ordinal=j + 1,
            expires=start + draw(st.integers(1, 20_000)),
            result=result,
        )
        runs.append(
            run.model_copy(
                update={
                    "progress": progress,
                    "generation": draw(st.integers(1, 2)),
                    "spec_hash": draw(st.sampled_from(["spec-1", "spec-2"])),
                    "deferred": draw(st.booleans()),
                }
            )
        )
    return runs


@st.composite
def actions_of(draw: st.DrawFn) -> list[ActionState]:
    actions = []
    for i in range(draw(st.integers(0, 4))):
        runs = draw(runs_of(f"a{i}"))
        status: ActionStatus = draw(st.sampled_from(get_args(ActionStatus)))
        action = b.action(
            f"a{i}",
            *runs,
            sequence=draw(st.integers(1, 3)),  # equal sequences: ids break the tie
            status=status,
            mode=draw(st.sampled_from(["read", "shared", "isolated-write"])),
            objective=draw(st.sampled_from(TEXTS[1:])),
            approach=draw(st.sampled_from(TEXTS)),
            close_reason=draw(st.sampled_from([None, "no longer needed"])),
        )
        completed = [r.id for r in runs if r.status == "completed"]
        actions.append(
            action.model_copy(
                update={
                    "version": draw(st.integers(1, 9)),
                    "brief": action.brief.model_copy(
                        update={"expected_outcome": draw(st.sampled_from(TEXTS))}
                    ),
                    "contract_revision": draw(st.integers(1, 2)),
                    "current_run_id": runs[-1].id if runs and draw(st.booleans()) else None,
                    "result_run_id": draw(st.sampled_from([None, *completed])),
                }
            )
        )
    return actions


def final_result(run_ids: list[UUID], action_ids: list[UUID]) -> FinalResult:
    some = run_ids[:1] or [b.uid("nowhere")]
    return FinalResult(
        summary="All done",
        acceptance_results=(
            AcceptanceResult(criterion="Tests pass", status="passed", evidence_run_ids=tuple(some)),
        ),
        evidence_run_ids=tuple(run_ids),
        outputs=tuple(
            ResultOutput(kind="file", label="f", ref="d/f", action_id=a, run_id=some[0])
            for a in action_ids[:1]
        ),
        responses=tuple(
            ResultResponse(run_id=r, summary="answer", evidence=("ran pytest", "out")) for r in some
        ),
        residual_risks=("none",),
    )


@st.composite
def states(
    draw: st.DrawFn,
) -> tuple[WorkItemState, list[ActionState], LedgerState | None, dict[str, Any]]:
    actions = draw(actions_of())
    run_ids = [r.id for a in actions for r in a.runs]
    state = b.item(
        criteria=draw(st.sampled_from([CRITERIA[:2], (), CRITERIA])),
        status=draw(st.sampled_from(STATUSES)),
        current=draw(st.sampled_from([None, "nowhere", *(f"a{i}" for i in range(len(actions)))])),
        target=draw(st.sampled_from([None, "response", "workspace_files", "pull_request"])),
        stopped=draw(st.sampled_from([None, "budget"])),
    )
    state = state.model_copy(
        update={
            "mode": draw(st.sampled_from(["dynamic", "linear"])),
            "contract_revision": draw(st.integers(1, 2)),
            "final_result": final_result(run_ids, [a.id for a in actions])
            if draw(st.booleans())
            else None,
        }
    )
    rows = [
        b.reservation(
            f"q{k}",
            draw(st.sampled_from([None, *run_ids])),
            status=draw(st.sampled_from(["reported", "reserved", "unknown"])),
            kind=draw(st.sampled_from(["action", "coordinator"])),
            tokens=draw(st.integers(10, 500)),
        )
        for k in range(draw(st.integers(0, 4)))
    ]
    stop = StopReason(
        code="work_item_tokens_exhausted", at=b.T0, details={"run_id": "r", "free": "x"}
    )
    led = draw(st.sampled_from([None, b.ledger(*rows), b.ledger(*rows, stop=stop)]))
    stats = {r: {"loopCount": draw(st.sampled_from([1, -1, 2.5, math.inf, True]))} for r in run_ids}
    options: dict[str, Any] = {
        "now": b.T0 + timedelta(milliseconds=draw(st.integers(0, 30_000))),
        "run_stats": draw(st.sampled_from([None, stats])),
        "coordinator_revision": draw(st.integers(0, 3)),
    }
    return state, actions, led, options


@st.composite
def conversations(draw: st.DrawFn) -> dict[str, Any]:
    decision = {"kind": "request_human", "question": draw(st.sampled_from(TEXTS))}
    messages = [b.message(n) for n in range(draw(st.integers(0, 3)))]
    if draw(st.booleans()):
        messages.append(b.message(9, role="assistant", decision=decision))
    return {
        "messages": messages,
        "turns": [b.message(n) for n in range(draw(st.integers(0, 2)))],
        "attachments": [{"id": "f1", "name": "a.png", "size": 3}] * draw(st.integers(0, 2)),
        "live_message": draw(st.sampled_from([None, "partial"])),
        "budget": draw(st.sampled_from([dto.MAX_DTO_BYTES, MIN_BUDGET, 4 * 1024])),
    }


SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(states(), conversations())
def test_the_detail_dto_is_the_plain_paths_bytes(scenario: tuple, extra: dict[str, Any]) -> None:
    state, actions, led, options = scenario
    faster = dto.detail_dto(state, actions, led, **options, **extra)
    plain = plain_dto.detail_dto(state, actions, led, **options, **extra)
    assert orjson.dumps(faster) == orjson.dumps(plain)


@SETTINGS
@given(states())
def test_the_stored_detail_is_the_plain_paths_bytes(scenario: tuple) -> None:
    state, actions, led, options = scenario
    plain = plain_dto.detail_dto(state, actions, led, now=options["now"])
    stored = build_detail(state, {a.id: a for a in actions}, led, options["now"])
    assert stored == orjson.dumps(plain)


@SETTINGS
@given(states(), st.sampled_from([None, "partial"]), st.sampled_from([dto.MAX_DTO_BYTES, 4096]))
def test_summary_and_broadcast_are_the_plain_paths_bytes(
    scenario: tuple, live: str | None, budget: int
) -> None:
    state, actions, led, options = scenario
    for name in ("summary_dto", "broadcast_dto"):
        args: tuple[Any, ...] = (state, actions, led)
        kwargs = options | {"budget": budget}
        if name == "broadcast_dto":
            args = ("run.finished", *args)
            kwargs |= {"live_message": live, "action_id": "a", "run_id": "r"}
        faster = getattr(dto, name)(*args, **kwargs)
        plain = getattr(plain_dto, name)(*args, **kwargs)
        assert orjson.dumps(faster) == orjson.dumps(plain)


@SETTINGS
@given(states())
def test_execution_stats_and_control_are_the_plain_paths(scenario: tuple) -> None:
    _, actions, led, options = scenario
    runs = [r for a in actions for r in a.runs]
    for whole_item in (False, True):
        for rows in (runs, runs[:1]):
            kwargs = {"whole_item": whole_item, "run_stats": options["run_stats"]}
            assert dto.execution_stats(rows, led, **kwargs) == plain_dto.execution_stats(
                rows, led, **kwargs
            )
    if led is not None:
        now = options["now"]
        assert dto.execution_control(led, actions, now=now) == plain_dto.execution_control(
            led, actions, now=now
        )


def test_a_stored_detail_over_the_budget_is_the_plain_paths_trimmed_bytes() -> None:
    """The one branch where the view serialises twice: the raw DTO does not fit."""
    criteria = tuple(f"{i} " + "c" * 3990 for i in range(100))  # twice 400 KB of criteria
    state = b.item(criteria=criteria)
    actions = [b.action("a0", b.run("r0", checks=b.checks(criteria=criteria)))]
    stored = build_detail(state, {a.id: a for a in actions}, b.ledger(), b.NOW)
    plain = plain_dto.detail_dto(state, actions, b.ledger(), now=b.NOW)
    assert plain["truncated"] is True
    assert stored == orjson.dumps(plain)


NUMBERS = st.one_of(
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.none(),
    st.text(max_size=3),
)


def plain_cnt(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0
    if isinstance(value, float) and not math.isfinite(value):
        return 0
    return int(value) if value > 0 else 0


@given(NUMBERS)
def test_cnt_is_the_plain_rule(value: object) -> None:
    assert cnt(value) == plain_cnt(value)
    assert type(cnt(value)) is int
