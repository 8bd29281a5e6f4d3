"""GET routes over the read models: the item list, an item's detail, goal progress,
audit, budget and Runs timeline. Every body is a sanitised DTO; every response has
an ETag (see ``preconditions``).

The routes are plain functions (FastAPI runs them in its thread pool) that ask the
facade and shape nothing themselves but the audit rows, which leave sanitised
unless an operator who presented the API token asks for them raw.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal
from uuid import UUID

import orjson
from fastapi import APIRouter, Depends, Query, Request

from workcenter.adapters import presenters
from workcenter.adapters.http import contract
from workcenter.adapters.http.deps import Center
from workcenter.adapters.http.guard import AUTHENTICATED
from workcenter.adapters.http.preconditions import detail_versions, item_read, list_etag
from workcenter.adapters.http.problems import Forbidden
from workcenter.adapters.http.responses import JSONBytes
from workcenter.adapters.http.schemas import (
    AuditRead,
    BudgetRead,
    ProgressRead,
    SummaryPage,
    TimelineRead,
)
from workcenter.domain import bounds, inputs
from workcenter.domain.action import ActionState
from workcenter.domain.errors import InvalidInput
from workcenter.domain.work_item import WorkItemState
from workcenter.projections.audit import DEFAULT_LIMIT, AuditRow
from workcenter.projections.budget import MAX_DTO_BYTES
from workcenter.projections.dto_models import DetailDto
from workcenter.projections.sanitize import sanitize_event_payload, sanitize_record
from workcenter.service_layer.queries.browser import CURSOR

router = APIRouter(
    prefix="/api",
    tags=["reads"],
    default_response_class=JSONBytes,
    dependencies=[Depends(contract.revalidation)],
)

Status = Literal["draft", "ready", "running", "waiting", "needs_attention", "done", "cancelled"]
ITEM = "/work-items/{item_id}"


def _versions_read(body: dict[str, Any]) -> JSONBytes:
    return item_read(body, (body["itemVersion"], body["controlVersion"]))


@router.get("/work-items", response_model=SummaryPage, responses=contract.read())
def list_work_items(
    wc: Center,
    status: Status | None = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 50,
    after: Annotated[str | None, Query(max_length=64, pattern=CURSOR.pattern)] = None,
    q: Annotated[str | None, Query(max_length=200)] = None,
) -> JSONBytes:
    """Summary DTOs newest first, each with its goal progress counted; ``status`` keeps
    one status, ``q`` the items whose title or goal holds it (any case). ``next`` is the
    cursor of the next (older) page, to send back as ``after``: a page starts after an
    item, not at a count, so items created meanwhile shift no page but the first.
    ``total`` counts the items of the status. ``position`` is the event sequence's head
    read first: stream changes after it to stay current."""
    position = wc.changes.head()
    page = wc.web_reads.summaries(status, limit, after, q)
    body = page.json() | {"position": position}
    return JSONBytes(body, headers={"ETag": list_etag(position), "Cache-Control": "no-cache"})


@router.get(ITEM, response_model=DetailDto, responses=contract.read(404))
def detail(wc: Center, item_id: str) -> JSONBytes:
    """The item's detail: its contract, Actions, Runs, goal progress and budget."""
    dto = wc.detail(inputs.aggregate_id(item_id, "WorkItem"))
    return item_read(dto, detail_versions(dto))


@router.get(ITEM + "/progress", response_model=ProgressRead, responses=contract.read(404))
def progress(wc: Center, item_id: str) -> JSONBytes:
    """Goal progress: each criterion met, unmet or contradicted, with the Runs that
    prove or contradict it, the delivery and the blockers."""
    return _versions_read(wc.web_reads.progress(inputs.aggregate_id(item_id, "WorkItem")))


@router.get(ITEM + "/budget", response_model=BudgetRead, responses=contract.read(404))
def budget(wc: Center, item_id: str) -> JSONBytes:
    """The execution control: limits, usage, attempts per Action, the stop."""
    return _versions_read(wc.web_reads.budget(inputs.aggregate_id(item_id, "WorkItem")))


