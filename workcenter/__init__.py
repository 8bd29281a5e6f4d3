"""Workcenter: a durable, event-sourced work ledger for AI-agent orchestration."""

from workcenter.adapters.persistence import StoreClosed
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
    "ResourceStopError",
    "RunReport",
    "StaleRun",
    "StoreClosed",
    "StoreUnavailable",
    "SystemClock",
    "VersionConflict",
    "WorkCenter",
    "WorkcenterError",
    "WriteContention",
]
