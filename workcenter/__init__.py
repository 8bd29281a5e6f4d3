"""Workcenter: a durable, event-sourced work ledger for AI-agent orchestration."""

from workcenter.adapters.persistence import StoreClosed
from workcenter.adapters.postgres_connection import PoolBusy, StoreDisconnected
from workcenter.application import Claim, SystemClock, WorkCenter, WriteContention
from workcenter.bootstrap import StoreUnavailable
from workcenter.domain.errors import (
    CommandRefused,
    InvalidInput,
    NotFound,
    ResourceStopError,
    StaleRun,
    VersionConflict,
    WorkcenterError,
)
from workcenter.domain.outcome import RunReport

__all__ = [
    "Claim",
    "CommandRefused",
    "InvalidInput",
    "NotFound",
    "PoolBusy",
    "ResourceStopError",
    "RunReport",
    "StaleRun",
    "StoreClosed",
    "StoreDisconnected",
    "StoreUnavailable",
    "SystemClock",
    "VersionConflict",
    "WorkCenter",
    "WorkcenterError",
    "WriteContention",
]
