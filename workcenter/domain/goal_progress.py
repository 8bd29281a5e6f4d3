"""Goal progress (read-models.md section 1): what recorded Runs prove about a contract.

Pure and deterministic: it reads durable identities and recorded results only,
never a clock and never a model's estimate of its own progress, so a rebuilt
projection and the live one always agree.

Mapping onto this model: a Run records the one contract revision it ran under,
which serves as both its effective and its context revision; there is no
separate manifest, so the manifest identity checks collapse into the Run's own
generation and spec hash.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Literal
from uuid import UUID

from workcenter.domain.action import ActionState, Run
from workcenter.domain.evidence import AcceptanceCheck, checks_match_criteria, is_contradictory
from workcenter.domain.model import Immutable

CriterionStatus = Literal["passed", "failed", "unmet"]

# "retryable" is this model's name for a failed attempt that may be tried again.
# The spec predates the distinction, so such a Run counts wherever "failed" does:
# as a negative observation and as a candidate current Run.
_OUTCOME_STATUSES: frozenset[str] = frozenset({"completed", "failed", "waiting", "retryable"})
_NO_CURRENT_RUN_STATUSES: frozenset[str] = frozenset(
    {"closed", "superseded", "cancelled", "running"}
)
_OUTPUT_KIND_FOR_TARGET: Mapping[str, str] = {
    "workspace_files": "file",
    "pull_request": "pr",
    "merge": "commit",
}


class CriterionProgress(Immutable):
    criterion: str
    status: CriterionStatus
    evidence_run_ids: tuple[UUID, ...]
    conflicting_run_ids: tuple[UUID, ...] = ()  # non-empty only when failed


class Blocker(Immutable):
    action_id: UUID
    status: Literal["failed", "waiting"]
    reason: str


class Delivery(Immutable):
    target: str | None
    status: Literal["passed", "unmet"]
    evidence_run_ids: tuple[UUID, ...]


class GoalProgress(Immutable):
    contract_revision: int
    criteria: tuple[CriterionProgress, ...]
    remaining_criteria: tuple[str, ...]
    completed_criteria_count: int
    total_criteria_count: int
    evidence_run_ids: tuple[UUID, ...]
    blockers: tuple[Blocker, ...]
    delivery: Delivery
    proof_run_ids: tuple[UUID, ...]


# --- small rules (section 0) -------------------------------------------------


def _rev(value: int) -> int:
    # Legacy data may carry 0 or negatives; the spec folds them all into 1.
    return value if value >= 1 else 1


def observed_at(run: Run) -> datetime:
    """When the Run's outcome became known; a running Run is measured by its start."""
    return run.ended_at if run.ended_at is not None else run.started_at


def pass_at(run: Run) -> datetime:
    """A pass only vouches for the workspace as it was when the Run began."""
    return run.started_at


def _contradictory(run: Run) -> bool:
    result = run.result
    if result is None:
        return False
    # RunResult is stored already normalised (lifecycle.md 3.4), so its items
    # are checked as they are rather than normalised a second time.
    return is_contradictory(result.error, result.review_decision, result.evidence, result.outputs)


# --- current runs and proof (sections 1.1, 1.2) ------------------------------


def _is_candidate(action: ActionState, run: Run, revision: int) -> bool:
    return (
        _rev(run.generation) == _rev(action.generation)
        and run.spec_hash == action.spec_hash
        and _rev(run.contract_revision) == revision
        and run.status in _OUTCOME_STATUSES
    )


def current_run(action: ActionState, contract_revision: int) -> Run | None:
    """The Run that speaks for ``action`` now, or None (section 1.1).

    A guide or reset changes generation and spec hash, so earlier Runs stop
    being candidates here even though they remain observations.
    """
    revision = _rev(contract_revision)
    if action.status in _NO_CURRENT_RUN_STATUSES or _rev(action.contract_revision) != revision:
        return None
    candidates = [run for run in action.runs if _is_candidate(action, run, revision)]
    if action.status == "completed":
        # Only the canonical result Run counts: a later stray completion must
        # not replace what the Action actually reported.
        return next(
            (r for r in candidates if r.id == action.result_run_id and r.status == "completed"),
            None,
        )
    if action.status in ("failed", "waiting"):
        return max(candidates, key=lambda r: (observed_at(r), r.started_at, r.id), default=None)
    return None


def is_proof(run: Run, criteria: tuple[str, ...]) -> bool:
    """The Run-local half of "proof" (section 1.2).

    Being current is deliberately left to the caller (see ``current_run``):
    a Run cannot know whether its Action has since moved on.
    """
    result = run.result
    return (
        run.status == "completed"
        and result is not None
        and len(result.evidence) >= 1
        and not _contradictory(run)
        and checks_match_criteria(result.checks, criteria)
    )


def _is_fresh(proof: Run, writers: Iterable[Run]) -> bool:
    # Strict: a write observed at the very instant a proof started may have
    # raced it, so equal times make the proof stale. A writer's own proof
    # vouches for its own writes.
    return all(w.id == proof.id or pass_at(proof) > observed_at(w) for w in writers)


def _delivers(run: Run, target: str | None) -> bool:
    result = run.result
    if result is None or target is None:
        return False
    if target == "response":
        return bool(result.summary.strip()) and all(c.status != "failed" for c in result.checks)
    kind = _OUTPUT_KIND_FOR_TARGET.get(target)
    # The output must sit on the proof Run itself: a writer's output proves
    # nothing once the writer is stale, so a verifier has to report it again.
    return kind is not None and any(o.kind == kind and not o.is_negative for o in result.outputs)


