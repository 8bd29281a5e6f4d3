"""Issue 8, the Python API's input handling: every bad input is a typed error that
writes nothing (findings 1, 4, 5, 6, 7, 8 and 12, one section each)."""

from __future__ import annotations

import inspect
import math
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import pytest
from conftest import (
    BACKENDS,
    BOOT_ID,
    FakeClock,
    action_spec,
    claim,
    create_dynamic,
    create_linear,
    plan,
    refused,
    report,
)

from workcenter.application import WorkCenter
from workcenter.domain import action as act
from workcenter.domain import bounds
from workcenter.domain import resource_ledger as rl
from workcenter.domain.errors import InvalidInput, NotFound, VersionConflict

SURROGATE = "\ud800"


# --- 1. an id of another aggregate type is NotFound, in every process ----------------


def _wrong_id_reads(wc: WorkCenter, item_id: UUID, action_id: UUID) -> list[Callable[[], Any]]:
    """Every call below gets an Action or ledger id where another aggregate's is expected."""
    ledger_id = rl.ledger_id_for(item_id)
    ref = act.RunRef(action_id=item_id, run_id=uuid4(), boot_id=BOOT_ID, lease_epoch=1)
    return [
        lambda: wc.work_item(action_id),
        lambda: wc.work_item(ledger_id),
        lambda: wc.action(item_id),
        lambda: wc.action(ledger_id),
        lambda: wc.detail(action_id),
        lambda: wc.goal_progress(action_id),
        lambda: wc.history(action_id),
        lambda: wc.action_history(item_id),
        lambda: wc.audit(action_id),
        lambda: wc.state_at(action_id, version=1),
        lambda: wc.ledger(action_id),
        lambda: wc.extend_budget(action_id, expected_version=1, additions={"max_requests": 1}),
        lambda: wc.resume(action_id, expected_version=1, expected_ledger_version=1),
        lambda: wc.retry(item_id, item_id, expected_version=1),
        lambda: wc.guide(item_id, ledger_id, expected_version=1, guidance="hint"),
        lambda: wc.finish_run(ref, report()),
        lambda: wc.interrupt(ref),
    ]


def _planned(wc: WorkCenter) -> tuple[UUID, UUID]:
    item = plan(wc, create_dynamic(wc).id)
    return item.id, item.plan[0].action_id


def test_a_foreign_id_is_not_found_in_a_fresh_process(db_path: Path, clock: FakeClock) -> None:
    with WorkCenter.open(db_path, clock=clock, boot_id=BOOT_ID) as first:
        item_id, action_id = _planned(first)
    with WorkCenter.open(db_path, clock=clock, boot_id=BOOT_ID) as fresh:
        for call in _wrong_id_reads(fresh, item_id, action_id):
            with refused(fresh, NotFound):
                call()


def test_a_foreign_id_is_not_found_when_cached(wc: WorkCenter) -> None:
    item_id, action_id = _planned(wc)
    wc.action(action_id)
    wc.work_item(item_id)
    claimed = claim(wc)  # moves the cached Action on: the cache is fast-forwarded
    for call in _wrong_id_reads(wc, item_id, action_id):
        with refused(wc, NotFound):
            call()
    wc.finish_run(claimed, report())  # the right ids still load


# --- 4. leases have documented bounds --------------------------------------------------

BAD_LEASES = [0, -5, 0.5, 86_401, 1e12, math.nan, math.inf, -math.inf, "60", True, None]


@pytest.mark.parametrize("lease", BAD_LEASES, ids=repr)
def test_claim_refuses_a_lease_out_of_bounds(wc: WorkCenter, lease: Any) -> None:
    plan(wc, create_dynamic(wc).id)
    with refused(wc, InvalidInput, "lease_seconds must be a number from 1 to 86400"):
        wc.claim_next("w1", lease_seconds=lease)


@pytest.mark.parametrize("lease", BAD_LEASES, ids=repr)
def test_renew_refuses_a_lease_out_of_bounds(wc: WorkCenter, lease: Any) -> None:
    create_linear(wc)
    claimed = claim(wc)
    with refused(wc, InvalidInput, "lease_seconds"):
        wc.renew_lease(claimed, lease_seconds=lease)


def test_the_lease_bounds_themselves_are_accepted(wc: WorkCenter) -> None:
    create_linear(wc)
    claimed = claim(wc, lease_seconds=bounds.LEASE_MIN_SECONDS)
    assert wc.renew_lease(claimed, lease_seconds=bounds.LEASE_MAX_SECONDS)


# --- 5. resume requires the ledger version the user saw --------------------------------


