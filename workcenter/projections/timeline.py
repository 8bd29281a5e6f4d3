"""An item's Actions and their Runs as a timeline for the dashboard (a pure function).

Each Run is its identity, status and times only: never its worker, boot id, lease,
error, evidence or report (read-models.md 2.6, what is never sent). Bounded: the
first ``MAX_ACTIONS`` Actions in order, the newest ``MAX_RUNS`` Runs of each, with
counts of what was left out, so the DTO stays far below the 512 KiB budget.
"""

from __future__ import annotations

from datetime import datetime

from workcenter.domain import resource_ledger as rl
from workcenter.domain.action import OPEN_STATUSES, ActionState, Run
from workcenter.domain.lifecycle import no_attempt_left
from workcenter.domain.work_item import WorkItemState
from workcenter.projections import dto_models as dtos
from workcenter.projections.sanitize import epoch_ms, rev, truncate_utf8
from workcenter.projections.views import Actions, ordered_actions

MAX_ACTIONS = 200
MAX_RUNS = 10
TYPE_LIMIT = 64


def _run(run: Run, now: datetime) -> dtos.TimelineRun:
    entry: dtos.TimelineRun = {
        "id": str(run.id),
        "ordinal": run.ordinal,
        "generation": rev(run.generation),
        "attempt": run.attempt,
        "status": run.status,
        # Who holds a running Run, as `show` says it (found by acceptance testing, ADR-0142).
        "worker": run.worker,
        "startedAt": epoch_ms(run.started_at),
    }
    if run.ended_at is not None:
        entry["endedAt"] = epoch_ms(run.ended_at)
    elif run.status == "running" and run.expires_at <= now:
        entry["leaseExpired"] = True
    if run.deferred:
        entry["deferred"] = True
    return entry


def _action(action: ActionState, now: datetime, attempts_spent: bool) -> dtos.TimelineAction:
    runs = sorted(action.runs, key=lambda r: (r.started_at, r.ordinal))
    kept = runs[-MAX_RUNS:]
    entry: dtos.TimelineAction = {
        "id": str(action.id),
        "sequence": action.sequence,
        "type": truncate_utf8(action.type, TYPE_LIMIT),
        "status": action.status,
        "generation": rev(action.generation),
        "runs": [_run(run, now) for run in kept],
    }
    if len(runs) > len(kept):
        entry["omittedRunCount"] = len(runs) - len(kept)
    if attempts_spent:
        entry["noAttemptLeft"] = True
    return entry


def timeline_dto(
    item: WorkItemState, actions: Actions, ledger: rl.LedgerState, *, now: datetime
) -> dtos.Timeline:
    """``{workItemId, status, now, actions: [{id, sequence, type, status, generation,
    noAttemptLeft?, runs: [{id, ordinal, generation, attempt, status, startedAt,
    endedAt?}]}]}``."""
    ordered = ordered_actions(actions)
    dto: dtos.Timeline = {
        "workItemId": str(item.id),
        "status": item.status,
        "now": epoch_ms(now),
        "actions": [
            _action(
                action,
                now,
                action.status in OPEN_STATUSES and no_attempt_left(item, action, ledger),
            )
            for action in ordered[:MAX_ACTIONS]
        ],
    }
    if len(ordered) > MAX_ACTIONS:
        dto["omittedActionCount"] = len(ordered) - MAX_ACTIONS
    return dto
