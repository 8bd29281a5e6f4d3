"""Goal progress derivation (read-models.md section 1; invariants from section 5)."""

from __future__ import annotations

import random
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, get_args
from uuid import UUID, uuid5

from hypothesis import given, settings
from hypothesis import strategies as st

from workcenter.domain.action import ActionState, ActionStatus, Brief, Run, RunResult, RunStatus
from workcenter.domain.evidence import (
    AcceptanceCheck,
    CheckStatus,
    EvidenceItem,
    normalize_evidence,
    normalize_outputs,
)
from workcenter.domain.goal_progress import (
    Blocker,
    CriterionProgress,
    GoalProgress,
    current_run,
    derive_goal_progress,
    is_proof,
    observed_at,
    pass_at,
)

# --- builders ----------------------------------------------------------------

T0 = datetime(2026, 1, 1, tzinfo=UTC)
C1, C2 = "Tests pass", "Docs updated"
CRITERIA = (C1, C2)
ITEM_REVISION = 2
NAMESPACE = UUID("6f1d4a52-0000-4000-8000-000000000000")
WORK_ITEM = uuid5(NAMESPACE, "work-item")
PYTEST = normalize_evidence(["ran pytest"])
_DEFAULT: Any = object()  # marks "use the common-setup value" where None is meaningful


def at(ms: int) -> datetime:
    return T0 + timedelta(milliseconds=ms)


def ms(moment: datetime) -> int:
    return (moment - T0) // timedelta(milliseconds=1)


def uid(name: str) -> UUID:
    return uuid5(NAMESPACE, name)


def checks(c1: CheckStatus = "passed", c2: CheckStatus = "passed") -> tuple[AcceptanceCheck, ...]:
    return (
        AcceptanceCheck(criterion=C1, status=c1, evidence="pytest output"),
        AcceptanceCheck(criterion=C2, status=c2, evidence="docs diff"),
    )


def run(
    name: str,
    start: int,
    end: int | None,
    *,
    status: RunStatus = "completed",
    revision: int = ITEM_REVISION,
    generation: int = 1,
    spec: str = "spec-1",
    result: RunResult | None = _DEFAULT,
    **result_fields: Any,
) -> Run:
    """A Run of the common setup; ``result_fields`` override parts of its result."""
    if result is _DEFAULT:
        fields: dict[str, Any] = {"summary": "Report", "evidence": PYTEST, "checks": checks()}
        result = RunResult(**(fields | result_fields))
    return Run(
        id=uid(name),
        ordinal=1,
        worker="w",
        owner_boot_id="boot",
        lease_epoch=1,
        started_at=at(start),
        expires_at=at(start + 60_000),
        generation=generation,
        spec_hash=spec,
        attempt=1,
        contract_revision=revision,
        status=status,
        ended_at=None if end is None else at(end),
        result=result,
    )


def action(
    name: str,
    *runs: Run,
    sequence: int | None = None,
    status: ActionStatus = "completed",
    mode: str = "read",
    revision: int = ITEM_REVISION,
    generation: int = 1,
    spec: str = "spec-1",
    result_run_id: UUID | None = _DEFAULT,
    objective: str = "Do the work",
) -> ActionState:
    """An Action of the common setup; its result Run defaults to its last completed Run."""
    if result_run_id is _DEFAULT:
        completed = [r.id for r in runs if r.status == "completed"]
        result_run_id = completed[-1] if status == "completed" and completed else None
    return ActionState.model_validate(
        {
            "id": uid(name),
            "version": 1,
            "work_item_id": WORK_ITEM,
            "sequence": int(name.lstrip("a")) if sequence is None else sequence,
            "type": "implement",
            "brief": Brief(objective=objective),
            "workspace_mode": mode,
            "max_attempts": 2,
            "contract_revision": revision,
            "context": (),
            "status": status,
            "attempt": 1,
            "lease_epoch": 1,
            "current_run_id": None,
            "generation": generation,
            "spec_hash": spec,
            "result_run_id": result_run_id,
            "close_reason": None,
            "runs": runs,
            "updated_at": T0,
        }
    )


def derive(
    actions: Sequence[ActionState],
    target: str | None = "response",
    *,
    revision: int = ITEM_REVISION,
    criteria: tuple[str, ...] = CRITERIA,
) -> GoalProgress:
    return derive_goal_progress(
        criteria=criteria, contract_revision=revision, delivery_target=target, actions=actions
    )


