"""HTTP's own optimistic concurrency: an ETag names the versions a client must echo back.

An item read's ETag is ``"<item version>.<control version>.<digest>"``: the WorkItem's
version and its ledger's control version, the two expected versions its commands take,
and a digest of the bytes served, so that a ``304`` answers only a client that holds
those very bytes (a message or a ledger write changes what the reads show and no
version, ADR-0079). A command sends the ETag back in ``If-Match``, and only its
versions are checked; the versions alone, ``"<item version>.<control version>"``,
serve as well. As HTTP has it (RFC 9110 13.1.1), an ETag
that is no longer the item's current one is ``412 Precondition Failed``, as is an
If-Match that is not one ETag of this shape; a command without If-Match is ``428
Precondition Required``. Both are judged after the command's body has been checked
(ADR-0066): a body the document refuses is 422 whatever its If-Match. The versions
then go to the service as expected versions,
so a change that lands between this check and the command's write is judged by the
command's conflict class (ADR-0004), as for any caller (ADR-0030); one that makes the
service refuse the command is answered 412 as a stale If-Match is (ADR-0138). A list's
ETag is
the position of the event sequence it was read at: it names no version to echo.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Annotated, Any
from uuid import UUID

import orjson
from fastapi import Header

from workcenter.adapters.http.problems import PreconditionFailed, PreconditionRequired
from workcenter.adapters.http.responses import JSONBytes
from workcenter.application import WorkCenter
from workcenter.domain.errors import CommandRefused, VersionConflict

# A read's own clock (the timeline's ``now``, for the ages it shows): not what the store
# holds, so left out of the digest, or no read of it would ever be answered 304.
READ_CLOCK = "now"
ITEM_TAG = re.compile(r'^"([0-9]{1,18})\.([0-9]{1,18})(?:\.[0-9a-f]{16})?"$')


@dataclass(frozen=True)
class Seen:
    """The If-Match of a command, read once its body has been checked: a command whose
    body is refused is told so first, whatever its If-Match (the document's order)."""

    if_match: str | None

    def versions(self, current_etag: str | None = None) -> tuple[int, int]:
        """(item version, control version) the client saw: ``PreconditionRequired``
        without If-Match, ``PreconditionFailed`` for one that is no item's ETag (with
        ``current_etag``, the item's, when the caller has read it)."""
        if self.if_match is None or not self.if_match.strip():
            raise PreconditionRequired(
                "this command needs If-Match with the ETag of the item as you last read it"
            )
        value = self.if_match.strip()
        if value == "*":
            raise PreconditionRequired("If-Match: * names no version; send the item's ETag")
        match = ITEM_TAG.fullmatch(value)
        if match is None:
            raise PreconditionFailed(
                "If-Match must be one ETag of an item as this server sent it, such as"
                ' "12.3.0f1e2d3c4b5a6978", or its versions alone, "12.3"',
                current_etag=current_etag,
            )
        return int(match[1]), int(match[2])

    @property
    def item_version(self) -> int:
        return self.versions()[0]

    @property
    def control_version(self) -> int:
        return self.versions()[1]

    def check(self, wc: WorkCenter, work_item_id: UUID) -> None:
        """``PreconditionFailed`` unless these are still the item's versions
        (``NotFound`` if there is no such item)."""
        # Read first, so that a 412 for a malformed If-Match carries the item's ETag as
        # every 412 does (found by acceptance testing, ADR-0145).
        current = item_etag(*wc.web_reads.versions(work_item_id))
        seen = item_etag(*self.versions(current))
        if current != seen:
            raise PreconditionFailed(
                f"the item changed since {seen}: its versions are now {current}; read it "
                "again and decide again",
                current_etag=current,
            )

    @contextmanager
    def held(self, wc: WorkCenter, work_item_id: UUID) -> Iterator[None]:
        """``check``, then the command in the block: one the service refused because
        another command changed the item after the check (two people answering one
        Action at the same moment) is ``PreconditionFailed`` with the current ETag, as a
        stale If-Match is, not the service's refusal of a state its caller never saw
        (found by acceptance testing, ADR-0138: the loser got 409, or 412 without an
        ETag)."""
        self.check(wc, work_item_id)
        try:
            yield
        except (CommandRefused, VersionConflict) as refused:
            seen = item_etag(*self.versions())
            current = item_etag(*wc.web_reads.versions(work_item_id))
            if current == seen:
                raise
            raise PreconditionFailed(
                f"the item changed while this command was decided: its versions are now"
                f" {current}; read it again and decide again ({refused})",
                current_etag=current,
            ) from refused


def item_etag(item_version: int, control_version: int, served: bytes | None = None) -> str:
    """The versions a command echoes back, and a digest of ``served``, the body read."""
    if served is None:
        return f'"{item_version}.{control_version}"'
    digest = hashlib.blake2b(served, digest_size=8).hexdigest()
    return f'"{item_version}.{control_version}.{digest}"'


def detail_versions(dto: dict[str, Any]) -> tuple[int, int]:
    """The versions a detail DTO shows: its own planRevision (the item version) and its
    execution control's revision (the ledger's control version)."""
    control = dto.get("executionControl") or {}
    return int(dto.get("planRevision", 0)), int(control.get("revision", 0))


def item_read(
    body: Any,
    versions: tuple[int, int],
    *,
    status_code: int = 200,
    cache: str = "no-cache",
    headers: Mapping[str, str] | None = None,
) -> JSONBytes:
    """``body`` served with its item ETag (the versions, and the digest of its bytes).
    Reads say ``no-cache`` (always revalidate: the same bytes can show a lease that has
    since expired), command answers ``no-store``."""
    response = JSONBytes(
        body, status_code=status_code, headers={"Cache-Control": cache, **(headers or {})}
    )
    served = bytes(response.body)
    if isinstance(body, dict) and READ_CLOCK in body:
        served = orjson.dumps({key: value for key, value in body.items() if key != READ_CLOCK})
    response.headers["ETag"] = item_etag(*versions, served=served)
    return response


def list_etag(position: int) -> str:
    return f'"p{position}"'


def seen(
    if_match: Annotated[
        str | None,
        Header(description="The item's ETag as you last read it (required: else 428)"),
    ] = None,
) -> Seen:
    """The If-Match of a command, as a dependency (judged by ``Seen.versions``)."""
    return Seen(if_match)
