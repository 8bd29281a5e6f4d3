"""The conversation with an item's Coordinator: read it, post a user message.

The read is a sanitised DTO (``projections.conversation_dto``) whose ETag is the
item's, the versions a message echoes back in ``If-Match`` like any command
(``preconditions``); the conversation's own version is in the body. Posting begins
a user turn that the Coordinator answers in its next step (``serve --coordinate``
at once, else ``workcenter coordinate`` or a worker), so the answer is ``202
Accepted`` with the turn id; the reply appears in the conversation and on the
change stream. A repeated ``clientMessageId`` answers the first turn and writes
nothing, even once the item has moved on (coordinator.md 9.2): that is checked
before the ETag is, so a client retrying a post whose answer it lost is not told
its ETag is stale.
"""

from __future__ import annotations

from typing import Annotated
from uuid import UUID

from fastapi import APIRouter, Depends, Request
from pydantic import Field

from workcenter.adapters.http import contract, fields
from workcenter.adapters.http.commands import Body, Expected, json_body
from workcenter.adapters.http.deps import Center, Requester
from workcenter.adapters.http.preconditions import item_etag, item_read, list_etag
from workcenter.adapters.http.responses import JSONBytes
from workcenter.adapters.http.schemas import ConversationRead, DecisionsRead, MessagePosted
from workcenter.application import WorkCenter
from workcenter.domain import bounds, inputs
from workcenter.domain import conversation as conv

router = APIRouter(prefix="/api", tags=["conversation"], default_response_class=JSONBytes)
ITEM = "/work-items/{item_id}"


class PostMessage(Body):
    """A user message; ``clientMessageId`` makes a retry of the same post harmless."""

    text: str = fields.text(conv.TEXT_LIMIT, required=True)
    client_message_id: Annotated[str, fields.text(bounds.REQUEST_ID, required=True)] | None = Field(
        None, alias="clientMessageId"
    )


@router.get(
    ITEM + "/conversation",
    response_model=ConversationRead,
    responses=contract.read(404),
    dependencies=[Depends(contract.revalidation)],
)
def conversation(wc: Center, item_id: str) -> JSONBytes:
    """The messages (user and Coordinator, oldest first; thinking, completed or failed,
    with the decision an answer carried) and their turns. Provider requests and
    responses never leave the server."""
    body = wc.web_reads.conversation(inputs.aggregate_id(item_id, "WorkItem"))
    return item_read(body, (body["itemVersion"], body["controlVersion"]))


@router.get(
    ITEM + "/decisions",
    response_model=DecisionsRead,
    responses=contract.read(404),
    dependencies=[Depends(contract.revalidation)],
)
def decisions(wc: Center, item_id: str, turn: UUID | None = None) -> JSONBytes:
    """Each Coordinator turn's provenance (ADR-0061): its wake, the versions its request
    was built from, its attempts and their cost, the decision, the verdict and the
    events it caused, masked as the audit is; ``turn`` keeps that turn only."""
    position = wc.changes.head()  # read first: the ETag is never newer than the body
    turns = wc.maintenance.decisions(inputs.aggregate_id(item_id, "WorkItem"))
    if turn is not None:
        turns = [t for t in turns if t["turn_id"] == str(turn)]
    body = {"workItemId": item_id, "turns": turns}
    return JSONBytes(body, headers={"ETag": list_etag(position), "Cache-Control": "no-cache"})


def _posted_before(wc: WorkCenter, work_item_id: UUID, client_message_id: str | None) -> bool:
    if client_message_id is None:
        return False
    state = wc.conversation(work_item_id)
    return state is not None and client_message_id.strip() in state.client_message_ids


@router.post(
    ITEM + "/messages",
    status_code=202,
    dependencies=[Depends(json_body)],
    response_model=MessagePosted,
    responses=contract.command(202),
)
def post_message(
    wc: Center,
    by: Requester,
    request: Request,
    item_id: str,
    expected: Expected,
    body: PostMessage,
) -> JSONBytes:
    """Post a user message: a user-originated turn the Coordinator answers next. Refused
    (writing nothing) when the item is done or cancelled, stopped by its budget, a turn
    is still thinking, or the text is empty."""
    work_item_id = inputs.aggregate_id(item_id, "WorkItem")
    if not _posted_before(wc, work_item_id, body.client_message_id):
        expected.check(wc, work_item_id)
    item_version, _ = expected.versions()
    posted = wc.post_user_message(
        work_item_id,
        body.text,
        client_message_id=body.client_message_id,
        expected_version=item_version,
        actor=by,
    )
    if not posted.duplicate:
        request.app.state.message_posted()
    location = f"/api/work-items/{work_item_id}/conversation"
    answer = {
        "workItemId": str(posted.work_item_id),
        "turnId": str(posted.turn_id),
        "duplicate": posted.duplicate,
    }
    etag = item_etag(*wc.web_reads.versions(work_item_id))
    return JSONBytes(
        answer,
        status_code=202,
        headers={"ETag": etag, "Location": location, "Cache-Control": "no-store"},
    )
