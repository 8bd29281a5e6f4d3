"""What every route is given: the service facade the application was built around."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from workcenter.application import WorkCenter


def center(request: Request) -> WorkCenter:
    wc: WorkCenter = request.app.state.center
    return wc


Center = Annotated[WorkCenter, Depends(center)]
