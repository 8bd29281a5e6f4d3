"""The goal-progress DTO (read-models.md 2.5): what recorded Runs prove, for a browser.

Pure: a ``GoalProgress`` (derived in the domain) in, a bounded, sanitised, camelCase
dict out. Not-passed criteria come first, at most 100; ``ids(x)`` caps every id list.
"""

from __future__ import annotations

from workcenter.domain.goal_progress import GoalProgress
from workcenter.domain.work_item import is_delivery_target
from workcenter.projections import dto_models as dtos
from workcenter.projections.sanitize import (
    bounded_id,
    cnt,
    ids,
    rev,
    sanitize_failure,
    sanitize_personal,
    sanitize_waiting_reason,
)
from workcenter.projections.views import CRITERION_LIMIT, MAX_BLOCKERS, MAX_CRITERIA


def _blocker_reason(status: str, reason: str) -> str:
    # Closes a hole of the original ((a) only): a reason may be a Run's error.
    if status == "failed":
        return sanitize_failure(reason)
    return sanitize_waiting_reason(reason)


def goal_progress_dto(progress: GoalProgress | None) -> dtos.GoalProgress | None:
    """Goal progress for a browser: not-passed criteria first, at most 100; ids(x) caps."""
    if progress is None:
        return None
    ranked = [c for c in progress.criteria if c.status != "passed"]
    ranked += [c for c in progress.criteria if c.status == "passed"]
    criteria: list[dtos.CriterionProgress] = []
    for row in ranked[:MAX_CRITERIA]:
        status = row.status if row.status in ("passed", "failed") else "unmet"
        entry: dtos.CriterionProgress = {
            "criterion": sanitize_personal(row.criterion, CRITERION_LIMIT),
            "status": status,
            "evidenceRunIds": ids(row.evidence_run_ids),
        }
        if status == "failed":
            entry["conflictingRunIds"] = ids(row.conflicting_run_ids)
        criteria.append(entry)
    total, completed = cnt(progress.total_criteria_count), cnt(progress.completed_criteria_count)
    delivery: dtos.Delivery = {
        "status": "passed" if progress.delivery.status == "passed" else "unmet",
        "evidenceRunIds": ids(progress.delivery.evidence_run_ids),
    }
    if is_delivery_target(progress.delivery.target):
        delivery["target"] = progress.delivery.target
    return {
        "contractRevision": rev(progress.contract_revision),
        "criteria": criteria,
        "remainingCriteria": [e["criterion"] for e in criteria if e["status"] != "passed"],
        "remainingCriteriaCount": max(0, total - completed),
        "completedCriteriaCount": completed,
        "totalCriteriaCount": total,
        "omittedCriteriaCount": len(ranked) - len(criteria),
        "evidenceRunIds": ids(progress.evidence_run_ids),
        "blockers": [
            {
                "actionId": bounded_id(b.action_id),
                "status": "failed" if b.status == "failed" else "waiting",
                "reason": _blocker_reason(b.status, b.reason),
            }
            for b in progress.blockers[:MAX_BLOCKERS]
        ],
        "delivery": delivery,
    }
