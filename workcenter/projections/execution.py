"""Execution stats and the whitelisted ``executionControl`` snapshot (read-models.md 2.2,
resource-ledger.md 4). Pure: ``now`` is passed in, never read from a clock.

Whether a reserved request is in flight or unknown depends on Run leases against
``now``, so it is computed here, at query time, and never folded into a read model.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from datetime import datetime
from typing import Any, Final, Literal, cast, get_args
from uuid import UUID

from workcenter.domain import lifecycle
from workcenter.domain.action import ActionState, Run
from workcenter.domain.bounds import saturated
from workcenter.domain.resource_ledger import LedgerState, Reservation, turn_of_request
from workcenter.domain.run import counters_view
from workcenter.domain.work_item import WorkItemState
from workcenter.projections import dto_models as dtos
from workcenter.projections.sanitize import cnt, epoch_ms, sanitize_diagnostic, truncate_utf8

StatsKey = Literal[
    "llmRequestCount", "loopCount", "toolCount", "inputTokens", "outputTokens",
    "cacheReadTokens", "cacheWriteTokens", "totalTokens",
]  # fmt: skip
TokenKey = Literal[
    "inputTokens", "outputTokens", "cacheReadTokens", "cacheWriteTokens", "totalTokens"
]  # fmt: skip
StopDetail = Literal[
    "runId", "actionId", "turnId", "estimatedNextTokens", "attempts", "originalMaxAttempts",
    "effectiveMaxAttempts", "failures",
]  # fmt: skip
STATS_KEYS: tuple[StatsKey, ...] = get_args(StatsKey)
_RUN_ONLY_KEYS: tuple[StatsKey, ...] = ("loopCount", "toolCount")
# The ledger's usage fields behind the five token keys.
_TOKEN_FIELDS: Mapping[TokenKey, str] = {
    "inputTokens": "input_tokens",
    "outputTokens": "output_tokens",
    "cacheReadTokens": "cache_read_tokens",
    "cacheWriteTokens": "cache_write_tokens",
    "totalTokens": "total_tokens",
}
# The only stop details a browser sees (both spellings accepted), as camelCase.
_SNAKE_STOP_DETAILS: dict[str, StopDetail] = {
    "run_id": "runId",
    "action_id": "actionId",
    "turn_id": "turnId",
    "estimated_next_tokens": "estimatedNextTokens",
    "attempts": "attempts",
    "original_max_attempts": "originalMaxAttempts",
    "effective_max_attempts": "effectiveMaxAttempts",
    "failures": "failures",
}
_STOP_DETAILS: Mapping[str, StopDetail] = _SNAKE_STOP_DETAILS | {
    camel: camel for camel in get_args(StopDetail)
}
MAX_ACTION_ATTEMPTS = 64
TOKEN_ACCOUNTING = "estimated_admission_reported_usage_unknown_retained"

RunStats = Mapping[UUID, Mapping[str, Any]]


def _usage_value(row: Reservation, field: str) -> int:
    return cnt(getattr(row.usage, field)) if row.usage is not None else 0


def execution_stats(
    runs: Iterable[Run],
    ledger: LedgerState | None = None,
    *,
    whole_item: bool = False,
    run_stats: RunStats | None = None,
) -> dtos.ExecutionStats:
    """The eight stats keys over ``runs``, every value finite and >= 0.

    Run sums come from ``run_stats`` (per-Run counters, keyed by Run id) or else from
    what the Run recorded itself (an interrupted Run's final progress; else 0). With a
    ledger, ``llmRequestCount`` and the token keys are *replaced* by the ledger's rows:
    for ``whole_item`` all of them (Coordinator calls, reserved and unknown requests
    included), otherwise the rows of these Runs. ``loopCount`` and ``toolCount`` stay Run sums.
    """
    run_list = list(runs)
    stats: dtos.ExecutionStats = {
        "llmRequestCount": 0, "loopCount": 0, "toolCount": 0, "inputTokens": 0,
        "outputTokens": 0, "cacheReadTokens": 0, "cacheWriteTokens": 0, "totalTokens": 0,
    }  # fmt: skip
    # With a ledger only the loop and tool counts are the Runs' own.
    summed = STATS_KEYS if ledger is None else _RUN_ONLY_KEYS
    known = run_stats or {}
    for run in run_list:
        recorded = known.get(run.id)
        if not recorded:
            if run.progress is None:
                continue  # the Run recorded no counters: it adds 0 to each
            recorded = counters_view(run)
        for key in summed:
            stats[key] = saturated(stats[key] + cnt(recorded.get(key)))
    if ledger is not None:
        if whole_item:
            rows: Collection[Reservation] = ledger.reservations.values()
        else:
            run_ids = {run.id for run in run_list}
            rows = [row for row in ledger.reservations.values() if row.run_id in run_ids]
        stats["llmRequestCount"] = len(rows)
        for row in rows:
            if row.usage is not None:
                for key, field in _TOKEN_FIELDS.items():
                    stats[key] = saturated(stats[key] + cnt(getattr(row.usage, field)))
    return stats


def _usage(
    rows: Iterable[Reservation], in_flight: Collection[UUID], dispatching: Collection[str]
) -> dtos.Usage:
    """One usage breakdown (resource-ledger.md 4). ``reservedTokens`` is part of
    ``chargedTokens``; a reserved row is in flight while its Run runs under an
    unexpired lease, or its Coordinator turn is dispatching, else it counts as unknown."""
    usage: dtos.Usage = {
        "llmRequestCount": 0, "inputTokens": 0, "outputTokens": 0, "cacheReadTokens": 0,
        "cacheWriteTokens": 0, "totalTokens": 0, "chargedTokens": 0, "reservedTokens": 0,
        "unknownRequests": 0, "inFlightRequests": 0,
    }  # fmt: skip
    for row in rows:
        usage["llmRequestCount"] += 1
        usage["chargedTokens"] = saturated(usage["chargedTokens"] + cnt(row.charged_tokens))
        for key, field in _TOKEN_FIELDS.items():
            usage[key] = saturated(usage[key] + _usage_value(row, field))
        if row.status == "reported":
            continue
        usage["reservedTokens"] = saturated(usage["reservedTokens"] + cnt(row.charged_tokens))
        live = row.run_id in in_flight or turn_of_request(row.request_id) in dispatching
        if row.status == "reserved" and live:
            usage["inFlightRequests"] += 1
        else:
            usage["unknownRequests"] += 1
    return usage


def _stop_reason(ledger: LedgerState) -> dtos.StopReason | None:
    stop = ledger.stop_reason
    if stop is None:
        return None
    reason: dtos.StopReason = {"code": truncate_utf8(stop.code, 64), "at": epoch_ms(stop.at)}
    for key, value in sorted(stop.details.items()):
        name = _STOP_DETAILS.get(key)
        if name is None or name in reason or value is None:
            continue  # free-form details never reach a browser
        if isinstance(value, str):
            reason[name] = sanitize_diagnostic(value, 256)
        elif isinstance(value, int | float) and not isinstance(value, bool):
            reason[name] = cnt(value)
    return reason


def data_revision(
    item: WorkItemState,
    actions: Iterable[ActionState],
    ledger: LedgerState,
    *,
    now: datetime,
) -> int:
    """``dataRevision``: computed from what the snapshot is served from, never stored.

    Twice the sum of the versions of the item, all its Actions and its ledger, plus
    the number of Runs still ``running`` whose lease has expired at ``now``. Every
    event adds 2. A lease expiring (no event: a request goes from in flight to
    unknown) adds 1, and the event that later ends that Run adds 2 while taking the
    1 back. So the number rises with every change a browser can see (and with some
    it cannot), and never falls while ``now`` does not go back (ADR-0015).
    """
    versions = item.version + ledger.version
    expired = 0
    for action in actions:
        versions += action.version
        run = action.current_run
        if run is not None and run.status == "running" and run.expires_at <= now:
            expired += 1
    return 2 * versions + expired


# The limits' names in the snapshot (and in the HTTP API's extend).
LIMIT_KEYS: Final = {
    "max_requests": "maxRequests",
    "max_tokens": "maxTokens",
    "max_run_requests": "maxRunRequests",
    "max_action_attempts": "maxActionAttempts",
    "max_coordinator_failures": "maxCoordinatorFailures",
}


def execution_control(
    ledger: LedgerState,
    actions: Mapping[UUID, ActionState] | Iterable[ActionState],
    *,
    now: datetime,
    dispatching: Collection[str] = (),
    data_revision: int | None = None,
    done: bool = False,
) -> dtos.ExecutionControl:
    """The ledger snapshot, whitelisted field by field, ``actionAttempts`` capped at 64.

    ``revision`` is the ledger's control version (what extend and resume expect).
    ``dataRevision`` comes from the caller (``data_revision`` computes it from the states).
    ``dispatching`` names the Coordinator's provider turns being sent (their requests
    are in flight, resource-ledger.md 2; ``ConversationState.dispatching``). A
    ``done`` item is never resumed (ADR-0133): no ``resumeNeeds``, whatever its stop.
    """
    values = actions.values() if isinstance(actions, Mapping) else actions
    ordered = sorted(values, key=lambda a: (a.sequence, a.id))
    live_runs = {
        run.id
        for action in ordered
        for run in action.runs
        if run.status == "running" and run.expires_at > now
    }
    rows = list(ledger.reservations.values())
    attempts: list[dtos.ActionAttempts] = [
        {
            "actionId": str(action.id),
            "attempts": action.counted_attempts,
            "originalMaxAttempts": cnt(action.max_attempts),
            "effectiveMaxAttempts": cnt(ledger.effective_max_attempts(action.max_attempts)),
        }
        for action in ordered[:MAX_ACTION_ATTEMPTS]
    ]
    limits = ledger.limits
    control: dtos.ExecutionControl = {
        "revision": cnt(ledger.control_version),
        "limits": {
            "maxRequests": cnt(limits.max_requests),
            "maxTokens": cnt(limits.max_tokens),
            "maxRunRequests": cnt(limits.max_run_requests),
            "maxActionAttempts": cnt(limits.max_action_attempts),
            "maxCoordinatorFailures": cnt(limits.max_coordinator_failures),
        },
        "actionAttemptsExtension": cnt(ledger.attempts_extension),
        "actionAttempts": attempts,
        "usage": _usage(rows, live_runs, dispatching),
        "breakdown": {
            "coordinator": _usage(
                (r for r in rows if r.kind == "coordinator"), live_runs, dispatching
            ),
            "actions": _usage((r for r in rows if r.kind == "action"), live_runs, dispatching),
        },
        "coordinatorFailures": cnt(ledger.coordinator_failures),
        "retryAfter": epoch_ms(ledger.retry_after) if ledger.retry_after else 0,
        "tokenAccounting": TOKEN_ACCOUNTING,
    }
    if data_revision is not None:
        control["dataRevision"] = cnt(data_revision)
    if len(ordered) > MAX_ACTION_ATTEMPTS:
        control["omittedActionAttemptCount"] = len(ordered) - MAX_ACTION_ATTEMPTS
    stop = _stop_reason(ledger)
    if stop is not None:
        control["stopReason"] = stop
    if not done and (needs := resume_needs(ledger, ordered)):
        control["resumeNeeds"] = needs
    return control


def resume_needs(ledger: LedgerState, actions: Iterable[ActionState]) -> dtos.ResumeNeeds:
    """What a resume needs first, by the ledger's own rule (``lifecycle.resume_needs``):
    the page reads it instead of repeating the rule (ADR-0096)."""
    needs = lifecycle.resume_needs(ledger, actions)
    return cast(
        dtos.ResumeNeeds, {LIMIT_KEYS[name]: saturated(cnt(n)) for name, n in needs.items()}
    )
