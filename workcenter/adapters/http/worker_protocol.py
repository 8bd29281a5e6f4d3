"""The worker protocol (ADR-0063): a worker in any language claims, renews, reports
and meters Runs over HTTP, under ``/api/worker/``.

Every verb is a POST with a strict JSON body (unknown fields are 422). A claim
answers the Run's fence (action id, run id, the worker's boot id, lease epoch);
every later verb sends it back as ``fence``, and a fence that is not the Run's live
one is ``409 StaleRun`` with nothing written (but a settlement, which records what the
Run spent: any fence the Run was issued, ADR-0133). A claim waits up to ``waitSeconds``
for work (a long poll woken by new events, and at least every second, when it also
ends Runs whose lease expired); 204 when none came. A finish, a reservation or a
settlement sent again answers the first result with ``replayed: true`` and writes
nothing, and so does a claim sent again with its ``clientClaimId`` while its Run is
live (ADR-0114). The routes call the facade's ``worker_protocol`` part only.
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Annotated, Any, Literal
from uuid import UUID

from fastapi import APIRouter, Depends, Request, Response
from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel
from starlette.concurrency import run_in_threadpool

from workcenter.adapters.http import contract, fields
from workcenter.adapters.http.commands import json_body
from workcenter.adapters.http.deps import Center, holder
from workcenter.adapters.http.problems import Forbidden
from workcenter.adapters.http.stream import HeadWatcher, watcher
from workcenter.application import Claim
from workcenter.domain import action as act
from workcenter.domain import bounds
from workcenter.domain import run as run_rules
from workcenter.service_layer.handlers.worker_protocol import BOOT_ID

MAX_WAIT_SECONDS = 30.0
# A long poll looks again at least this often: an expired lease writes no event.
RECHECK_SECONDS = 1.0
Id = Annotated[UUID, Field(strict=False)]  # a JSON string, parsed


class Model(BaseModel):
    """An answer, read from the service's result by attribute (``model_validate``)."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, frozen=True, from_attributes=True
    )


class Body(Model):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", strict=True
    )


router = APIRouter(
    prefix="/api/worker",
    tags=["worker"],
    dependencies=[Depends(json_body)],
    responses=contract.problems(400, 404, 409, 412, 413, 415, 422),
)
Heads = Annotated[HeadWatcher, Depends(watcher)]


# --- the fence ------------------------------------------------------------------------


class Fence(Body):
    """What a claim returned and every later verb of its Run sends back."""

    action_id: Id
    run_id: Id
    boot_id: str = Field(pattern=BOOT_ID.pattern)
    lease_epoch: fields.Epoch

    def ref(self) -> act.RunRef:
        return act.RunRef(
            action_id=self.action_id,
            run_id=self.run_id,
            boot_id=self.boot_id,
            lease_epoch=self.lease_epoch,
        )


class FenceOut(Model):
    action_id: UUID
    run_id: UUID
    boot_id: str
    lease_epoch: int


# --- claim ----------------------------------------------------------------------------


class ClaimBody(Body):
    worker: str = Field(
        max_length=fields.WORKER_NAME,
        pattern=fields.PRINTABLE,
        description="Your name: with your bootId (name@bootId) it is the Runs' actor",
    )
    boot_id: str | None = Field(
        None,
        pattern=BOOT_ID.pattern,
        description=(
            "Your process's id; default: the server process's (send one with a"
            " clientClaimId: a retry that reaches another server process needs it)."
        ),
    )
    lease_seconds: float = Field(60.0, ge=1, le=86_400)
    wait_seconds: float = Field(0.0, ge=0, le=MAX_WAIT_SECONDS)
    client_claim_id: Annotated[str, fields.text(bounds.REQUEST_ID, required=True)] | None = Field(
        None,
        description="An id you choose for this claim (a UUID, say): the same claim sent again"
        " by you while its Run is live answers that Run, `replayed`, and writes nothing; 409"
        " ClaimIdUsed once its Run ended or for another worker's id (ADR-0114).",
    )


class InputOut(Model):
    id: UUID
    text: str


class ContextOut(Model):
    kind: str
    text: str
    action_type: str | None
    run_id: UUID | None


class BriefOut(Model):
    objective: str
    approach: str
    expected_outcome: str


class Claimed(Model):
    """A claimed Run: its fence and what the worker needs to execute it."""

    fence: FenceOut
    work_item_id: UUID
    worker: str
    expires_at: datetime
    action_type: str
    brief: BriefOut
    context: list[ContextOut]
    goal: str
    acceptance_criteria: list[str]
    delivery_target: str | None
    attempt: int
    inputs: list[InputOut]
    replayed: bool = Field(
        description="This claim was made before with its clientClaimId: the same Run"
    )


def _claimed(claim: Claim) -> Claimed:
    fields = {name: getattr(claim, name) for name in Claimed.model_fields if name != "fence"}
    return Claimed(fence=FenceOut.model_validate(claim), **fields)


