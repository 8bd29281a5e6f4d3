"""Plain-JSON views of WorkItems, Actions, goal progress and budgets for the CLI and scripts."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from workcenter.application import WorkCenter
from workcenter.domain import bounds, lifecycle, planning
from workcenter.domain import resource_ledger as rl
from workcenter.domain.action import ActionState
from workcenter.domain.goal_progress import GoalProgress
from workcenter.domain.model import DomainEvent
from workcenter.domain.work_item import WorkItemState


def item_json(item: WorkItemState) -> dict[str, Any]:
    return item.model_dump(mode="json", exclude={"plan"})


def utc_json(seconds: float) -> str:
    """A time kept as seconds since the epoch, as pydantic writes the states' times."""
    return datetime.fromtimestamp(seconds, UTC).isoformat().replace("+00:00", "Z")


def action_json(action: ActionState) -> dict[str, Any]:
    data = action.model_dump(mode="json", exclude={"runs", "context"})
    data["runs"] = [
        run.model_dump(mode="json", exclude={"result"})
        | {"summary": run.result.summary if run.result else None}
        for run in action.runs
    ]
    return data


def progress_json(progress: GoalProgress) -> dict[str, Any]:
    return progress.model_dump(mode="json")


def detail_json(wc: WorkCenter, item: WorkItemState) -> dict[str, Any]:
    loaded = wc.actions(item)
    actions = sorted(loaded.values(), key=lambda a: a.sequence)
    return {
        "item": item_json(item),
        "actions": [action_json(a) for a in actions],
        # From the states just loaded: wc.goal_progress would load them all again.
        "goal_progress": progress_json(planning.progress(item, loaded)),
    }


def event_json(event: DomainEvent) -> dict[str, Any]:
    data = event.model_dump(mode="json")
    return {
        "type": type(event).__name__,
        "version": data.pop("originator_version"),
        "aggregate_id": data.pop("originator_id"),
        "at": data.pop("timestamp"),
        "data": data,
    }


TOKEN_ACCOUNTING = "estimated_admission_reported_usage_unknown_retained"


def _usage_totals(
    rows: Iterable[rl.Reservation], live_runs: set[UUID], dispatching: Collection[str]
) -> dict[str, int]:
    """One breakdown (resource-ledger.md 4). ``charged_tokens`` includes ``reserved_tokens``
    (the charge of rows without a complete report); the five usage keys sum what providers
    reported. A reserved row is in flight while its Run runs under an unexpired lease or
    its Coordinator turn is dispatching; otherwise it counts as unknown, like the rows
    settled without complete usage."""
    totals = {
        "requests": 0,
        "charged_tokens": 0,
        "reserved_tokens": 0,
        "reported_requests": 0,
        "reserved_requests": 0,
        "in_flight_requests": 0,
        "unknown_requests": 0,
    } | dict.fromkeys(rl.Usage.model_fields, 0)
    for row in rows:
        totals["requests"] += 1
        totals["charged_tokens"] += row.charged_tokens
        if row.usage is not None:
            for key in rl.Usage.model_fields:
                totals[key] += getattr(row.usage, key)
        if row.status == "reported":
            totals["reported_requests"] += 1
            continue
        totals["reserved_tokens"] += row.charged_tokens
        if row.status == "reserved":
            totals["reserved_requests"] += 1
        live = row.run_id in live_runs or rl.turn_of_request(row.request_id) in dispatching
        if row.status == "reserved" and live:
            totals["in_flight_requests"] += 1
        else:
            totals["unknown_requests"] += 1
    return {key: bounds.saturated(value) for key, value in totals.items()}


def budget_json(wc: WorkCenter, item_id: UUID) -> dict[str, Any]:
    """The WorkItem's budget: limits, usage and its breakdown, attempts per Action, the stop.

    ``ledger_version`` and ``control_version`` are both valid ``expected_version``s
    for extend and resume; ``item_version`` is the WorkItem version resume expects.
    """
    item = wc.work_item(item_id)
    ledger = wc.ledger(item_id)
    actions = sorted(wc.actions(item).values(), key=lambda a: (a.sequence, str(a.id)))
    now = wc.clock.now()
    live_runs = {
        run.id
        for action in actions
        for run in action.runs
        if run.status == "running" and run.expires_at > now
    }
    rows = list(ledger.reservations.values())
    conversation = wc.conversation(item_id)
    turns = conversation.dispatching if conversation else frozenset()
    breakdown = {
        "coordinator": _usage_totals(
            (r for r in rows if r.kind == "coordinator"), live_runs, turns
        ),
        "actions": _usage_totals((r for r in rows if r.kind == "action"), live_runs, turns),
    }
    stop = ledger.stop_reason
    return {
        "work_item_id": str(item.id),
        "status": item.status,
        "item_version": item.version,
        "ledger_version": ledger.version,
        "control_version": ledger.control_version,
        "limits": ledger.limits.model_dump(mode="json"),
        "usage": _usage_totals(rows, live_runs, turns),
        "breakdown": breakdown,
        "action_attempts_extension": ledger.attempts_extension,
        "action_attempts": [
            {
                "action_id": str(action.id),
                "sequence": action.sequence,
                "type": action.type,
                "attempts": action.counted_attempts,
                "original_max_attempts": action.max_attempts,
                "effective_max_attempts": ledger.effective_max_attempts(action.max_attempts),
            }
            for action in actions
        ],
        "stop_reason": stop.model_dump(mode="json") if stop is not None else None,
        # The least addition to each limit before a resume is taken (ADR-0096); a done
        # item is never resumed (ADR-0133).
        "resume_needs": {}
        if item.status == "done"
        else {
            name: bounds.saturated(need)
            for name, need in lifecycle.resume_needs(ledger, actions).items()
        },
        "coordinator_failures": ledger.coordinator_failures,
        "retry_after": ledger.retry_after.isoformat() if ledger.retry_after else None,
        "token_accounting": TOKEN_ACCOUNTING,
    }