def test_resume_requires_the_expected_ledger_version(wc: WorkCenter) -> None:
    parameter = inspect.signature(WorkCenter.resume).parameters["expected_ledger_version"]
    assert parameter.default is inspect.Parameter.empty
    assert parameter.kind is inspect.Parameter.KEYWORD_ONLY
    item = wc.cancel(create_linear(wc).id)
    with refused(wc, InvalidInput, "expected_ledger_version must be an integer"):
        wc.resume(item.id, expected_version=item.version, expected_ledger_version=None)  # type: ignore[arg-type]
    seen = wc.ledger(item.id).version
    wc.extend_budget(item.id, expected_version=seen, additions={"max_requests": 1})
    with refused(wc, VersionConflict, "Execution control"):
        wc.resume(item.id, expected_version=item.version, expected_ledger_version=seen)
    # Named as `budget show` names it: the ledger's version, not the control version.
    ledger = wc.ledger(item.id)
    with refused(wc, VersionConflict, f"\\(the ledger\\) is at version {ledger.version} "):
        wc.extend_budget(item.id, expected_version=99, additions={"max_requests": 1})


# --- 6. two contract edits from one version: one winner, titles too --------------------


def test_two_title_edits_from_one_version_have_one_winner(wc: WorkCenter) -> None:
    item = create_linear(wc)
    wc.update_contract(item.id, expected_version=item.version, title="Alice's title")
    with refused(wc, VersionConflict) as info:
        wc.update_contract(item.id, expected_version=item.version, title="Bob's title")
    assert info.value.conflicting == ["TitleChanged"]  # type: ignore[attr-defined]
    assert wc.work_item(item.id).title == "Alice's title"


# --- 7. expected versions are integers, never "check off" -------------------------------

NOT_VERSIONS = [None, "1", True, 1.0]


def _version_commands(wc: WorkCenter, bad: Any) -> Iterator[Callable[[], Any]]:
    dynamic = plan(wc, create_dynamic(wc).id)
    action_id = dynamic.plan[0].action_id
    yield lambda: wc.update_contract(dynamic.id, expected_version=bad, title="x")
    yield lambda: wc.retry(dynamic.id, action_id, expected_version=bad)
    yield lambda: wc.guide(dynamic.id, action_id, expected_version=bad, guidance="x")
    yield lambda: wc.plan_actions(dynamic.id, expected_version=bad, actions=[action_spec()])
    yield lambda: wc.complete(dynamic.id, expected_version=bad, completion={})
    yield lambda: wc.extend_budget(dynamic.id, expected_version=bad, additions={"max_tokens": 1})
    yield lambda: wc.add_input(
        dynamic.id, action_id, expected_version=bad, expected_generation=1, text="x"
    )
    yield lambda: wc.add_input(
        dynamic.id, action_id, expected_version=dynamic.version, expected_generation=bad, text="x"
    )
    cancelled = wc.cancel(create_linear(wc).id)
    ledger = wc.ledger(cancelled.id).version
    yield lambda: wc.resume(cancelled.id, expected_version=bad, expected_ledger_version=ledger)
    yield lambda: wc.resume(
        cancelled.id, expected_version=cancelled.version, expected_ledger_version=bad
    )
    if bad is not None:  # these two take None as "no check", as their signatures say
        draft = create_linear(wc, start=False)
        yield lambda: wc.start(draft.id, expected_version=bad)
        yield lambda: wc.guide(
            dynamic.id,
            action_id,
            expected_version=dynamic.version,
            expected_generation=bad,
            guidance="x",
        )


@pytest.mark.parametrize("bad", NOT_VERSIONS, ids=repr)
def test_an_expected_version_that_is_no_integer_is_invalid(wc: WorkCenter, bad: Any) -> None:
    for call in _version_commands(wc, bad):
        with refused(wc, InvalidInput, "must be an integer"):
            call()


def test_a_version_too_large_to_store_is_invalid(wc: WorkCenter) -> None:
    item = create_linear(wc)
    with refused(wc, InvalidInput, "at most"):
        wc.update_contract(item.id, expected_version=2**63, title="x")
    with refused(wc, InvalidInput, "at most"):
        wc.state_at(item.id, version=10**30)
    with refused(wc, InvalidInput, "at most"):
        wc.audit(item.id, limit=-(10**30))


# --- 8. no untyped exception escapes ----------------------------------------------------


