"""The Run entity of an Action: one execution attempt, what it reported, what it
recorded when it stopped early, and the user input queued for it.

These are values inside an Action's state and events; the Action aggregate
(``action.py``) decides and folds them.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Literal
from uuid import UUID, uuid5

from workcenter.domain.errors import InvalidInput
from workcenter.domain.evidence import AcceptanceCheck, EvidenceItem
from workcenter.domain.inputs import encodable
from workcenter.domain.model import Immutable

RunStatus = Literal[
    "running",
    "completed",
    "waiting",
    "retryable",
    "failed",
    "interrupted",
    "cancelled",
    "superseded",
]
ReviewDecision = Literal["approved", "changes_requested"]

RESPONSE_LIMIT = 65_536
SUMMARY_LIMIT = 8_000
INPUT_LIMIT = 8_000
# JSON numbers a browser reads exactly.
COUNTER_LIMIT = 2**53 - 1
DEFERRED_REASON = "resource_deferred/workspace_busy"


class RunResult(Immutable):
    """What a finished Run reported, after normalisation (lifecycle.md 3.4)."""

    summary: str = ""
    response: str = ""
    evidence: tuple[EvidenceItem, ...] = ()
    outputs: tuple[EvidenceItem, ...] = ()
    checks: tuple[AcceptanceCheck, ...] = ()
    waiting_reason: str | None = None
    error: str | None = None
    failure_kind: str | None = None
    failure_code: str | None = None
    review_decision: ReviewDecision | None = None


class RunCounters(Immutable):
    """A Run's own execution stats (the browser's ``executionStats`` keys)."""

    llm_request_count: int = 0
    loop_count: int = 0
    tool_count: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    total_tokens: int = 0


class RunProgress(Immutable):
    """What a Run had done when its worker stopped it gracefully (interrupt)."""

    summary: str = ""
    response: str = ""
    counters: RunCounters = RunCounters()


class QueuedInput(Immutable):
    """User input sent to a running Action, waiting to be consumed by a Run."""

    id: UUID
    text: str
    queued_for_run_id: UUID
    consumed_by_run_id: UUID | None = None


class Run(Immutable):
    """One execution attempt. Identity fields never change; once it leaves
    ``running`` nothing about it changes."""

    id: UUID
    ordinal: int
    worker: str
    owner_boot_id: str
    lease_epoch: int
    started_at: datetime
    expires_at: datetime
    generation: int
    spec_hash: str
    attempt: int
    contract_revision: int
    status: RunStatus = "running"
    ended_at: datetime | None = None
    end_reason: str | None = None
    result: RunResult | None = None
    progress: RunProgress | None = None
    # A deferred Run gave its attempt back: it counts against no attempt limit.
    deferred: bool = False


class RunRef(Immutable):
    """What a worker holds for a claimed Run: enough to be fenced."""

    action_id: UUID
    run_id: UUID
    boot_id: str
    lease_epoch: int


def run_id_for(action_id: UUID, ordinal: int) -> UUID:
    return uuid5(action_id, f"run/{ordinal}")


_COUNTER_KEYS: Mapping[str, str] = {
    "llmRequestCount": "llm_request_count",
    "loopCount": "loop_count",
    "toolCount": "tool_count",
    "inputTokens": "input_tokens",
    "outputTokens": "output_tokens",
    "cacheReadTokens": "cache_read_tokens",
    "cacheWriteTokens": "cache_write_tokens",
    "totalTokens": "total_tokens",
}


def _text(raw: Mapping[str, Any], key: str, limit: int) -> str:
    value = raw.get(key, "")
    if not isinstance(value, str):
        raise InvalidInput(f"progress.{key} must be a string")
    encodable(value, f"progress.{key}")
    if len(value) > limit:
        raise InvalidInput(f"progress.{key} is {len(value)} characters; at most {limit}")
    return value.strip() if key == "summary" else value


def parse_progress(raw: object) -> RunProgress | None:
    """A worker's final progress: ``{summary?, response?, stats?: {executionStats keys}}``.

    Malformed progress is refused (nothing is written), never cut or guessed.
    """
    if raw is None:
        return None
    if isinstance(raw, RunProgress):
        return raw
    if not isinstance(raw, Mapping):
        raise InvalidInput("progress must be an object")
    unknown = sorted(str(k) for k in raw if k not in ("summary", "response", "stats"))
    if unknown:
        raise InvalidInput(f"progress has unknown fields: {', '.join(unknown)}")
    stats = raw.get("stats", {})
    if not isinstance(stats, Mapping):
        raise InvalidInput("progress.stats must be an object")
    counters: dict[str, int] = {}
    for key, value in stats.items():
        field = _COUNTER_KEYS.get(key) or (key if key in _COUNTER_KEYS.values() else None)
        if field is None:
            raise InvalidInput(f"progress.stats has an unknown key {key!r}")
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= COUNTER_LIMIT:
            raise InvalidInput(f"progress.stats.{key} must be an integer 0..{COUNTER_LIMIT}")
        counters[field] = value
    return RunProgress(
        summary=_text(raw, "summary", SUMMARY_LIMIT),
        response=_text(raw, "response", RESPONSE_LIMIT),
        counters=RunCounters(**counters),
    )


def counters_view(run: Run) -> dict[str, int]:
    """A Run's recorded counters under the browser's keys (all 0 when it recorded none)."""
    counters = run.progress.counters if run.progress is not None else RunCounters()
    return {key: getattr(counters, field) for key, field in _COUNTER_KEYS.items()}
