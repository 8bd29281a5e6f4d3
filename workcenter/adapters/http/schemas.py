"""The shapes of the API's read answers around the DTOs (``projections.dto_models``):
the versions a per-item read carries, a page of the list, the audit, the decisions.

Declared in the document (ADR-0066) and validated against live answers by the
tests; the routes serve bytes and never build these.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from workcenter.domain.work_item import WorkItemStatus
from workcenter.projections.dto_models import (
    Conversation,
    Dto,
    ExecutionControl,
    GoalProgress,
    SummaryDto,
    Timeline,
    omitted,
)


class Versions(Dto):
    item_version: int = Field(description="The WorkItem's version: echo it in If-Match")
    control_version: int = Field(description="The ledger's control version, likewise")


class ItemRead(Versions):
    work_item_id: str
    status: WorkItemStatus


class ProgressRead(ItemRead):
    goal_progress: GoalProgress | None


class BudgetRead(ItemRead):
    execution_control: ExecutionControl


class TimelineRead(Timeline, Versions):
    pass


class ConversationRead(Conversation, ItemRead):
    pass


class SummaryPage(Dto):
    items: list[SummaryDto]
    total: int = Field(ge=0, description="The items of the status")
    limit: int
    next: str | None = Field(description="The cursor of the next, older, page (send as after)")
    position: int = Field(description="The event sequence's head read first: stream from it")


class AuditEvent(Dto):
    position: int
    time: str
    aggregate: str
    aggregate_id: str
    version: int
    type: str
    action_id: str | None
    run_id: str | None
    generation: int | None
    actor: str
    actor_id: str
    worker: str | None
    caused_by: str | None
    payload: dict[str, Any] = Field(description="The event's payload, sanitised unless raw")


class AuditState(Dto):
    position: int
    item: dict[str, Any]
    actions: list[dict[str, Any]]


class AuditRead(Dto):
    work_item_id: str
    events: list[AuditEvent]
    state: AuditState = omitted("The item and its Actions as they were, with at or atTime")


class Record(BaseModel):
    """A provenance record: snake_case keys, as ``audit decisions --json`` prints them."""

    model_config = ConfigDict(extra="forbid")


class DecisionTurn(Record):
    """One Coordinator turn's provenance (ADR-0061), masked as the audit is."""

    turn_id: str
    position: int
    wake: dict[str, Any]
    fence: dict[str, Any]
    request: dict[str, Any]
    attempts: list[dict[str, Any]]
    decision: dict[str, Any] | None
    verdict: dict[str, Any]
    created: list[str]
    affected: list[str]
    effects: list[dict[str, Any]]


class DecisionsRead(Dto):
    work_item_id: str
    turns: list[DecisionTurn]


class MessagePosted(Dto):
    """The user turn a message began (``duplicate``: an earlier post with the same
    ``clientMessageId`` began it)."""

    work_item_id: str
    turn_id: str
    duplicate: bool


class ChangeRecord(Dto):
    """A change stream event's data: which event was written, never its payload."""

    position: int
    work_item_id: str
    aggregate: str
    aggregate_id: str
    version: int
    type: str
    at: str
    actor: str
    action_id: str = omitted()
    run_id: str = omitted()