@router.get(ITEM + "/timeline", response_model=TimelineRead, responses=contract.read(404))
def timeline(wc: Center, item_id: str) -> JSONBytes:
    """The Actions in order, each with its newest Runs (status and times only)."""
    return _versions_read(wc.web_reads.timeline(inputs.aggregate_id(item_id, "WorkItem")))


def _row(row: AuditRow, raw: bool) -> dict[str, Any]:
    return {
        "position": row.position,
        "time": row.time,
        "aggregate": row.aggregate,
        "aggregateId": str(row.aggregate_id),
        "version": row.version,
        "type": row.type,
        "actionId": str(row.action_id) if row.action_id else None,
        "runId": str(row.run_id) if row.run_id else None,
        "generation": row.generation,
        "actor": row.actor,
        "actorId": sanitize_record(row.actor_id),
        "worker": sanitize_record(row.worker),
        "causedBy": row.caused_by,
        "payload": row.payload if raw else sanitize_event_payload(row.type, row.payload),
    }


def _moment(value: str | None) -> datetime | None:
    if value is None:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise InvalidInput("atTime is not an ISO time, such as 2026-12-04T10:00:00Z") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


@router.get(ITEM + "/audit", response_model=AuditRead, responses=contract.read(404))
def audit(
    wc: Center,
    request: Request,
    item_id: str,
    limit: Annotated[int, Query(ge=1, le=DEFAULT_LIMIT)] = DEFAULT_LIMIT,
    action: UUID | None = None,
    run: UUID | None = None,
    type: Annotated[str | None, Query(max_length=128)] = None,
    at: Annotated[int | None, Query(ge=1, le=bounds.INTEGER)] = None,
    at_time: Annotated[
        str | None,
        Query(
            alias="atTime",
            max_length=64,
            description="An ISO time (UTC if it names no zone)",
            json_schema_extra={"format": "date-time"},
        ),
    ] = None,
    raw: bool = False,
) -> JSONBytes:
    """The item's events (its Actions' and ledger's too) in write order, the newest
    ``limit`` that match the filters, as the CLI's ``audit`` shows them; with ``at`` or
    ``atTime`` also the item and its Actions as they were then. ``raw`` (payloads as
    stored) only for a request that carried an operator token (or the API token)."""
    if raw and not request.scope.get("state", {}).get(AUTHENTICATED):
        raise Forbidden("raw audit payloads need an operator token (or the API token)")
    if at is not None and at_time is not None:
        raise InvalidInput("give at or atTime, not both")
    work_item_id = inputs.aggregate_id(item_id, "WorkItem")
    item_version, control_version = wc.web_reads.versions(work_item_id)
    moment = _moment(at_time)
    body: dict[str, Any] = {}
    until: int | None = None
    if at is not None or moment is not None:
        until, item, actions = wc.state_at(work_item_id, version=at, at=moment)
        ordered = sorted(actions.values(), key=lambda a: (a.sequence, a.id))
        body["state"] = {
            "position": until,
            "item": _state(presenters.item_json(item), WorkItemState, raw),
            "actions": [_state(presenters.action_json(a), ActionState, raw) for a in ordered],
        }
    # One more than asked: whether older events were left out.
    rows = wc.audit(
        work_item_id, limit=limit + 1, action_id=action, run_id=run, type=type, until=until
    )
    events, within = _newest_within(
        [_row(r, raw) for r in rows[-limit:]], MAX_DTO_BYTES - len(orjson.dumps(body)) - 1024
    )
    body = {
        "workItemId": str(work_item_id),
        "events": events,
        "more": len(rows) > limit or not within,
    } | body
    return item_read(body, (item_version, control_version))


def _newest_within(events: list[dict[str, Any]], budget: int) -> tuple[list[dict[str, Any]], bool]:
    """The newest of ``events`` whose JSON fits ``budget`` bytes (the newest one always),
    and whether all did: a long-lived item's newest 100 rows were 1.9 MB, fetched by the
    dashboard at every look (found by acceptance testing, ADR-0136)."""
    kept: list[dict[str, Any]] = []
    for event in reversed(events):
        budget -= len(orjson.dumps(event)) + 1
        if budget < 0 and kept:
            return kept[::-1], False
        kept.append(event)
    return kept[::-1], True


def _state(data: dict[str, Any], schema: type[Any], raw: bool) -> Any:
    return data if raw else sanitize_record(data, schema)