@router.post(
    "/claim",
    response_model=Claimed,
    responses={204: {"description": "Nothing to claim within waitSeconds"}},
)
async def claim(wc: Center, heads: Heads, request: Request, body: ClaimBody) -> Any:
    """Claim the oldest claimable Action, waiting up to ``waitSeconds`` for one. A
    worker token that names its holder claims under that name only (403 otherwise)."""
    named = holder(request)
    if named is not None and named.scope == "worker" and body.worker != named.name:
        raise Forbidden("this worker token claims only under the worker name it was given")
    protocol = wc.worker_protocol
    boot = body.boot_id if body.boot_id is not None else wc.boot_id
    loop = asyncio.get_running_loop()
    deadline = loop.time() + body.wait_seconds
    recovered_at = float("-inf")
    # Lapsed leases are ended by busy claims too, about once a second per process.
    await run_in_threadpool(protocol.recover_when_due, RECHECK_SECONDS)
    while not heads.closed and not await request.is_disconnected():
        # Read before the claim, so that work arriving after it wakes the wait.
        head = await run_in_threadpool(wc.changes.head) if body.wait_seconds else 0
        claimed = await run_in_threadpool(
            protocol.claim, body.worker, boot, body.lease_seconds, body.client_claim_id
        )
        if claimed is not None:
            # A replayed Run is not given back: the claim that made it may have been read.
            if not claimed.replayed and await request.is_disconnected():
                await run_in_threadpool(protocol.unanswered, claimed)
                return Response(status_code=204)
            return _claimed(claimed)
        if loop.time() - recovered_at >= RECHECK_SECONDS:
            recovered_at = loop.time()
            if await run_in_threadpool(protocol.recover_expired):
                continue  # an expired Run's Action may be claimable again
        left = deadline - loop.time()
        if left <= 0:
            break
        await heads.wait_past(head, min(left, RECHECK_SECONDS))
    return Response(status_code=204)


# --- Run commands ---------------------------------------------------------------------


class RenewBody(Body):
    fence: Fence
    lease_seconds: float = Field(60.0, ge=1, le=86_400)


class Renewed(Model):
    fence: FenceOut
    expires_at: datetime


@router.post("/renew", response_model=Renewed)
def renew(wc: Center, body: RenewBody) -> Renewed:
    """Extend the lease by ``leaseSeconds`` from now; 409 StaleRun: stop working on it."""
    ref = body.fence.ref()
    action = wc.worker_protocol.renew(ref, body.lease_seconds)
    run = action.run(ref.run_id)
    assert run is not None
    return Renewed(fence=FenceOut.model_validate(ref), expires_at=run.expires_at)


class Check(Body):
    """One acceptance check. A check without evidence does not count: a completed
    report holding one ends the Run failed."""

    criterion: str = Field(description="The criterion's text, exactly as the claim gave it.")
    status: Literal["passed", "failed", "deferred", "not_applicable"]
    evidence: str = Field("", description="What shows it (1 to 1,000 characters).")


# The shapes a report's evidence and outputs keep; anything else is dropped (as the
# report rules of the system Workcenter replaces do), so a client is told up front.
EVIDENCE_SHAPES = (
    "Each item: a string (a text), an object with a string `tool` (and `isError`), or"
    " an object with `kind` (text, tool, test, file, link, pr or commit), a non-empty"
    " `label`, and optionally `ref` and `status` (completed, passed, failed, error or"
    " pending). Other items are dropped, at most 50 are kept."
)


class Report(Body):
    """A Run's report. The service normalises and bounds it, then a `completed` outcome
    needs evidence, and exactly one acceptance check per criterion, in the claim's
    order, each with evidence (a `deliver` stage or a final review: every check
    `passed`); a report that falls short is recorded with the outcome `failed` and
    the reason, which the answer's `outcome` shows."""

    outcome: Literal["completed", "waiting", "retryable", "failed"]
    summary: str = ""
    response: str = ""
    evidence: list[str | fields.JsonObject] = Field(
        default_factory=list, description=EVIDENCE_SHAPES
    )
    outputs: list[str | fields.JsonObject] = Field(
        default_factory=list,
        description="As evidence, with `kind` file, link, pr or commit and a `ref`; a"
        " completed Run of an item delivered as files, a pull request or a merge needs an"
        " output of that kind.",
    )
    acceptance_checks: list[Check] = Field(default_factory=list)
    waiting_reason: str = ""
    error: str = ""
    failure_kind: str = ""
    failure_code: str = ""
    review_decision: Literal["approved", "changes_requested"] | None = None
    contract_patch: fields.JsonObject | None = None


class FinishBody(Body):
    fence: Fence
    report: Report


class FinishedOut(Model):
    """How the finish ended the Run; ``replayed``: this finish was recorded before."""

    work_item_id: UUID
    action_id: UUID
    run_id: UUID
    outcome: str
    action_status: str
    replayed: bool


@router.post("/finish", response_model=FinishedOut)
def finish(wc: Center, body: FinishBody) -> FinishedOut:
    """Record the Run's outcome. The same finish again answers the first (``replayed``)
    and writes nothing; another report for a finished Run is 409."""
    report = body.report.model_dump(by_alias=True, exclude_unset=True)
    return FinishedOut.model_validate(wc.worker_protocol.finish(body.fence.ref(), report))


