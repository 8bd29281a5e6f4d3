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

from pydantic import Field

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
CHECKPOINT_EVENTS = 16
TOOL_NAME_LIMIT = 128
TOOL_SUMMARY_LIMIT = 500
# A worker may send its whole tool log; longer than this is refused, not kept.
CHECKPOINT_INPUT_LIMIT = 1_000
# JSON numbers a browser reads exactly.
COUNTER_LIMIT = 2**53 - 1
DEFERRED_REASON = "resource_deferred/workspace_busy"
# A claim over HTTP whose client left before the answer (ADR-0098).
UNANSWERED_REASON = "resource_deferred/claim_unanswered"


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


class ToolEvent(Immutable):
    """One tool call of a Run's checkpoint: which tool, whether it failed, a short note."""

    tool: str
    is_error: bool = False
    summary: str = ""


class RunProgress(Immutable):
    """What a Run had done when its worker stopped it gracefully (interrupt), with its
    checkpoint: the last ``CHECKPOINT_EVENTS`` tool events (lifecycle.md 1.3). Absent
    when empty, so progress without one is stored exactly as before it existed."""

    summary: str = ""
    response: str = ""
    counters: RunCounters = RunCounters()
    checkpoint: tuple[ToolEvent, ...] = Field(default=(), exclude_if=lambda events: not events)


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
    # The id its worker chose for the claim (ADR-0114): a retried claim answers this Run.
    # Absent when None, so a Run claimed without one is kept exactly as before.
    client_claim_id: str | None = Field(default=None, exclude_if=lambda value: value is None)


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


def _text(raw: Mapping[str, Any], key: str, limit: int, where: str = "progress") -> str:
    value = raw.get(key, "")
    name = f"{where}.{key}"
    if not isinstance(value, str):
        raise InvalidInput(f"{name} must be a string")
    encodable(value, name)
    if len(value) > limit:
        raise InvalidInput(f"{name} is {len(value)} characters; at most {limit}")
    return value.strip() if key == "summary" else value


def parse_progress(raw: object) -> RunProgress | None:
    """A worker's final progress: ``{summary?, response?, stats?: {executionStats keys},
    checkpoint?: [{tool, isError?, summary?}]}``.

    Malformed progress is refused (nothing is written), never cut or guessed.
    """
    if raw is None:
        return None
    if isinstance(raw, RunProgress):
        return raw
    if not isinstance(raw, Mapping):
        raise InvalidInput("progress must be an object")
    unknown = sorted(str(k) for k in raw if k not in ("summary", "response", "stats", "checkpoint"))
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
        checkpoint=_checkpoint(raw.get("checkpoint", [])),
    )


def _checkpoint(raw: object) -> tuple[ToolEvent, ...]:
    """``[{tool, isError?, summary?}]``, oldest first; the last ``CHECKPOINT_EVENTS`` are
    kept. Any malformed event refuses the whole progress, kept or not."""
    if not isinstance(raw, list | tuple):
        raise InvalidInput("progress.checkpoint must be a list of tool events")
    if len(raw) > CHECKPOINT_INPUT_LIMIT:
        raise InvalidInput(f"progress.checkpoint holds more than {CHECKPOINT_INPUT_LIMIT} events")
    events = []
    for n, event in enumerate(raw):
        where = f"progress.checkpoint[{n}]"
        if not isinstance(event, Mapping):
            raise InvalidInput(f"{where} must be an object")
        unknown = sorted(str(k) for k in event if k not in ("tool", "isError", "summary"))
        if unknown:
            raise InvalidInput(f"{where} has unknown fields: {', '.join(unknown)}")
        tool = _text(event, "tool", TOOL_NAME_LIMIT, where).strip()
        if not tool:
            raise InvalidInput(f"{where}.tool is required")
        is_error = event.get("isError", False)
        if not isinstance(is_error, bool):
            raise InvalidInput(f"{where}.isError must be true or false")
        summary = _text(event, "summary", TOOL_SUMMARY_LIMIT, where)
        events.append(ToolEvent(tool=tool, is_error=is_error, summary=summary))
    return tuple(events[-CHECKPOINT_EVENTS:])


def counters_view(run: Run) -> dict[str, int]:
    """A Run's recorded counters under the browser's keys (all 0 when it recorded none)."""
    counters = run.progress.counters if run.progress is not None else RunCounters()
    return {key: getattr(counters, field) for key, field in _COUNTER_KEYS.items()}