def statuses(progress: GoalProgress) -> tuple[str, ...]:
    return tuple(c.status for c in progress.criteria)


def a1() -> ActionState:
    return action("a1", run("r-a1", 100, 110))


def a2_writer(**result_fields: Any) -> ActionState:
    fields: dict[str, Any] = {
        "checks": (),
        "outputs": normalize_outputs([{"kind": "file", "label": "report", "ref": "docs/r.md"}]),
    }
    return action("a2", run("r-a2", 120, 130, **(fields | result_fields)), mode="shared")


def a4_failed(status: ActionStatus = "failed") -> ActionState:
    failing = run(
        "r-a4",
        105,
        150,
        status="failed",
        error="pytest: 3 failed",
        checks=checks("failed", "not_applicable"),
    )
    return action("a4", failing, status=status)


# --- worked examples (section 1.5) -------------------------------------------


def test_example_1_one_proof_passes_everything() -> None:
    progress = derive([a1()])
    r_a1 = uid("r-a1")
    assert progress.criteria == (
        CriterionProgress(criterion=C1, status="passed", evidence_run_ids=(r_a1,)),
        CriterionProgress(criterion=C2, status="passed", evidence_run_ids=(r_a1,)),
    )
    assert (progress.completed_criteria_count, progress.total_criteria_count) == (2, 2)
    assert progress.remaining_criteria == ()
    assert progress.evidence_run_ids == (r_a1,)
    assert progress.proof_run_ids == (r_a1,)
    assert progress.delivery.status == "passed"
    assert progress.delivery.evidence_run_ids == (r_a1,)
    assert progress.blockers == ()


def test_example_1b_action_at_an_earlier_revision_proves_nothing() -> None:
    progress = derive([action("a1", run("r-a1", 100, 110, revision=1), revision=1)])
    assert statuses(progress) == ("unmet", "unmet")
    assert progress.remaining_criteria == CRITERIA
    assert progress.delivery.status == "unmet"


def test_example_2_a_later_writer_makes_the_proof_stale() -> None:
    progress = derive([a1(), a2_writer()], "workspace_files")
    assert statuses(progress) == ("unmet", "unmet")
    assert progress.delivery.status == "unmet"
    assert progress.proof_run_ids == ()


def test_example_2b_a_verifier_after_the_writer_passes_but_does_not_deliver_files() -> None:
    a3 = action("a3", run("r-a3", 131, 140))
    progress = derive([a1(), a2_writer(), a3], "workspace_files")
    assert statuses(progress) == ("passed", "passed")
    assert all(c.evidence_run_ids == (uid("r-a3"),) for c in progress.criteria)
    assert progress.delivery.status == "unmet"  # the file output is on r-a2, not the proof


def test_example_2b_a_verifier_starting_when_the_writer_ends_is_stale() -> None:
    a3 = action("a3", run("r-a3", 130, 140))
    progress = derive([a1(), a2_writer(), a3], "workspace_files")
    assert statuses(progress) == ("unmet", "unmet")
    assert progress.delivery.status == "unmet"


def test_example_2c_a_writer_proves_and_delivers_its_own_work() -> None:
    progress = derive([a2_writer(checks=checks())], "workspace_files")
    r_a2 = uid("r-a2")
    assert statuses(progress) == ("passed", "passed")
    assert all(c.evidence_run_ids == (r_a2,) for c in progress.criteria)
    assert progress.delivery.status == "passed"
    assert progress.delivery.evidence_run_ids == (r_a2,)


def test_example_3_a_failure_ending_after_the_pass_started_conflicts() -> None:
    progress = derive([a1(), a4_failed()])
    assert progress.criteria == (
        CriterionProgress(
            criterion=C1, status="failed", evidence_run_ids=(), conflicting_run_ids=(uid("r-a4"),)
        ),
        CriterionProgress(criterion=C2, status="passed", evidence_run_ids=(uid("r-a1"),)),
    )
    assert progress.remaining_criteria == (C1,)
    assert progress.completed_criteria_count == 1
    assert progress.blockers == (
        Blocker(action_id=uid("a4"), status="failed", reason="pytest: 3 failed"),
    )
    assert progress.delivery.status == "passed"


def test_example_3b_closing_the_failed_action_keeps_the_conflict_but_not_the_blocker() -> None:
    progress = derive([a1(), a4_failed("closed")])
    assert progress.criteria[0].status == "failed"
    assert progress.criteria[0].conflicting_run_ids == (uid("r-a4"),)
    assert progress.blockers == ()