def _surrogate_commands(wc: WorkCenter) -> Iterator[Callable[[], Any]]:
    s = SURROGATE
    yield lambda: wc.create_work_item(title=s, goal="g")
    yield lambda: wc.create_work_item(title="t", goal=f"goal {s}")
    yield lambda: wc.create_work_item(title="t", goal="g", acceptance_criteria=["ok", s])
    yield lambda: wc.create_work_item(title="t", goal="g", mode="linear", stages=("triage", s))
    item = plan(wc, create_dynamic(wc).id)
    action_id = item.plan[0].action_id
    yield lambda: wc.update_contract(item.id, expected_version=item.version, goal=s)
    yield lambda: wc.guide(item.id, action_id, expected_version=item.version, guidance=s)
    yield lambda: wc.plan_actions(
        item.id, expected_version=item.version, actions=[action_spec(objective=s)]
    )
    yield lambda: wc.plan_actions(
        item.id, expected_version=item.version, actions=[action_spec()], rationale=s
    )
    yield lambda: wc.complete(item.id, expected_version=item.version, completion={"summary": s})
    yield lambda: wc.reserve_request(item.id, request={"system": s})
    yield lambda: wc.reserve_request(item.id, request={}, request_id=s)
    yield lambda: wc.claim_next(s)
    claimed = claim(wc)
    yield lambda: wc.finish_run(claimed, report(summary=s))
    yield lambda: wc.finish_run(claimed, report(evidence=[{"kind": "text", "label": s}]))
    yield lambda: wc.finish_run(claimed, report(outputs=[{"kind": "link", "label": "l", s: 1}]))
    yield lambda: wc.interrupt(claimed, reason=s)
    yield lambda: wc.cancel(item.id, reason=s)


def test_a_lone_surrogate_is_invalid_input_before_anything_is_written(wc: WorkCenter) -> None:
    for call in _surrogate_commands(wc):
        with refused(wc, InvalidInput, "surrogate"):
            call()


def test_malformed_arguments_are_typed_errors(wc: WorkCenter) -> None:
    item = create_linear(wc)
    with refused(wc, InvalidInput, "a stage is a name or an object"):
        wc.create_work_item(title="t", goal="g", mode="linear", stages=(1, 2))  # type: ignore[arg-type]
    with refused(wc, InvalidInput, "a Claim or a RunRef"):
        wc.finish_run(None, report())  # type: ignore[arg-type]
    with refused(wc, InvalidInput, "a Claim or a RunRef"):
        wc.renew_lease({"action_id": item.id})  # type: ignore[arg-type]
    claimed = claim(wc)
    with refused(wc, InvalidInput, "a run report must be a mapping"):
        wc.finish_run(claimed, None)  # type: ignore[arg-type]
    with refused(wc, InvalidInput, "the request holds a value of type object, which is not JSON"):
        wc.reserve_request(item.id, request={"messages": [object()]})


@pytest.mark.parametrize("bad_id", ["abc", "", 5, None, 1.5, b"\x00" * 16], ids=repr)
def test_an_id_that_is_no_uuid_is_a_typed_error(wc: WorkCenter, bad_id: Any) -> None:
    item = create_linear(wc)
    expected = NotFound if isinstance(bad_id, str) else InvalidInput
    for call in (
        lambda: wc.work_item(bad_id),
        lambda: wc.action(bad_id),
        lambda: wc.detail(bad_id),
        lambda: wc.history(bad_id),
        lambda: wc.cancel(bad_id),
        lambda: wc.retry(item.id, bad_id, expected_version=item.version),
        lambda: wc.audit(item.id, action_id=bad_id) if bad_id is not None else wc.audit(bad_id),
    ):
        with refused(wc, expected):
            call()


def test_a_uuid_string_names_the_same_item(wc: WorkCenter) -> None:
    item = create_linear(wc)
    assert wc.work_item(str(item.id)).id == item.id  # type: ignore[arg-type]


# --- 12. every text and list has a bound; past it, InvalidInput, never a cut -------------


