"""HTTP's own optimistic concurrency: an ETag names the versions a client must echo back.

An item's ETag is ``"<item version>.<control version>"``: the WorkItem's version and
its ledger's control version, the two expected versions its commands take. A
command sends it back in ``If-Match``. As HTTP has it (RFC 9110 13.1.1), an ETag
that is no longer the item's current one is ``412 Precondition Failed``, as is an
If-Match that is not one ETag of this shape; a command without If-Match is ``428
Precondition Required``. Both are judged after the command's body has been checked
(ADR-0066): a body the document refuses is 422 whatever its If-Match. The versions
then go to the service as expected versions,
so a change that lands between this check and the command's write is judged by the
command's conflict class (ADR-0004), as for any caller (ADR-0030). A list's ETag is
the position of the event sequence it was read at: it names no version to echo.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Any
from uuid import UUID

from fastapi import Header

from workcenter.adapters.http.problems import PreconditionFailed, PreconditionRequired
from workcenter.application import WorkCenter

ITEM_TAG = re.compile(r'^"([0-9]{1,18})\.([0-9]{1,18})"$')


@dataclass(frozen=True)
class Seen:
    """The If-Match of a command, read once its body has been checked: a command whose
    body is refused is told so first, whatever its If-Match (the document's order)."""

    if_match: str | None

    def versions(self) -> tuple[int, int]:
        """(item version, control version) the client saw: ``PreconditionRequired``
        without If-Match, ``PreconditionFailed`` for one that is no item's ETag."""
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
                'If-Match must be one ETag of an item as this server sent it, such as "12.3"'
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
        seen = item_etag(*self.versions())
        current = item_etag(*wc.web_reads.versions(work_item_id))
        if current != seen:
            raise PreconditionFailed(
                f"the item changed since {seen}: its ETag is now {current}; read it "
                "again and decide again",
                current_etag=current,
            )


def item_etag(item_version: int, control_version: int) -> str:
    return f'"{item_version}.{control_version}"'


def detail_etag(dto: dict[str, Any]) -> str:
    """The ETag of a detail DTO: its own planRevision (the item version) and its
    execution control's revision (the ledger's control version)."""
    control = dto.get("executionControl") or {}
    return item_etag(int(dto.get("planRevision", 0)), int(control.get("revision", 0)))


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