def test_example_3c_a_new_proof_after_the_failure_passes_again() -> None:
    a5 = action("a5", run("r-a5", 160, 170))
    progress = derive([a1(), a4_failed("closed"), a5])
    assert statuses(progress) == ("passed", "passed")
    assert all(c.evidence_run_ids == (uid("r-a1"), uid("r-a5")) for c in progress.criteria)
    assert progress.evidence_run_ids == (uid("r-a1"), uid("r-a5"))


def _a6(pr_status: str) -> ActionState:
    pr = {"kind": "pr", "label": "PR", "ref": "https://github.com/o/r/pull/7", "status": pr_status}
    return action("a6", run("r-a6", 100, 110, outputs=normalize_outputs([pr])))


def test_example_4_a_pending_pull_request_fails_every_criterion() -> None:
    progress = derive([_a6("pending")], "pull_request")
    assert statuses(progress) == ("failed", "failed")
    assert all(c.conflicting_run_ids == (uid("r-a6"),) for c in progress.criteria)
    assert all(c.evidence_run_ids == () for c in progress.criteria)
    assert progress.delivery.status == "unmet"


def test_example_4_a_completed_pull_request_passes_and_delivers() -> None:
    progress = derive([_a6("completed")], "pull_request")
    assert statuses(progress) == ("passed", "passed")
    assert progress.delivery.status == "passed"
    assert progress.delivery.evidence_run_ids == (uid("r-a6"),)


def test_example_5_a_waiting_action_blocks_with_its_reason() -> None:
    waiting = run("r-a7", 100, 110, status="waiting", waiting_reason="Need staging credentials")
    progress = derive([action("a7", waiting, status="waiting")])
    assert statuses(progress) == ("unmet", "unmet")
    assert progress.blockers == (
        Blocker(action_id=uid("a7"), status="waiting", reason="Need staging credentials"),
    )
    assert progress.delivery.status == "unmet"


def test_example_5b_a_deferred_check_leaves_the_criterion_unmet() -> None:
    progress = derive([action("a1", run("r-a1", 100, 110, checks=checks(c2="deferred")))])
    assert statuses(progress) == ("passed", "unmet")
    assert progress.delivery.status == "passed"


def test_example_5b_a_failed_check_fails_the_criterion_and_the_response() -> None:
    progress = derive([action("a1", run("r-a1", 100, 110, checks=checks(c2="failed")))])
    assert statuses(progress) == ("passed", "failed")
    assert progress.criteria[1].conflicting_run_ids == (uid("r-a1"),)
    assert progress.delivery.status == "unmet"


def test_example_5c_an_errored_tool_in_the_evidence_fails_every_criterion() -> None:
    evidence = normalize_evidence(["ran pytest", {"tool": "bash", "isError": True}])
    progress = derive([action("a1", run("r-a1", 100, 110, evidence=evidence))])
    assert statuses(progress) == ("failed", "failed")
    assert all(c.conflicting_run_ids == (uid("r-a1"),) for c in progress.criteria)


# --- helpers reused by completion checks --------------------------------------


def test_current_run_of_a_failed_action_is_the_latest_observed_and_counts_retryable() -> None:
    early = run("r-1", 100, 200, status="failed")
    late = run("r-2", 150, 210, status="retryable")
    assert current_run(action("a1", early, late, status="failed"), ITEM_REVISION) == late


def test_current_run_ties_break_on_later_start_then_id() -> None:
    early = run("r-1", 100, 200, status="failed")
    late = run("r-2", 150, 200, status="failed")
    for runs in ((early, late), (late, early)):
        assert current_run(action("a1", *runs, status="failed"), ITEM_REVISION) == late
    twins = (run("r-3", 100, 200, status="waiting"), run("r-4", 100, 200, status="waiting"))
    winner = max(twins, key=lambda r: r.id)
    for runs in (twins, twins[::-1]):
        assert current_run(action("a1", *runs, status="waiting"), ITEM_REVISION) == winner


def test_a_failure_ending_exactly_when_the_pass_starts_still_conflicts() -> None:
    failing = run("r-a4", 50, 100, status="failed", checks=checks(c1="failed"))
    progress = derive([a1(), action("a4", failing, status="failed")])
    assert statuses(progress) == ("failed", "passed")


