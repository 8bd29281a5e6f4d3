"""What a load balancer's probe and an operator's monitor ask of a server (ADR-0142).

``/api/health`` answers whether this server can read its store now: 200, or the
store's 503 problem. It needs no token (a probe has none) and says nothing else of the
store. ``/api/status`` is an operator's view of the whole store, read like any other
read (a token with the user scope): the head of the event sequence, each read model's
position and lag, and the Runs held under live and lapsed leases.

Found by acceptance testing: no path answered a probe, and ``/`` (the dashboard's page)
answered 200 while the database was down.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import APIRouter

from workcenter.adapters.http import contract
from workcenter.adapters.http.deps import Center
from workcenter.adapters.http.responses import JSONBytes
from workcenter.adapters.http.schemas import Health, StoreStatus
from workcenter.adapters.persistence import StoreUnavailable
from workcenter.domain.errors import WorkcenterError

router = APIRouter(prefix="/api", tags=["health"], default_response_class=JSONBytes)

log = logging.getLogger("workcenter.http")
UNCACHED = {"Cache-Control": "no-store"}


@router.get("/health", response_model=Health, responses=contract.problems(503))
def health(wc: Center) -> JSONBytes:
    """200 when the store answers a read now, else the store's 503 problem; no token
    needed. For a load balancer's or an orchestrator's readiness probe."""
    try:
        wc.changes.head()
    except WorkcenterError:
        raise
    except Exception as error:
        # A store that answers and cannot be read (its schema renamed away, its file
        # damaged) is not ready either: a 503, where it was a 500 (found by acceptance
        # testing, ADR-0145).
        log.warning("the store could not be read for /api/health: %s", type(error).__name__)
        raise StoreUnavailable(
            f"the store could not be read ({type(error).__name__}): see the server's log"
        ) from error
    return JSONBytes({"status": "ok"}, headers=UNCACHED)


@router.get("/status", response_model=StoreStatus, responses=contract.problems(503))
def status(wc: Center) -> JSONBytes:
    """The head of the event sequence, each read model's position and lag (in events),
    and the Runs held under live and lapsed leases (a lapsed one that stays means no
    worker, claim or server watch recovers it)."""
    views = wc.maintenance.projection_status()
    leases = wc.maintenance.leases().json()
    body: dict[str, Any] = {
        "head": max((view.head for view in views), default=wc.changes.head()),
        "views": [
            {"name": view.name, "position": view.position, "lag": view.lag} for view in views
        ],
        "leases": {
            "live": leases["live"],
            "lapsed": leases["lapsed"],
            "oldestLapse": leases["oldest_lapse"],
        },
    }
    return JSONBytes(body, headers=UNCACHED)
