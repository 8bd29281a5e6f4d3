"""Plain-JSON views of WorkItems, Actions and goal progress for the CLI and scripts."""

from __future__ import annotations

from typing import Any

from workcenter.application import WorkCenter
from workcenter.domain.action import ActionState
from workcenter.domain.goal_progress import GoalProgress
from workcenter.domain.model import DomainEvent
from workcenter.domain.work_item import WorkItemState


def item_json(item: WorkItemState) -> dict[str, Any]:
    return item.model_dump(mode="json", exclude={"plan"})


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
    actions = sorted(wc.actions(item).values(), key=lambda a: a.sequence)
    return {
        "item": item_json(item),
        "actions": [action_json(a) for a in actions],
        "goal_progress": progress_json(wc.goal_progress(item.id)),
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
