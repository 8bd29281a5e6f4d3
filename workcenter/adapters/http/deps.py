"""What every route is given: the service facade the application was built around, and
who sent the request when its token names its holder."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from workcenter.adapters.http.guard import HOLDER, Holder
from workcenter.application import WorkCenter
from workcenter.domain import actor
from workcenter.domain.actor import Actor


def center(request: Request) -> WorkCenter:
    wc: WorkCenter = request.app.state.center
    return wc


Center = Annotated[WorkCenter, Depends(center)]


def holder(request: Request) -> Holder | None:
    named: Holder | None = request.scope.get("state", {}).get(HOLDER)
    return named


def requester(request: Request) -> Actor | None:
    """The actor a user's command records: the named holder of the token that sent it
    (``user:alice``, ``operator:bob``; ADR-0143), else None, the service's default
    (``user``). A worker's token never reaches a user's command (the guard's scopes)."""
    named = holder(request)
    return actor.parse(f"{named.scope}:{named.name}") if named is not None else None


Requester = Annotated[Actor | None, Depends(requester)]