def test_conflicts_are_listed_newest_start_first_then_by_id() -> None:
    def failing(name: str, start: int) -> ActionState:
        bad = run(f"r-{name}", start, 300, status="failed", checks=checks(c1="failed"))
        return action(name, bad, status="failed")

    actions = [failing("a1", 100), failing("a2", 200), failing("a3", 200)]
    tied = tuple(sorted((uid("r-a2"), uid("r-a3"))))
    for order in (actions, actions[::-1]):
        assert derive(order).criteria[0].conflicting_run_ids == (*tied, uid("r-a1"))


def test_current_run_ignores_runs_of_another_generation_or_spec() -> None:
    old = run("r-old", 100, 110)
    guided = action("a1", old, status="completed", generation=2, spec="spec-2")
    assert current_run(guided, ITEM_REVISION) is None
    respecified = action("a1", old, status="completed", spec="spec-other")
    assert current_run(respecified, ITEM_REVISION) is None


def test_is_proof_needs_evidence_valid_checks_and_no_contradiction() -> None:
    assert is_proof(run("r", 1, 2), CRITERIA)
    assert not is_proof(run("r", 1, 2, evidence=()), CRITERIA)
    assert not is_proof(run("r", 1, 2, checks=checks()[:1]), CRITERIA)
    assert not is_proof(run("r", 1, 2, review_decision="changes_requested"), CRITERIA)
    assert not is_proof(run("r", 1, 2, status="failed"), CRITERIA)


def test_blocker_reason_falls_back_to_the_objective() -> None:
    failed = action("a1", run("r-a1", 1, 2, status="failed", result=None), status="failed")
    assert derive([failed]).blockers[0].reason == "Do the work"


def test_an_interrupted_runs_reason_is_its_blockers_reason() -> None:
    """A Run that ended without a report (its executor raised) said why only in its end
    reason; the blocker gave the Action's objective, which says nothing of the failure
    (found by acceptance testing)."""
    interrupted = run("r-a1", 1, 2, status="interrupted", result=None).model_copy(
        update={"end_reason": "executor raised RuntimeError: executor crashed"}
    )
    failed = action("a1", interrupted, status="failed")
    assert derive([failed]).blockers[0].reason == "executor raised RuntimeError: executor crashed"


# --- property tests (section 5) ------------------------------------------------

_OUTPUTS: tuple[tuple[EvidenceItem, ...], ...] = (
    (),
    normalize_outputs([{"kind": "file", "label": "f", "ref": "a.txt"}]),
    normalize_outputs([{"kind": "file", "label": "f", "ref": "a.txt", "status": "pending"}]),
    normalize_outputs([{"kind": "pr", "label": "p", "ref": "https://github.com/o/r/pull/7"}]),
    normalize_outputs([{"kind": "commit", "label": "c", "ref": "abcdef1"}]),
)
_EVIDENCE = ((), PYTEST, normalize_evidence(["x", {"tool": "bash", "isError": True}]))
_CHECK_STATUSES: tuple[CheckStatus, ...] = get_args(CheckStatus)


_CLEAN_OUTPUTS = tuple(o for o in _OUTPUTS if not any(item.is_negative for item in o))
# Mostly "passed" so that criteria pass often enough for the pass properties to bite.
_LIKELY_CHECK = st.sampled_from(["passed", "passed", "passed", *_CHECK_STATUSES])


@st.composite
def results(draw: st.DrawFn, clean: bool = False) -> RunResult | None:
    """Clean (a proof if its Run is current and fresh) when asked, else half the time."""
    if not clean and draw(st.integers(0, 9)) == 0:
        return None
    found = tuple(
        AcceptanceCheck(criterion=c, status=draw(_LIKELY_CHECK), evidence="e") for c in CRITERIA
    )
    if clean or draw(st.booleans()):
        outputs = draw(st.sampled_from(_CLEAN_OUTPUTS))
        return RunResult(summary="Report", evidence=PYTEST, outputs=outputs, checks=found)
    shape = draw(st.sampled_from(["valid", "valid", "short", "renamed", "none"]))
    if shape == "short":
        found = found[:1]
    elif shape == "renamed":
        found = (found[0].model_copy(update={"criterion": "other"}), found[1])
    elif shape == "none":
        found = ()
    return RunResult(
        summary=draw(st.sampled_from(["", "Report"])),
        evidence=draw(st.sampled_from(_EVIDENCE)),
        outputs=draw(st.sampled_from(_OUTPUTS)),
        checks=found,
        error=draw(st.sampled_from([None, None, None, "boom"])),
        review_decision=draw(st.sampled_from([None, None, "approved", "changes_requested"])),
        waiting_reason=draw(st.sampled_from([None, "why"])),
    )