# --- derivation (sections 1.3, 1.4) ------------------------------------------


def _by_criterion(
    criteria: tuple[str, ...], runs: Iterable[Run], counts: Callable[[Run, AcceptanceCheck], bool]
) -> list[list[Run]]:
    """For each criterion, the ``runs`` (in their order) whose check of it, at its place
    and naming it, ``counts``. Each Run's checks are read once: read per criterion, an
    item's detail cost criteria x Runs calls at every write, 0.2 s a write near the
    documented limits (found by acceptance testing, ADR-0136)."""
    found: list[list[Run]] = [[] for _ in criteria]
    for run in runs:
        checks = run.result.checks if run.result is not None else ()
        for index, check in enumerate(checks[: len(criteria)]):
            if check.criterion == criteria[index] and counts(run, check):
                found[index].append(run)
    return found


def _criterion_progress(
    criterion: str, passing: Sequence[Run], failing: Sequence[Run]
) -> CriterionProgress:
    """The criterion's progress from the proofs that pass it and the observations that
    contradict it, newest first (section 1.3)."""
    latest_pass = max((pass_at(p) for p in passing), default=None)
    # A failure's end is compared with a pass's start, so a verdict that came
    # in while the passing Run was still working outranks it.
    conflicts = [r for r in failing if latest_pass is None or observed_at(r) >= latest_pass]
    if conflicts:
        return CriterionProgress(
            criterion=criterion,
            status="failed",
            evidence_run_ids=(),
            conflicting_run_ids=tuple(r.id for r in conflicts),
        )
    if passing:
        return CriterionProgress(
            criterion=criterion, status="passed", evidence_run_ids=tuple(p.id for p in passing)
        )
    return CriterionProgress(criterion=criterion, status="unmet", evidence_run_ids=())


def _ended_without_report(action: ActionState) -> str | None:
    """Why the Action's last Run of this generation ended when it reported nothing (its
    executor raised, its lease lapsed): the objective says nothing of such a failure."""
    last = action.runs[-1] if action.runs else None
    if last is None or last.result is not None or last.generation != action.generation:
        return None
    return last.end_reason


def _blocker(action: ActionState, revision: int) -> Blocker:
    run = current_run(action, revision)
    result = run.result if run is not None else None
    reason = (
        (result.waiting_reason if result is not None else None)
        or (result.error if result is not None else None)
        or _ended_without_report(action)
        or action.brief.objective
        or ""
    )
    return Blocker(
        action_id=action.id,
        status="failed" if action.status == "failed" else "waiting",
        reason=reason,
    )


def derive_goal_progress(
    *,
    criteria: tuple[str, ...],
    contract_revision: int,
    delivery_target: str | None,
    actions: Sequence[ActionState],
) -> GoalProgress:
    """Derive goal progress from the contract and every Action of the WorkItem."""
    revision = _rev(contract_revision)
    # A total order independent of input order keeps live and rebuilt projections equal.
    ordered = sorted(actions, key=lambda a: (a.sequence, a.id))
    same_revision = [
        (action, run)
        for action in ordered
        for run in action.runs
        if _rev(run.contract_revision) == revision
    ]
    # Observations ignore Action status and generation on purpose: retrying,
    # guiding or closing an Action never erases a negative result.
    observations = [run for _, run in same_revision if run.status in _OUTCOME_STATUSES]
    # Writers of any status count, retired and still-running ones included:
    # their changes are in the workspace whatever became of the Run.
    writers = [run for action, run in same_revision if action.workspace_mode != "read"]
    proofs = [
        run
        for action in ordered
        if (run := current_run(action, revision)) is not None
        and is_proof(run, criteria)
        and _is_fresh(run, writers)
    ]

    passing = _by_criterion(criteria, proofs, lambda run, check: check.status == "passed")
    contradictory = {run.id: _contradictory(run) for run in observations}  # once a Run
    # Newest first, ids breaking ties: the order conflicting Runs are named in, sorted once
    # for every criterion.
    newest_first = sorted(observations, key=lambda r: r.id)
    newest_first.sort(key=lambda r: r.started_at, reverse=True)  # stable: ids break ties
    failing = _by_criterion(
        criteria,
        newest_first,
        lambda run, check: (
            check.status == "failed" or (check.status != "not_applicable" and contradictory[run.id])
        ),
    )
    progress = tuple(
        _criterion_progress(text, passing[i], failing[i]) for i, text in enumerate(criteria)
    )
    passed = [p for p in progress if p.status == "passed"]
    delivered = tuple(p.id for p in proofs if _delivers(p, delivery_target))
    return GoalProgress(
        contract_revision=revision,
        criteria=progress,
        remaining_criteria=tuple(p.criterion for p in progress if p.status != "passed"),
        completed_criteria_count=len(passed),
        total_criteria_count=len(criteria),
        evidence_run_ids=tuple(dict.fromkeys(i for p in progress for i in p.evidence_run_ids)),
        blockers=tuple(
            _blocker(action, revision)
            for action in ordered
            if action.status in ("failed", "waiting")
        ),
        delivery=Delivery(
            target=delivery_target,
            status="passed" if delivered else "unmet",
            evidence_run_ids=delivered,
        ),
        proof_run_ids=tuple(p.id for p in proofs),
    )
