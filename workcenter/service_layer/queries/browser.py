"""The reads a browser makes beside an item's detail DTO: a page of summary DTOs, the
item's budget (its execution control), its Actions and Runs as a timeline, and its
conversation with the Coordinator.

Every answer is a sanitised DTO of the projections (read-models.md 2), built from
states loaded through the repository at the clock's ``now``. Each also carries the
versions a client echoes back as expected versions (``itemVersion``, and the
ledger's ``controlVersion``), read before the states it shows, so the body is never
older than the versions it names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from uuid import UUID

from workcenter.domain import inputs, planning
from workcenter.domain import resource_ledger as rl
from workcenter.domain import work_item as wi
from workcenter.domain.errors import InvalidInput
from workcenter.projections.conversation_dto import conversation_dto
from workcenter.projections.dto import execution_control, goal_progress_dto, summary_dto
from workcenter.projections.execution import data_revision
from workcenter.projections.timeline import timeline_dto
from workcenter.projections.work_queue import WorkQueue
from workcenter.service_layer.ports import Clock
from workcenter.service_layer.read_models import ReadModels
from workcenter.service_layer.repository import Repository

MAX_PAGE = 100


@dataclass(frozen=True)
class SummaryPage:
    items: list[dict[str, Any]]
    total: int
    offset: int
    limit: int

    def json(self) -> dict[str, Any]:
        return {
            "items": self.items,
            "total": self.total,
            "offset": self.offset,
            "limit": self.limit,
        }


class WebReads:
    def __init__(self, repository: Repository, read_models: ReadModels, clock: Clock) -> None:
        self.repo = repository
        self.read_models = read_models
        self.clock = clock

    def versions(self, work_item_id: UUID) -> tuple[int, int]:
        """(WorkItem version, ledger control version): what commands on it expect."""
        item = self.repo.work_item(inputs.aggregate_id(work_item_id, "WorkItem"))
        return item.version, self.repo.ledger(item.id).control_version

    def summaries(self, status: str | None, limit: int, offset: int) -> SummaryPage:
        """Summary DTOs (read-models.md 2.3) in creation order, each with its goal
        progress counted (``goalProgress``: the criteria met and in all, the delivery)."""
        if status is not None and (not isinstance(status, str) or status not in wi.STATUSES):
            raise InvalidInput(f"status must be one of {', '.join(wi.STATUSES)}, not {status!r}")
        limit = inputs.version(limit, "limit")
        offset = inputs.version(offset, "offset")
        if not 1 <= limit <= MAX_PAGE:
            raise InvalidInput(f"limit must be from 1 to {MAX_PAGE}, not {limit}")
        if offset < 0:
            raise InvalidInput(f"offset must be at least 0, not {offset}")
        view = self.read_models.fresh(WorkQueue.name)
        rows = view.work_items(status, limit=limit, offset=offset)
        total = view.count_work_items(status)
        return SummaryPage([self._summary(row["id"]) for row in rows], total, offset, limit)

    def _summary(self, work_item_id: UUID) -> dict[str, Any]:
        item = self.repo.work_item(work_item_id)
        ledger = self.repo.ledger(item.id)
        actions = self.repo.actions(item)
        dto = summary_dto(item, actions, ledger, now=self.clock.now())
        progress = goal_progress_dto(planning.progress(item, actions)) or {}
        dto["goalProgress"] = {
            "completedCriteriaCount": progress.get("completedCriteriaCount", 0),
            "totalCriteriaCount": progress.get("totalCriteriaCount", 0),
            "deliveryStatus": progress.get("delivery", {}).get("status", "unmet"),
        }
        return dto

    def progress(self, work_item_id: UUID) -> dict[str, Any]:
        """The goal-progress DTO (read-models.md 2.5), null when there is none."""
        item = self.repo.work_item(inputs.aggregate_id(work_item_id, "WorkItem"))
        ledger = self.repo.ledger(item.id)
        return _header(item, ledger) | {
            "goalProgress": goal_progress_dto(planning.progress(item, self.repo.actions(item))),
        }

    def budget(self, work_item_id: UUID) -> dict[str, Any]:
        """The item's execution control (limits, usage, attempts, stop; whitelisted)."""
        item = self.repo.work_item(inputs.aggregate_id(work_item_id, "WorkItem"))
        ledger = self.repo.ledger(item.id)
        actions = self.repo.actions(item)
        now = self.clock.now()
        return _header(item, ledger) | {
            "executionControl": execution_control(
                ledger,
                actions,
                now=now,
                data_revision=data_revision(item, actions.values(), ledger, now=now),
            ),
        }

    def timeline(self, work_item_id: UUID) -> dict[str, Any]:
        item = self.repo.work_item(inputs.aggregate_id(work_item_id, "WorkItem"))
        dto = timeline_dto(item, self.repo.actions(item), now=self.clock.now())
        ledger = self.repo.ledger(item.id)
        return dto | {"itemVersion": item.version, "controlVersion": ledger.control_version}

    def conversation(self, work_item_id: UUID) -> dict[str, Any]:
        """The item's messages and Coordinator turns, sanitised and bounded."""
        item = self.repo.work_item(inputs.aggregate_id(work_item_id, "WorkItem"))
        ledger = self.repo.ledger(item.id)
        return _header(item, ledger) | conversation_dto(self.repo.conversation(item.id))


def _header(item: wi.WorkItemState, ledger: rl.LedgerState) -> dict[str, Any]:
    """What every per-item read starts with: the item, its status and the versions a
    command must echo back."""
    return {
        "workItemId": str(item.id),
        "status": item.status,
        "itemVersion": item.version,
        "controlVersion": ledger.control_version,
    }
