"""The reads: goal progress, the list of items, an item's detail, its history, its
audit trail and its state at a point of that trail."""

from __future__ import annotations

import difflib
from datetime import datetime
from typing import Any
from uuid import UUID

import orjson

from workcenter.domain import action as act
from workcenter.domain import bounds, inputs, planning
from workcenter.domain import work_item as wi
from workcenter.domain.errors import InvalidInput, NotFound
from workcenter.domain.goal_progress import GoalProgress
from workcenter.domain.model import DomainEvent
from workcenter.projections import audit as audit_rows
from workcenter.projections.audit import DEFAULT_LIMIT, AuditRow
from workcenter.projections.detail import Detail, DetailView
from workcenter.projections.work_queue import WorkQueue
from workcenter.service_layer.ports import StreamReader
from workcenter.service_layer.queries import audit_trail
from workcenter.service_layer.read_models import ReadModels
from workcenter.service_layer.repository import Repository


class Reads:
    def __init__(
        self, repository: Repository, read_models: ReadModels, read_streams: StreamReader
    ) -> None:
        self.repo = repository
        self.read_models = read_models
        self.read_streams = read_streams

    def goal_progress(self, work_item_id: UUID) -> GoalProgress:
        item = self.repo.work_item(work_item_id)
        return planning.progress(item, self.repo.actions(item))

    def list_work_items(
        self, status: str | None, limit: int | None, newest: bool = False
    ) -> list[dict[str, Any]]:
        if status is not None and (not isinstance(status, str) or status not in wi.STATUSES):
            raise InvalidInput(f"status must be one of {', '.join(wi.STATUSES)}, not {status!r}")
        if limit is not None and (inputs.version(limit, "limit") < 1):
            raise InvalidInput(f"limit must be a whole number of at least 1, not {limit!r}")
        if not isinstance(newest, bool):
            raise InvalidInput(f"newest must be True or False, not {newest!r}")
        view = self.read_models.fresh(WorkQueue.name)
        return view.work_items(status, limit, newest=newest)  # type: ignore[no-any-return]

    def detail(self, work_item_id: UUID, *, caught_up: bool = False) -> dict[str, Any]:
        """See ``WorkCenter.detail``: the stored DTO, caught up first if it is behind the
        head and its lifecycle (or ``caught_up``) says so."""
        work_item_id = inputs.aggregate_id(work_item_id, "WorkItem")
        details: DetailView = self.read_models.view(Detail.name)
        raw, current = details.current_detail_bytes(
            work_item_id, Detail.name, self.read_models.head
        )
        if not current and (caught_up or self.read_models.catches_up_on_read(Detail.name)):
            self.read_models.catch_up([Detail.name])
            raw = details.detail_bytes(work_item_id)
        if raw is None:
            self.repo.work_item(work_item_id)  # NotFound if there is no such item
            # It exists, made after the view's position (inline projections off, the runner
            # behind or stopped): this process brings the view up, as for a command's
            # answer, rather than say that an item that exists is not found (ADR-0128).
            self.read_models.catch_up([Detail.name])
            raw = details.detail_bytes(work_item_id)
            if raw is None:  # not in the view even at the head: it has no detail
                raise NotFound("detail of WorkItem", work_item_id)
        return dict(orjson.loads(raw))

    def history(self, work_item_id: UUID) -> list[DomainEvent]:
        return self.repo.events(self.repo.work_item(work_item_id).id)

    def action_history(self, action_id: UUID) -> list[DomainEvent]:
        return self.repo.events(self.repo.action(action_id).id)  # NotFound unless an Action

    def audit(
        self,
        work_item_id: UUID,
        *,
        limit: int | None = DEFAULT_LIMIT,
        action_id: UUID | None = None,
        run_id: UUID | None = None,
        type: str | None = None,
        until: int | None = None,
    ) -> list[AuditRow]:
        if limit is not None:
            limit = inputs.version(limit, "limit")
            if limit < 1:
                raise InvalidInput(f"limit must be at least 1 (None for every event), not {limit}")
        if until is not None:
            until = inputs.version(until, "until")
        action_id = inputs.optional_id(action_id, "Action")
        run_id = inputs.optional_id(run_id, "Run")
        if type is not None:
            type = _event_type(inputs.text(type, "type", bounds.ACTION_TYPE))
        return audit_rows.select(
            audit_trail.rows(self.repo, self.read_streams, work_item_id, until),
            limit=limit,
            action_id=action_id,
            run_id=run_id,
            type=type,
        )

    def state_at(
        self, work_item_id: UUID, version: int | None, at: datetime | None
    ) -> tuple[int, wi.WorkItemState, dict[UUID, act.ActionState]]:
        work_item_id = inputs.aggregate_id(work_item_id, "WorkItem")
        if version is not None:
            version = inputs.version(version, "version")
        if at is not None:
            at = inputs.moment(at, "at")
        return audit_trail.state_at(
            self.repo, self.read_streams, work_item_id, version=version, at=at
        )


def _event_type(name: str) -> str:
    """``name`` if it names an event of the audit, else ``InvalidInput`` with the names
    it may have meant: a mistyped type would match nothing, like an item with no such
    events (ADR-0083)."""
    if name in audit_rows.EVENT_TYPES:
        return name
    alike = difflib.get_close_matches(name, sorted(audit_rows.EVENT_TYPES), n=3, cutoff=0.6)
    folded = [t for t in sorted(audit_rows.EVENT_TYPES) if t.lower() == name.lower()]
    hint = (
        f"; did you mean {' or '.join(dict.fromkeys(folded + alike))}?" if folded or alike else ""
    )
    raise InvalidInput(
        f"type {name!r} names no event (types are event names such as WorkItemCreated or"
        f" RunFinished){hint}"
    )