@st.composite
def scenarios(draw: st.DrawFn) -> list[ActionState]:
    """Actions whose Runs mostly share the Action's identity, so that current Runs,
    proofs and stale or conflicting ones all turn up regularly."""
    sizes = draw(st.lists(st.integers(0, 3), max_size=5))
    ids = iter(draw(st.lists(st.uuids(), min_size=len(sizes) + sum(sizes), unique=True)))
    actions = []
    for size in sizes:
        # A third of the Actions are shaped like a verifier that finished cleanly,
        # otherwise proofs are too rare for the pass properties to be exercised.
        shaped = size > 0 and draw(st.integers(0, 2)) == 0
        generation = 1 if shaped else draw(st.sampled_from([1, 1, 2]))
        revision = ITEM_REVISION if shaped else draw(st.sampled_from([ITEM_REVISION, 1]))
        runs = []
        for _ in range(size):
            status = "completed" if shaped else draw(st.sampled_from(get_args(RunStatus)))
            # Coarse times make the equal-time edge cases (strict freshness, ties) common.
            start = 5 * draw(st.integers(8, 18) if shaped else st.integers(0, 12))
            end = None if status == "running" else start + 5 * draw(st.integers(0, 6))
            run_generation = draw(st.sampled_from([generation, generation, 3 - generation]))
            if shaped:
                run_generation = generation
            runs.append(
                Run(
                    id=next(ids),
                    ordinal=1,
                    worker="w",
                    owner_boot_id="b",
                    lease_epoch=1,
                    started_at=at(start),
                    expires_at=at(10_000),
                    generation=run_generation,
                    spec_hash=f"spec-{run_generation}",
                    attempt=1,
                    contract_revision=revision
                    if shaped
                    else draw(st.sampled_from([revision, revision, 3 - revision])),
                    status=status,
                    ended_at=None if end is None else at(end),
                    result=None if status == "running" else draw(results(clean=shaped)),
                )
            )
        completed = [r.id for r in runs if r.status == "completed"]
        base = action(
            "a1",
            *runs,
            sequence=draw(st.integers(1, 4)),
            status="completed" if shaped else draw(st.sampled_from(get_args(ActionStatus))),
            mode=draw(st.sampled_from(["read", "read", "shared", "isolated-write"])),
            revision=revision,
            generation=generation,
            spec=f"spec-{generation}",
            result_run_id=completed[-1]
            if shaped
            else draw(st.sampled_from([*completed[-1:], None, *(r.id for r in runs)])),
        )
        actions.append(base.model_copy(update={"id": next(ids)}))
    return actions


def _runs(actions: Sequence[ActionState]) -> dict[UUID, tuple[ActionState, Run]]:
    return {r.id: (a, r) for a in actions for r in a.runs}


def _failing_observations(actions: Sequence[ActionState], index: int) -> list[Run]:
    return [
        r
        for a in actions
        for r in a.runs
        if r.contract_revision == ITEM_REVISION
        and r.status in ("completed", "failed", "waiting", "retryable")
        and r.result is not None
        and len(r.result.checks) > index
        and r.result.checks[index].criterion == CRITERIA[index]
        and r.result.checks[index].status == "failed"
    ]


def _all_evidence(progress: GoalProgress) -> set[UUID]:
    ids = {i for c in progress.criteria for i in c.evidence_run_ids}
    return ids | set(progress.delivery.evidence_run_ids) | set(progress.proof_run_ids)


@given(scenarios(), st.sampled_from([None, "response", "workspace_files", "pull_request"]))
def test_counts_and_status_shape_agree(actions: list[ActionState], target: str | None) -> None:
    progress = derive(actions, target)
    assert progress.total_criteria_count == len(CRITERIA)
    completed = progress.completed_criteria_count
    assert completed + len(progress.remaining_criteria) == progress.total_criteria_count
    assert completed == sum(c.status == "passed" for c in progress.criteria)
    for c in progress.criteria:
        if c.status == "failed":
            assert c.conflicting_run_ids and not c.evidence_run_ids
        else:
            assert not c.conflicting_run_ids
            assert bool(c.evidence_run_ids) == (c.status == "passed")


