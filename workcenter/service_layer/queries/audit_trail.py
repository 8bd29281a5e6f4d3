"""Reading an item's audit trail from the event store: its rows, and its state at a point.

The item's streams (the WorkItem, every Action it planned, its ledger) are read
merged in write order through the ``StreamReader`` port; the rows are shaped by
the audit module.
"""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from workcenter.domain import action as act
from workcenter.domain import conversation as conv
from workcenter.domain import resource_ledger as rl
from workcenter.domain import work_item as wi
from workcenter.domain.errors import InvalidInput
from workcenter.projections import audit
from workcenter.projections.audit import AuditRow
from workcenter.service_layer.ports import StreamReader
from workcenter.service_layer.repository import Repository


def rows(
    repo: Repository, read_streams: StreamReader, work_item_id: UUID, until: int | None = None
) -> list[AuditRow]:
    """Every row of the item up to position ``until`` (NotFound if there is no item)."""
    item = repo.work_item(work_item_id)
    return audit.audit_rows(item.id, read_streams(streams(item), until=until))


def streams(item: wi.WorkItemState) -> list[UUID]:
    """The item's streams: the WorkItem, every Action it planned, its ledger, its
    Conversation."""
    ledger, conversation = streams_of_id(item.id)[1:]
    return [item.id, *(e.action_id for e in item.plan), ledger, conversation]


def streams_of_id(work_item_id: UUID) -> list[UUID]:
    """The streams an item's id names without reading it: its own, its ledger, its
    Conversation (its Actions are known from its events only)."""
    return [work_item_id, rl.ledger_id_for(work_item_id), conv.conversation_id_for(work_item_id)]


def state_at(
    repo: Repository,
    read_streams: StreamReader,
    work_item_id: UUID,
    *,
    version: int | None,
    at: datetime | None,
) -> tuple[int, wi.WorkItemState, dict[UUID, act.ActionState]]:
    """(position, item, its Actions) at WorkItem ``version`` or at time ``at``."""
    if (version is None) == (at is None):
        raise InvalidInput("give exactly one of version or at")
    item_rows = rows(repo, read_streams, work_item_id)
    position = audit.cut(item_rows, work_item_id, version=version, at=at)
    if position is None:
        when = f"version {version}" if version is not None else f"time {at}"
        raise InvalidInput(f"WorkItem {work_item_id} has no state at {when}")
    versions = audit.versions_at(item_rows, position)
    item = repo.work_item(work_item_id, version=versions[("work_item", work_item_id)])
    actions = {
        e.action_id: repo.action(e.action_id, version=versions[("action", e.action_id)])
        for e in item.plan
        if ("action", e.action_id) in versions
    }
    return position, item, actions
