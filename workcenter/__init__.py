"""Workcenter: a durable, event-sourced work ledger for AI-agent orchestration.

What an embedding service needs is importable from here: the facade (``WorkCenter``),
the worker loop, every typed error the public API raises (all ``WorkcenterError``), and
the types its commands and reads return, for annotations (the package ships
``py.typed``)."""

from workcenter.adapters.cipher import StoreKeyRefused
from workcenter.adapters.metered import MeteredProvider
from workcenter.adapters.persistence import ServerNotAnswering, StoreClosed
from workcenter.adapters.postgres_connection import PoolBusy, StoreDisconnected
from workcenter.adapters.sqlite_locks import StoreFull
from workcenter.adapters.worker import run_worker
from workcenter.adapters.worker_run import Executor, WorkerStats
from workcenter.application import Claim, SystemClock, WorkCenter, WriteContention
from workcenter.bootstrap import StoreUnavailable
from workcenter.domain.action import ActionState
from workcenter.domain.conversation import ConversationState
from workcenter.domain.errors import (
    ClaimIdUsed,
    CommandRefused,
    InvalidInput,
    NotFound,
    ProviderFailed,
    RequestIdUsed,
    ResourceStopError,
    StaleRun,
    UndecodableEvent,
    VersionConflict,
    WorkcenterError,
)
from workcenter.domain.goal_progress import GoalProgress
from workcenter.domain.outcome import RunReport
from workcenter.domain.resource_ledger import Admission, LedgerState
from workcenter.domain.work_item import WorkItemState
from workcenter.projections.audit import AuditRow
from workcenter.service_layer.handlers.coordinator import PostedMessage
from workcenter.service_layer.handlers.coordinator_step import StepResult
from workcenter.service_layer.history.hash_chain import HistoryConflict, Verdict

__all__ = [
    "ActionState",
    "Admission",
    "AuditRow",
    "Claim",
    "ClaimIdUsed",
    "CommandRefused",
    "ConversationState",
    "Executor",
    "GoalProgress",
    "HistoryConflict",
    "InvalidInput",
    "LedgerState",
    "MeteredProvider",
    "NotFound",
    "PoolBusy",
    "PostedMessage",
    "ProviderFailed",
    "RequestIdUsed",
    "ResourceStopError",
    "RunReport",
    "ServerNotAnswering",
    "StaleRun",
    "StepResult",
    "StoreClosed",
    "StoreDisconnected",
    "StoreFull",
    "StoreKeyRefused",
    "StoreUnavailable",
    "SystemClock",
    "UndecodableEvent",
    "Verdict",
    "VersionConflict",
    "WorkCenter",
    "WorkItemState",
    "WorkcenterError",
    "WorkerStats",
    "WriteContention",
    "run_worker",
]