@given(scenarios())
def test_no_pass_survives_a_failure_observed_after_it_started(actions: list[ActionState]) -> None:
    progress = derive(actions)
    by_id = _runs(actions)
    for index, criterion in enumerate(progress.criteria):
        if criterion.status != "passed":
            continue
        latest = max(pass_at(by_id[i][1]) for i in criterion.evidence_run_ids)
        assert all(observed_at(r) < latest for r in _failing_observations(actions, index))


@given(scenarios())
def test_a_fresh_proof_after_everything_passes_every_criterion(actions: list[ActionState]) -> None:
    last = max((observed_at(r) for a in actions for r in a.runs), default=T0)
    start = ms(last) + 1
    proof = action("a99", run("r-a99", start, start + 5))
    progress = derive([*actions, proof])
    assert statuses(progress) == ("passed", "passed")
    assert all(uid("r-a99") in c.evidence_run_ids for c in progress.criteria)


@given(scenarios(), st.integers(0, 10), st.sampled_from(get_args(RunStatus)))
def test_a_writer_ending_at_or_after_a_proof_start_removes_it(
    actions: list[ActionState], delta: int, status: RunStatus
) -> None:
    by_id = _runs(actions)
    progress = derive(actions, "workspace_files")
    writers = [
        r
        for a in actions
        for r in a.runs
        if a.workspace_mode != "read" and r.contract_revision == ITEM_REVISION
    ]
    for proof_id in _all_evidence(progress):
        proof = by_id[proof_id][1]
        assert all(w.id == proof_id or pass_at(proof) > observed_at(w) for w in writers)

    for proof_id in progress.proof_run_ids:
        start = ms(pass_at(by_id[proof_id][1]))
        # A running writer is measured by its start, a finished one by its end.
        late = (
            run("r-w", start + delta, None, status="running", result=None)
            if status == "running"
            else run("r-w", 0, start + delta, status=status)
        )
        writer = action("a98", late, mode="shared", status="failed")
        assert proof_id not in _all_evidence(derive([*actions, writer], "workspace_files"))


@given(scenarios(), st.sampled_from([None, "response", "merge"]))
def test_bumping_the_revision_without_new_runs_resets_everything(
    actions: list[ActionState], target: str | None
) -> None:
    progress = derive(actions, target, revision=ITEM_REVISION + 1)
    assert statuses(progress) == ("unmet", "unmet")
    assert progress.delivery.status == "unmet"
    assert progress.evidence_run_ids == () == progress.proof_run_ids


@settings(max_examples=200)
@given(scenarios(), st.randoms(use_true_random=False))
def test_shuffling_actions_and_runs_changes_nothing(
    actions: list[ActionState], rng: random.Random
) -> None:
    shuffled = [
        a.model_copy(update={"runs": tuple(rng.sample(a.runs, len(a.runs)))}) for a in actions
    ]
    rng.shuffle(shuffled)
    for target in (None, "response", "workspace_files"):
        assert derive(shuffled, target) == derive(actions, target)


@given(scenarios())
def test_never_passed_with_a_later_failing_current_run(actions: list[ActionState]) -> None:
    progress = derive(actions)
    by_id = _runs(actions)
    for index, criterion in enumerate(progress.criteria):
        if criterion.status != "passed":
            continue
        latest = max(pass_at(by_id[i][1]) for i in criterion.evidence_run_ids)
        for a in actions:
            current = current_run(a, ITEM_REVISION)
            if current is not None and current in _failing_observations([a], index):
                assert observed_at(current) < latest


@given(scenarios(), st.sampled_from([0, 1]), st.integers(0, 5))
def test_a_failing_current_run_ending_at_or_after_the_latest_pass_fails_it(
    actions: list[ActionState], index: int, after: int
) -> None:
    before = derive(actions).criteria[index]
    by_id = _runs(actions)
    if before.status == "passed":
        # Ending exactly at the latest pass start is the sharpest case: still a conflict.
        latest = max(pass_at(by_id[i][1]) for i in before.evidence_run_ids)
    else:
        latest = max((observed_at(r) for a in actions for r in a.runs), default=T0)
    statuses_: list[CheckStatus] = ["passed", "passed"]
    statuses_[index] = "failed"
    failing = run("r-a97", 0, ms(latest) + after, status="failed", checks=checks(*statuses_))
    failed_action = action("a97", failing, status="failed")
    assert current_run(failed_action, ITEM_REVISION) == failing
    progress = derive([*actions, failed_action])
    assert progress.criteria[index].status == "failed"
    assert uid("r-a97") in progress.criteria[index].conflicting_run_ids