Counter = Annotated[int, Field(ge=0, le=run_rules.COUNTER_LIMIT), fields.Integral]


class Stats(Body):
    """The Run's own counters (the ledger counts its model requests and tokens)."""

    llm_request_count: Counter = 0
    loop_count: Counter = 0
    tool_count: Counter = 0
    input_tokens: Counter = 0
    output_tokens: Counter = 0
    cache_read_tokens: Counter = 0
    cache_write_tokens: Counter = 0
    total_tokens: Counter = 0


class ToolEvent(Body):
    tool: str = fields.text(run_rules.TOOL_NAME_LIMIT, required=True)
    is_error: bool = False
    summary: str = fields.text(run_rules.TOOL_SUMMARY_LIMIT)


class Progress(Body):
    """The Run's final progress; the checkpoint keeps its last 16 tool events."""

    summary: str = fields.text(run_rules.SUMMARY_LIMIT)
    response: str = fields.text(run_rules.RESPONSE_LIMIT)
    stats: Stats = Field(default_factory=Stats)
    checkpoint: list[ToolEvent] = Field(
        default_factory=list, max_length=run_rules.CHECKPOINT_INPUT_LIMIT
    )


class InterruptBody(Body):
    fence: Fence
    reason: str = fields.text(bounds.REASON)
    progress: Progress | None = None


class DeferBody(Body):
    fence: Fence


class RunEnded(Model):
    work_item_id: UUID
    action_id: UUID
    run_id: UUID
    run_status: str
    action_status: str


def _ended(action: act.ActionState, ref: act.RunRef) -> RunEnded:
    run = action.run(ref.run_id)
    assert run is not None
    return RunEnded(
        work_item_id=action.work_item_id,
        action_id=action.id,
        run_id=run.id,
        run_status=run.status,
        action_status=action.status,
    )


@router.post("/interrupt", response_model=RunEnded)
def interrupt(wc: Center, body: InterruptBody) -> RunEnded:
    """Give the Run up gracefully, recording its final progress. Taken while the Run is
    the Action's live one, also once its lease has expired, until the Run is recovered."""
    ref = body.fence.ref()
    progress = (
        body.progress.model_dump(by_alias=True, exclude_unset=True) if body.progress else None
    )
    return _ended(wc.worker_protocol.interrupt(ref, body.reason, progress), ref)


@router.post("/defer", response_model=RunEnded)
def defer(wc: Center, body: DeferBody) -> RunEnded:
    """The workspace is busy: the Run ends (`runStatus` interrupted, deferred in the
    timeline) and its attempt is given back."""
    ref = body.fence.ref()
    return _ended(wc.worker_protocol.defer(ref), ref)


class PendingBody(Body):
    fence: Fence


class ConsumeBody(Body):
    fence: Fence
    input_ids: list[Id] = Field(max_length=256)


class Pending(Model):
    inputs: list[InputOut]


@router.post("/input", response_model=Pending)
def pending_input(wc: Center, body: PendingBody) -> Pending:
    """Input queued for the live Run and not consumed yet (a read, fenced like a write)."""
    queued = wc.worker_protocol.pending_input(body.fence.ref())
    return Pending(inputs=queued)


@router.post("/input/consume", response_model=Pending)
def consume_input(wc: Center, body: ConsumeBody) -> Pending:
    """Record that the Run took the named input into its work; answers what is left."""
    action = wc.worker_protocol.consume_input(body.fence.ref(), body.input_ids)
    return Pending(inputs=action.unconsumed_inputs)


# --- the ledger -----------------------------------------------------------------------


class ReserveBody(Body):
    fence: Fence
    request_id: str = fields.text(bounds.REQUEST_ID, required=True)
    request: fields.JsonObject = Field(description="The model request, as it will be sent")


class Admission(Model):
    """``allowed`` false: do not send the request (``code`` says why; ``stops``: the
    item was stopped by its budget)."""

    request_id: str
    allowed: bool
    code: str | None
    stops: bool
    replayed: bool


@router.post("/requests/reserve", response_model=Admission)
def reserve(wc: Center, body: ReserveBody) -> Admission:
    """Admit one model request of the Run before it is sent, at its estimated cost."""
    admitted = wc.worker_protocol.reserve(body.fence.ref(), body.request_id, body.request)
    return Admission.model_validate(admitted)


class SettleBody(Body):
    fence: Fence
    request_id: str = fields.text(bounds.REQUEST_ID, required=True)
    usage: fields.JsonObject | None = Field(None, description="The usage the provider reported")
    complete: bool = True


class Settlement(Model):
    request_id: str
    status: str
    charged_tokens: int
    replayed: bool


@router.post("/requests/settle", response_model=Settlement)
def settle(wc: Center, body: SettleBody) -> Settlement:
    """Record what the request cost (``complete`` false: it did not end normally), by
    the Run the fence was issued for, live or not: what was spent is recorded once the
    lease has lapsed or the item was cancelled too."""
    settled = wc.worker_protocol.settle(
        body.fence.ref(), body.request_id, body.usage, body.complete
    )
    return Settlement.model_validate(settled)
