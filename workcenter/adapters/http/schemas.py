"""The shapes of the API's read answers around the DTOs (``projections.dto_models``):
the versions a per-item read carries, a page of the list, the audit, the decisions.

Declared in the document (ADR-0066) and validated against live answers by the
tests. The answers that wrap a DTO are ``TypedDict``s like the DTOs (ADR-0071); the
others are pydantic models, which the routes never build: they serve bytes.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from workcenter.domain.planning import PlanWait
from workcenter.domain.work_item import WorkItemStatus
from workcenter.projections.dto_models import (
    Conversation,
    Dto,
    ExecutionControl,
    GoalProgress,
    SummaryDto,
    Timeline,
)


def not_null(schema: dict[str, Any]) -> None:
    """An omitted key's schema: its type without the ``null`` a Python default adds."""
    arms = schema.pop("anyOf", None)
    if arms is not None:
        schema.update(next(arm for arm in arms if arm.get("type") != "null"))
    schema.pop("default", None)


def omitted(description: str | None = None) -> Any:
    """A key the answer leaves out when it has nothing to say (never null)."""
    return Field(None, description=description, json_schema_extra=not_null)


class Answer(BaseModel):
    """An answer as served: camelCase keys, nothing else."""

    model_config = ConfigDict(
        alias_generator=to_camel, validate_by_name=True, serialize_by_alias=True, extra="forbid"
    )


class Versions(Dto):
    itemVersion: Annotated[int, Field(description="The WorkItem's version: echo it in If-Match")]
    controlVersion: Annotated[int, Field(description="The ledger's control version, likewise")]


class ItemRead(Versions):
    workItemId: str
    status: WorkItemStatus


class ProgressRead(ItemRead):
    goalProgress: GoalProgress | None


class BudgetRead(ItemRead):
    executionControl: ExecutionControl


class TimelineRead(Timeline, Versions):
    pass


class ConversationRead(Conversation, ItemRead):
    planWait: Annotated[
        PlanWait | None,
        Field(
            description="A dynamic item running with no ready, running or waiting Action"
            " waits for its Coordinator to plan: 'due' (a step is due), 'failed' (its last"
            " turn failed and is not retried: a message is needed) or 'idle' (no step is"
            " due: a message is needed); null for any other item"
        ),
    ]


class SummaryPage(Dto):
    items: list[SummaryDto]
    total: Annotated[int, Field(ge=0, description="The items of the status")]
    limit: int
    next: Annotated[
        str | None, Field(description="The cursor of the next, older, page (send as after)")
    ]
    position: Annotated[
        int, Field(description="The event sequence's head read first: stream from it")
    ]


class AuditEvent(Answer):
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


class AuditState(Answer):
    position: int
    item: dict[str, Any]
    actions: list[dict[str, Any]]


class AuditRead(Answer):
    work_item_id: str
    events: list[AuditEvent]
    more: bool = Field(
        description="Older events match too: left out by limit, or to keep the answer"
        " within 512 KiB (the newest kept)"
    )
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


class DecisionsRead(Answer):
    work_item_id: str
    turns: list[DecisionTurn]


class MessagePosted(Answer):
    """The user turn a message began (``duplicate``: an earlier post with the same
    ``clientMessageId`` began it)."""

    work_item_id: str
    turn_id: str
    duplicate: bool


class ChangeRecord(Answer):
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


class Health(Answer):
    """The store answered a read: this server can serve."""

    status: Annotated[str, Field(description='"ok"')]


class ViewPosition(Answer):
    name: str
    position: Annotated[int, Field(description="The last event the read model applied")]
    lag: Annotated[int, Field(description="Events written after it, not yet applied")]


class LeaseCounts(Answer):
    live: Annotated[int, Field(description="Runs held under a lease that has not lapsed")]
    lapsed: Annotated[
        int,
        Field(description="Runs whose lease lapsed, not yet recovered: their worker is gone"),
    ]
    oldest_lapse: Annotated[
        str | None, Field(description="When the first of them lapsed (UTC), or null")
    ]


class StoreStatus(Answer):
    """The store as an operator's monitor sees it."""

    head: Annotated[int, Field(description="The position of the newest event")]
    views: list[ViewPosition]
    leases: LeaseCounts