def _past_bounds(wc: WorkCenter) -> Iterator[tuple[str, Callable[[], Any]]]:
    over = {"title": "t" * (bounds.TITLE + 1), "goal": "g" * (bounds.GOAL + 1)}
    yield "title", lambda: wc.create_work_item(title=over["title"], goal="g")
    yield "goal", lambda: wc.create_work_item(title="t", goal="g" * 10_000_000)
    yield (
        "acceptance_criteria",
        lambda: wc.create_work_item(
            title="t", goal="g", acceptance_criteria=[f"c{i}" for i in range(10_000)]
        ),
    )
    yield (
        "acceptance_criteria",
        lambda: wc.create_work_item(
            title="t", goal="g", acceptance_criteria=["c" * (bounds.CRITERION + 1)]
        ),
    )
    yield (
        "stages",
        lambda: wc.create_work_item(
            title="t", goal="g", mode="linear", stages=("implement",) * (bounds.STAGES + 1)
        ),
    )
    item = plan(wc, create_dynamic(wc).id)
    action_id = item.plan[0].action_id
    yield (
        "title",
        lambda: wc.update_contract(item.id, expected_version=item.version, title=over["title"]),
    )
    yield (
        "goal",
        lambda: wc.update_contract(item.id, expected_version=item.version, goal=over["goal"]),
    )
    yield "reason", lambda: wc.cancel(item.id, reason="r" * (bounds.REASON + 1))
    yield (
        "guidance",
        lambda: wc.guide(
            item.id, action_id, expected_version=item.version, guidance="g" * (bounds.GUIDANCE + 1)
        ),
    )
    yield (
        "rationale",
        lambda: wc.plan_actions(
            item.id,
            expected_version=item.version,
            actions=[action_spec()],
            rationale="r" * (bounds.RATIONALE + 1),
        ),
    )
    yield (
        "approach",
        lambda: wc.plan_actions(
            item.id,
            expected_version=item.version,
            actions=[action_spec(approach="a" * (bounds.BRIEF_FIELD + 1))],
        ),
    )
    yield (
        "residual_?[rR]isks",
        lambda: wc.complete(
            item.id,
            expected_version=item.version,
            completion={"summary": "s", "acceptanceResults": [], "residualRisks": ["r"] * 25},
        ),
    )
    yield "worker", lambda: wc.claim_next("w" * (bounds.WORKER + 1))
    claimed = claim(wc)
    yield (
        "run report",
        lambda: wc.finish_run(claimed, report(acceptanceChecks=[{"criterion": "c"}] * 10_000)),
    )
    yield "run report", lambda: wc.finish_run(claimed, report(summary="s" * 2_000_000))
    yield "reason", lambda: wc.interrupt(claimed, reason="r" * (bounds.REASON + 1))


def test_input_past_a_bound_is_refused_not_cut(wc: WorkCenter) -> None:
    for name, call in _past_bounds(wc):
        with refused(wc, InvalidInput, name):
            call()


def test_a_triage_patch_past_the_title_bound_is_refused_not_cut(wc: WorkCenter) -> None:
    create_linear(wc)
    claimed = claim(wc)
    patch = {"title": "t" * (bounds.TITLE + 1)}
    with refused(wc, InvalidInput, "contractPatch.title is longer than 200"):
        wc.finish_run(claimed, report(contractPatch=patch))


def test_a_title_at_its_bound_is_kept_whole(wc: WorkCenter) -> None:
    title = "t" * bounds.TITLE
    assert wc.create_work_item(title=title, goal="g").title == title


def test_docs_list_every_bound() -> None:
    """docs/limits.md states every figure of domain/bounds.py, so users can rely on them."""
    limits = (Path(__file__).parent.parent / "docs" / "limits.md").read_text()
    figures = set(re.findall(r"\b\d[\d,]*\b", limits))
    for name, value in vars(bounds).items():
        if name.isupper() and isinstance(value, int):
            assert f"{value:,}" in figures, f"docs/limits.md does not state {name} = {value:,}"


# --- numbers past what JSON readers take -----------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_request_or_usage_past_2_53_is_refused_and_writes_nothing(
    wc: WorkCenter, backend: str
) -> None:
    """Such a number used to pass the ledger and fail in the detail DTO's JSON with a
    TypeError: the typed error comes first now, and nothing is written."""
    item = create_linear(wc, stages=("implement",))
    claimed = claim(wc)
    too_many = bounds.INTEGER + 1
    request = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": too_many}
    with refused(wc, InvalidInput, "max_tokens must be at most"):
        wc.reserve_request(item.id, request=request, run_id=claimed.run_id)
    admitted = wc.reserve_request(
        item.id, request={**request, "max_tokens": 64}, run_id=claimed.run_id
    )
    # Infinity, and an integer too large for a float (an OverflowError escaped, found by
    # acceptance testing, ADR-0140), are refused as any count past the bound.
    past = ({"input_tokens": too_many}, {"output_tokens": 2**70}, {"output_tokens": 10**400})
    for usage in (*past, {"total_tokens": float("inf")}):
        with refused(wc, InvalidInput, "usage count must be at most"):
            wc.settle_request(item.id, admitted.request_id, usage=usage)
    assert wc.settle_request(item.id, admitted.request_id, usage={"input_tokens": 9})
