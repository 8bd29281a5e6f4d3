"""Server-Sent Events following the event sequence: one ``change`` per event, its
notification id as the SSE id.

A client names where it is with ``Last-Event-ID`` (what a browser sends when it
reconnects) or, on its first connection, ``?after=`` (the ``position`` a list read
returned); with neither it gets what happens from now on. It then receives every
change after that position exactly once, in order, for all items or for one. The
data is the change feed's record (type, ids, versions, actor kind), never a payload:
a client reads the DTOs again to see the new state.

One watcher per application polls the head of the sequence while streams wait on
it, rather than each polling the store, and say ``: keepalive`` when nothing happens
so that proxies keep the connection open. When the server stops, the watcher is
closed and every stream ends, so that shutting down waits for no one.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Annotated
from uuid import UUID

import orjson
from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from workcenter.adapters.http import contract
from workcenter.adapters.http.deps import Center
from workcenter.adapters.http.fields import POSITION
from workcenter.adapters.persistence import StoreUnavailable
from workcenter.application import WorkCenter
from workcenter.domain import inputs
from workcenter.domain.errors import InvalidInput
from workcenter.service_layer.queries.changes import MAX_BATCH, PAST_THE_HEAD, Change

router = APIRouter(prefix="/api", tags=["stream"])
# One event of the stream (Schemathesis reads a text/event-stream schema so); the
# stream also sends ``retry`` first and keepalive comments.
EVENT = {
    "type": "object",
    "required": ["event", "id", "data"],
    "properties": {
        "event": {"const": "change"},
        "id": {"type": "string", "pattern": POSITION},
        "data": {
            "type": "string",
            "contentMediaType": "application/json",
            "contentSchema": {"$ref": "#/components/schemas/ChangeRecord"},
        },
        "retry": {"type": "integer"},
    },
}
EVENTS = {
    200: {
        "description": "Server-Sent Events: a ``change`` event per event written (its "
        "position as the id, a ChangeRecord as the data) and comments (keepalive; store "
        "unavailable and store available again, while the database cannot be read); never "
        "ends while the server runs",
        "content": {"text/event-stream": {"schema": EVENT}},
    }
} | contract.problems(422)
POLL_SECONDS = 0.1
KEEPALIVE_SECONDS = 15.0
RETRY_MILLISECONDS = 1000
# While the store cannot be read, the watcher and the streams look again this often: they
# stay open, and the process has said once that the database is away (ADR-0128).
UNAVAILABLE_SECONDS = 1.0
STORE_AWAY = b": store unavailable\n\n"
STORE_BACK = b": store available\n\n"


class HeadWatcher:
    """The head of the event sequence, polled by one task while a stream awaits it: an
    idle server reads nothing (it read the head ten times a second for as long as it
    ran once any stream had opened; found by acceptance testing, ADR-0137)."""

    def __init__(self, read_head: Callable[[], int], poll: float = POLL_SECONDS) -> None:
        self.read_head = read_head
        self.poll = poll
        self.head = -1
        self.closed = False
        self.away = False  # the store could not be read at the last look
        self._moved = asyncio.Event()
        self._waiting = 0  # streams awaiting the head now
        self._task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self) -> None:
        if self._task is None or self._task.done():
            self._loop = asyncio.get_running_loop()
            self._task = self._loop.create_task(self._run())

    def close(self) -> None:
        """End every stream: the server is stopping (callable from any thread)."""
        self.closed = True
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._wake)

    async def stop(self) -> None:
        self.close()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    def _wake(self) -> None:
        moved, self._moved = self._moved, asyncio.Event()
        moved.set()

    async def _run(self) -> None:
        # Ends once no stream waits (checked after each look, so a stream that waits
        # again between two looks keeps it); the next wait starts it again.
        while not self.closed and self._waiting:
            try:
                head = await run_in_threadpool(self.read_head)
            except StoreUnavailable:
                # Raised out of the task, it ended it, unread ("Task exception was never
                # retrieved" in the log, each outage; found by acceptance testing).
                self._went(away=True)
                await asyncio.sleep(UNAVAILABLE_SECONDS)
                continue
            self._went(away=False)
            if head != self.head:
                self.head = head
                self._wake()
            await asyncio.sleep(self.poll)

    def _went(self, *, away: bool) -> None:
        """The store became unreadable, or readable again: streams wake to say so."""
        if away != self.away:
            self.away = away
            self._wake()

    async def wait_past(self, position: int, timeout: float) -> bool:
        """Whether the head moved past ``position``, or the store became unreadable or
        readable again, within ``timeout`` seconds (False at once when the watcher is
        closed)."""
        self._waiting += 1
        try:
            self.start()
            deadline = asyncio.get_running_loop().time() + timeout
            away = self.away
            while self.head <= position and self.away == away and not self.closed:
                left = deadline - asyncio.get_running_loop().time()
                if left <= 0:
                    return False
                try:
                    await asyncio.wait_for(self._moved.wait(), left)
                except TimeoutError:
                    return False
            return not self.closed
        finally:
            self._waiting -= 1


def watcher(request: Request) -> HeadWatcher:
    heads: HeadWatcher = request.app.state.head_watcher
    return heads


def _start(last_event_id: str | None, after: int | None, head: Callable[[], int]) -> int:
    """Where the stream starts: a position past the head was not sent by this store
    (it was replaced, say), and waiting for the head to reach it would hide changes."""
    if last_event_id is not None:
        text = last_event_id.strip()
        if not text.isdigit() or len(text) > 18:
            raise InvalidInput("Last-Event-ID must be a position this stream sent")
        after = int(text)
    now = head()
    if after is None:
        return now
    if after > now:
        raise InvalidInput(PAST_THE_HEAD.format(head=now))
    return after


async def _events(
    wc: WorkCenter, heads: HeadWatcher, position: int, work_item_id: UUID | None
) -> AsyncIterator[bytes]:
    yield f"retry: {RETRY_MILLISECONDS}\n\n".encode()
    away = False
    while not heads.closed:
        try:
            page = await run_in_threadpool(
                wc.changes.after, position, limit=MAX_BATCH, work_item_id=work_item_id
            )
        except StoreUnavailable:
            # Raised after the stream began, it cut the stream mid-chunk with a traceback
            # in the log; the stream waits instead, and goes on from where it was. A
            # comment says so once, and once again when it is back (the dashboard shows
            # it; other clients skip comments).
            if not away:
                away = True
                yield STORE_AWAY
            await asyncio.sleep(UNAVAILABLE_SECONDS)
            continue
        except InvalidInput:
            # The sequence went back under the stream (the store was restored from an
            # older backup): the stream ends; its client's reconnection from its last id
            # is refused, saying why (ADR-0145).
            return
        if away:
            away = False
            yield STORE_BACK
        if page.changes:
            # One write per page: between two writes the server hears of a client that
            # went away, so a dropped client costs no burst of failed sends.
            yield b"".join(_change(change) for change in page.changes)
        if page.position > position:
            position = page.position
            continue
        if not await heads.wait_past(position, KEEPALIVE_SECONDS) and not heads.closed:
            yield b": keepalive\n\n"


def _change(change: Change) -> bytes:
    data = orjson.dumps(change.json()).decode()
    return f"id: {change.position}\nevent: change\ndata: {data}\n\n".encode()


def _response(
    request: Request, wc: WorkCenter, start: int, work_item_id: UUID | None
) -> StreamingResponse:
    return StreamingResponse(
        _events(wc, watcher(request), start, work_item_id),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


@router.get("/stream", response_class=StreamingResponse, responses=EVENTS)
def stream_all(
    wc: Center,
    request: Request,
    after: Annotated[int | None, Query(ge=0)] = None,
    last_event_id: Annotated[str | None, Header(pattern=POSITION)] = None,
) -> StreamingResponse:
    """Every change of every item, after ``Last-Event-ID`` (or ``after``, or now)."""
    return _response(request, wc, _start(last_event_id, after, wc.changes.head), None)


@router.get(
    "/work-items/{item_id}/stream",
    response_class=StreamingResponse,
    responses=EVENTS | contract.problems(404, 422),
)
def stream_item(
    wc: Center,
    request: Request,
    item_id: str,
    after: Annotated[int | None, Query(ge=0)] = None,
    last_event_id: Annotated[str | None, Header(pattern=POSITION)] = None,
) -> StreamingResponse:
    """The changes of one item (its Actions', ledger's and conversation's too)."""
    work_item_id = wc.work_item(inputs.aggregate_id(item_id, "WorkItem")).id
    return _response(request, wc, _start(last_event_id, after, wc.changes.head), work_item_id)
