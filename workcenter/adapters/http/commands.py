"""POST routes for a user's commands: create an item, start, cancel, resume, extend its
budget, retry or guide an Action.

Every command but create needs ``If-Match``: the item's current ETag (else 428
without one, 412 for another, judged once the body has been checked),
whose versions are then the command's expected versions. Bodies are JSON only (so a
page of another origin cannot post one without a preflight this server never
grants) and strict: an unknown field or a value of the wrong type is 422. Bounds and
rules are the service's: a refused command is a problem document and writes nothing.
Each answers with the item's detail DTO and its new ETag.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal
from uuid import UUID

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field

from workcenter.adapters.http import contract, fields
from workcenter.adapters.http.conventions import refuse_what_json_has_not
from workcenter.adapters.http.deps import Center, Requester
from workcenter.adapters.http.preconditions import Seen, detail_versions, item_read, seen
from workcenter.adapters.http.problems import UnsupportedMediaType
from workcenter.adapters.http.responses import JSONBytes
from workcenter.application import WorkCenter
from workcenter.domain import bounds, inputs
from workcenter.domain.run import INPUT_LIMIT
from workcenter.domain.work_item import DeliveryTarget
from workcenter.projections.dto_models import DetailDto


async def json_body(request: Request) -> None:
    media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media_type != "application/json":
        raise UnsupportedMediaType("commands take a JSON body (Content-Type: application/json)")
    refuse_what_json_has_not(await request.body())


router = APIRouter(
    prefix="/api",
    tags=["commands"],
    dependencies=[Depends(json_body)],
    default_response_class=JSONBytes,
)
ITEM = "/work-items/{item_id}"
Expected = Annotated[Seen, Depends(seen)]


class Body(BaseModel):
    # Fields by the names the API documents only: ``max_tokens`` is an unknown field.
    model_config = ConfigDict(extra="forbid", strict=True, validate_by_name=False)


Limit = fields.Count


class Limits(Body):
    """Budget limits (on create) or additions to them (on extend)."""

    max_tokens: Limit | None = Field(None, alias="maxTokens")
    max_requests: Limit | None = Field(None, alias="maxRequests")
    max_run_requests: Limit | None = Field(None, alias="maxRunRequests")
    max_action_attempts: Limit | None = Field(None, alias="maxActionAttempts")
    max_coordinator_failures: Limit | None = Field(None, alias="maxCoordinatorFailures")

    def given(self) -> dict[str, int]:
        return {k: v for k, v in self.model_dump().items() if v is not None}


class Stage(Body):
    type: fields.StageName
    max_attempts: fields.StageAttempts | None = Field(None, alias="maxAttempts")


Criterion = Annotated[str, Field(max_length=bounds.CRITERION)]


# Stages are for linear items: any other item takes none, which the document states
# (the service refuses stages given to a dynamic item, ADR-0090). A linear item's list
# has at least one stage (ADR-0106): left out, the stages are the default ones.
STAGES_ONLY_WHEN_LINEAR: Final[dict[str, Any]] = {
    "if": {"required": ["mode"], "properties": {"mode": {"const": "linear"}}},
    "then": {"properties": {"stages": {"minItems": 1}}},
    "else": {
        "properties": {"stages": {"anyOf": [{"type": "null"}, {"type": "array", "maxItems": 0}]}}
    },
}


class CreateWorkItem(Body):
    model_config = ConfigDict(json_schema_extra=STAGES_ONLY_WHEN_LINEAR)

    title: str = fields.text(bounds.TITLE, required=True)
    goal: str = fields.text(bounds.GOAL, required=True)
    acceptance_criteria: list[Criterion] = Field(
        default_factory=list, alias="acceptanceCriteria", max_length=bounds.CRITERIA
    )
    delivery_target: DeliveryTarget | None = Field(None, alias="deliveryTarget")
    mode: Literal["dynamic", "linear"] = "dynamic"
    # Each stage's name once (ADR-0104): the document states it of the names given as
    # strings; a name given once as a string and once as an object is refused too.
    stages: list[fields.StageName | Stage] | None = Field(
        None, max_length=bounds.STAGES, json_schema_extra={"uniqueItems": True}
    )
    start: bool = False
    limits: Limits | None = None
    request_id: Annotated[str, fields.text(bounds.REQUEST_ID, required=True)] | None = Field(
        None,
        alias="requestId",
        description="An id you choose for this create (a UUID, say), to send it again"
        " after a lost answer: the same create with the same id answers the item the"
        " first one made, as it is now, and writes nothing; other input with it is 409"
        " RequestIdUsed (ADR-0139).",
    )


class Cancel(Body):
    reason: str = fields.text(bounds.REASON)


class Resume(Body):
    pass


class Retry(Body):
    answer: str = fields.text(bounds.ANSWER)
    expected_generation: fields.Version | None = Field(None, alias="expectedGeneration")


class Guide(Body):
    guidance: str = fields.text(bounds.GUIDANCE, required=True)
    expected_generation: fields.Version | None = Field(None, alias="expectedGeneration")


class ActionInput(Body):
    text: str = fields.text(INPUT_LIMIT, required=True)
    expected_generation: fields.Version = Field(alias="expectedGeneration")
    # A running Action's Run, which queues the input; refused if it is not the Run now.
    expected_run_id: Annotated[UUID, Field(strict=False)] | None = Field(
        None, alias="expectedRunId"
    )


def _answer(wc: WorkCenter, work_item_id: UUID, status: int = 200, **headers: str) -> JSONBytes:
    # What the command did, also where a runner keeps the view (ADR-0122).
    dto = wc.detail(work_item_id, caught_up=True)
    return item_read(
        dto, detail_versions(dto), status_code=status, cache="no-store", headers=headers
    )


def _stage(stage: str | Stage) -> str | dict[str, Any]:
    if isinstance(stage, str):
        return stage
    return {"type": stage.type} | (
        {"maxAttempts": stage.max_attempts} if stage.max_attempts is not None else {}
    )


CREATED = {
    201: {
        "headers": {
            "ETag": contract.ETAG_HEADER,
            "Location": {"description": "The new item", "schema": {"type": "string"}},
        }
    }
} | contract.problems(400, 409, 413, 415, 422)


@router.post("/work-items", status_code=201, response_model=DetailDto, responses=CREATED)
def create_work_item(wc: Center, by: Requester, body: CreateWorkItem) -> JSONBytes:
    """Create a WorkItem and its budget; ``start`` starts it at once."""
    item = wc.create_work_item(
        title=body.title,
        goal=body.goal,
        acceptance_criteria=body.acceptance_criteria,
        delivery_target=body.delivery_target,
        mode=body.mode,
        stages=[_stage(s) for s in body.stages] if body.stages is not None else None,
        start=body.start,
        limits=body.limits.given() if body.limits is not None else None,
        request_id=body.request_id,
        actor=by,
    )
    return _answer(wc, item.id, 201, Location=f"/api/work-items/{item.id}")


class Start(Body):
    pass


@router.post(ITEM + "/start", response_model=DetailDto, responses=contract.command())
def start(wc: Center, by: Requester, item_id: str, expected: Expected, body: Start) -> JSONBytes:
    """Start a draft: a linear item's first stage becomes ready, a dynamic item waits
    for its Coordinator to plan."""
    work_item_id = inputs.aggregate_id(item_id, "WorkItem")
    with expected.held(wc, work_item_id):
        wc.start(work_item_id, expected_version=expected.item_version, actor=by)
    return _answer(wc, work_item_id)


@router.post(ITEM + "/cancel", response_model=DetailDto, responses=contract.command())
def cancel(wc: Center, by: Requester, item_id: str, expected: Expected, body: Cancel) -> JSONBytes:
    """Cancel the item."""
    work_item_id = inputs.aggregate_id(item_id, "WorkItem")
    with expected.held(wc, work_item_id):
        wc.cancel(
            work_item_id, reason=body.reason, expected_version=expected.item_version, actor=by
        )
    return _answer(wc, work_item_id)


@router.post(ITEM + "/resume", response_model=DetailDto, responses=contract.command())
def resume(wc: Center, by: Requester, item_id: str, expected: Expected, body: Resume) -> JSONBytes:
    """Resume a cancelled item, or one its budget stopped once the budget allows."""
    work_item_id = inputs.aggregate_id(item_id, "WorkItem")
    with expected.held(wc, work_item_id):
        wc.resume(
            work_item_id,
            expected_version=expected.item_version,
            expected_ledger_version=expected.control_version,
            actor=by,
        )
    return _answer(wc, work_item_id)


@router.post(ITEM + "/budget/extend", response_model=DetailDto, responses=contract.command())
def extend_budget(
    wc: Center, by: Requester, item_id: str, expected: Expected, body: Limits
) -> JSONBytes:
    """Raise limits by the amounts given (clears no stop: resume does)."""
    work_item_id = inputs.aggregate_id(item_id, "WorkItem")
    with expected.held(wc, work_item_id):
        wc.extend_budget(
            work_item_id,
            expected_version=expected.control_version,
            additions=body.given(),
            actor=by,
        )
    return _answer(wc, work_item_id)


@router.post(
    ITEM + "/actions/{action_id}/retry", response_model=DetailDto, responses=contract.command()
)
def retry(
    wc: Center,
    by: Requester,
    item_id: str,
    action_id: str,
    expected: Expected,
    body: Retry,
) -> JSONBytes:
    """Retry a failed or waiting Action (with an answer to its question, if any)."""
    work_item_id = inputs.aggregate_id(item_id, "WorkItem")
    with expected.held(wc, work_item_id):
        wc.retry(
            work_item_id,
            inputs.aggregate_id(action_id, "Action"),
            expected_version=expected.item_version,
            expected_generation=body.expected_generation,
            answer=body.answer,
            actor=by,
        )
    return _answer(wc, work_item_id)


@router.post(
    ITEM + "/actions/{action_id}/guide", response_model=DetailDto, responses=contract.command()
)
def guide(
    wc: Center,
    by: Requester,
    item_id: str,
    action_id: str,
    expected: Expected,
    body: Guide,
) -> JSONBytes:
    """Guide an Action: a new generation of it runs with the guidance."""
    work_item_id = inputs.aggregate_id(item_id, "WorkItem")
    with expected.held(wc, work_item_id):
        wc.guide(
            work_item_id,
            inputs.aggregate_id(action_id, "Action"),
            expected_version=expected.item_version,
            expected_generation=body.expected_generation,
            guidance=body.guidance,
            actor=by,
        )
    return _answer(wc, work_item_id)


@router.post(
    ITEM + "/actions/{action_id}/input", response_model=DetailDto, responses=contract.command()
)
def add_input(
    wc: Center,
    by: Requester,
    item_id: str,
    action_id: str,
    expected: Expected,
    body: ActionInput,
) -> JSONBytes:
    """Send input to an Action: a ready one starts a new generation with it in its
    context; a running one's Run (``expectedRunId``) gets it queued."""
    work_item_id = inputs.aggregate_id(item_id, "WorkItem")
    with expected.held(wc, work_item_id):
        wc.add_input(
            work_item_id,
            inputs.aggregate_id(action_id, "Action"),
            expected_version=expected.item_version,
            expected_generation=body.expected_generation,
            text=body.text,
            expected_run_id=body.expected_run_id,
            actor=by,
        )
    return _answer(wc, work_item_id)
