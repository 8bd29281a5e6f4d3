"""The detail, summary and broadcast DTOs as built before ADR-0037, kept as the plain
path the faster one is compared with (tests/test_dto_levers.py): every list of an item's
Actions and Runs is derived where it is used, and every stat is summed key by key.
A copy of workcenter/projections/dto.py, execution.py and views.py at 47a3ce8, with
the unchanged helpers imported."""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

from workcenter.domain.action import ActionState, Brief, Run
from workcenter.domain.goal_progress import GoalProgress, current_run, derive_goal_progress
from workcenter.domain.resource_ledger import LedgerState, Reservation
from workcenter.domain.run import counters_view
from workcenter.domain.work_item import DELIVERY_TARGETS, FinalResult, WorkItemState
from workcenter.projections.budget import MAX_DTO_BYTES, cut_brief, enforce_budget
from workcenter.projections.dto import goal_progress_dto
from workcenter.projections.execution import (
    _LIMIT_FIELDS,
    _TOKEN_FIELDS,
    MAX_ACTION_ATTEMPTS,
    STATS_KEYS,
    TOKEN_ACCOUNTING,
    RunStats,
    _stop_reason,
)
from workcenter.projections.sanitize import (
    bounded_id,
    cnt,
    epoch_ms,
    failure_reason,
    ids,
    rev,
    sanitize_diagnostic_paths,
    sanitize_personal,
    sanitize_waiting_reason,
    truncate_utf8,
)
from workcenter.projections.views import (
    ACTION_STATUS_ORDER,
    BODY_BRIEF_LIMIT,
    BRIEF_LIMIT,
    CONTRACT_CRITERION_LIMIT,
    CRITERION_LIMIT,
    GOAL_LIMIT,
    LABEL_LIMIT,
    MAX_ATTACHMENTS,
    MAX_CRITERIA,
    MAX_MESSAGES,
    MAX_OUTPUTS,
    MAX_RESPONSE_EVIDENCE,
    MAX_RESPONSES,
    MAX_TURNS,
    OBJECTIVE_LIMIT,
    REF_LIMIT,
    RESPONSE_LIMIT,
    TERMINAL_STATUSES,
    TITLE_LIMIT,
    Actions,
    Message,
    action_failure_reason,
    action_ref,
    attachment_view,
    body_fields,
    canonical_result,
    content_summary,
    current_action,
    identity_runs,
    latest_finished_run,
    message_window,
    ordered_actions,
    text_of,
    visible_actions,
)


def _usage_value(row: Reservation, field: str) -> int:
    return cnt(getattr(row.usage, field)) if row.usage is not None else 0


def execution_stats(
    runs: Iterable[Run],
    ledger: LedgerState | None = None,
    *,
    whole_item: bool = False,
    run_stats: RunStats | None = None,
) -> dict[str, int]:
    """The eight stats keys over ``runs``, every value finite and >= 0.

    Run sums come from ``run_stats`` (per-Run counters, keyed by Run id) or else from
    what the Run recorded itself (an interrupted Run's final progress; else 0). With a
    ledger, ``llmRequestCount`` and the token keys are *replaced* by the ledger's rows:
    for ``whole_item`` all of them (Coordinator calls, reserved and unknown requests
    included), otherwise the rows of these Runs. ``loopCount`` and ``toolCount`` stay Run sums.
    """
    run_list = list(runs)
    stats = dict.fromkeys(STATS_KEYS, 0)
    for run in run_list:
        recorded = (run_stats or {}).get(run.id) or counters_view(run)
        for key in STATS_KEYS:
            stats[key] += cnt(recorded.get(key))
    if ledger is not None:
        run_ids = {run.id for run in run_list}
        rows = [row for row in ledger.reservations.values() if whole_item or row.run_id in run_ids]
        stats["llmRequestCount"] = len(rows)
        for key, field in _TOKEN_FIELDS.items():
            stats[key] = sum(_usage_value(row, field) for row in rows)
    return stats


def _usage(
    rows: Iterable[Reservation], in_flight: Collection[UUID], requests: Collection[str]
) -> dict[str, int]:
    """One usage breakdown (resource-ledger.md 4). ``reservedTokens`` is part of
    ``chargedTokens``; a reserved row is in flight while its Run runs under an
    unexpired lease (or the caller names it), else it counts as unknown."""
    usage = {"llmRequestCount": 0} | dict.fromkeys(_TOKEN_FIELDS, 0)
    usage |= {"chargedTokens": 0, "reservedTokens": 0, "unknownRequests": 0, "inFlightRequests": 0}
    for row in rows:
        usage["llmRequestCount"] += 1
        usage["chargedTokens"] += cnt(row.charged_tokens)
        for key, field in _TOKEN_FIELDS.items():
            usage[key] += _usage_value(row, field)
        if row.status == "reported":
            continue
        usage["reservedTokens"] += cnt(row.charged_tokens)
        live = row.run_id in in_flight or row.request_id in requests
        if row.status == "reserved" and live:
            usage["inFlightRequests"] += 1
        else:
            usage["unknownRequests"] += 1
    return usage


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


def execution_control(
    ledger: LedgerState,
    actions: Mapping[UUID, ActionState] | Iterable[ActionState],
    *,
    now: datetime,
    in_flight_request_ids: Collection[str] = (),
    data_revision: int | None = None,
) -> dict[str, Any]:
    """The ledger snapshot, whitelisted field by field, ``actionAttempts`` capped at 64.

    ``revision`` is the ledger's control version (what extend and resume expect).
    ``dataRevision`` comes from the caller (``data_revision`` computes it from the states).
    ``in_flight_request_ids`` names Coordinator requests known to be in flight.
    """
    values = actions.values() if isinstance(actions, Mapping) else actions
    ordered = sorted(values, key=lambda a: (a.sequence, a.id))
    live_runs = {
        run.id
        for action in ordered
        for run in action.runs
        if run.status == "running" and run.expires_at > now
    }
    requests = frozenset(in_flight_request_ids)
    rows = list(ledger.reservations.values())
    attempts = [
        {
            "actionId": str(action.id),
            "attempts": action.counted_attempts,
            "originalMaxAttempts": cnt(action.max_attempts),
            "effectiveMaxAttempts": cnt(ledger.effective_max_attempts(action.max_attempts)),
        }
        for action in ordered[:MAX_ACTION_ATTEMPTS]
    ]
    control: dict[str, Any] = {"revision": cnt(ledger.control_version)}
    if data_revision is not None:
        control["dataRevision"] = cnt(data_revision)
    control |= {
        "limits": {key: cnt(getattr(ledger.limits, f)) for key, f in _LIMIT_FIELDS.items()},
        "actionAttemptsExtension": cnt(ledger.attempts_extension),
        "actionAttempts": attempts,
    }
    if len(ordered) > MAX_ACTION_ATTEMPTS:
        control["omittedActionAttemptCount"] = len(ordered) - MAX_ACTION_ATTEMPTS
    control |= {
        "usage": _usage(rows, live_runs, requests),
        "breakdown": {
            "coordinator": _usage(
                (r for r in rows if r.kind == "coordinator"), live_runs, requests
            ),
            "actions": _usage((r for r in rows if r.kind == "action"), live_runs, requests),
        },
    }
    stop = _stop_reason(ledger)
    if stop is not None:
        control["stopReason"] = stop
    control |= {
        "coordinatorFailures": cnt(ledger.coordinator_failures),
        "retryAfter": epoch_ms(ledger.retry_after) if ledger.retry_after else 0,
        "tokenAccounting": TOKEN_ACCOUNTING,
    }
    return control


def body_action(item: WorkItemState, ordered: Sequence[ActionState]) -> ActionState | None:
    """The body action: the current one, else the one with the highest sequence."""
    return current_action(item, ordered) or (ordered[-1] if ordered else None)


def brief_view(brief: Brief, limit: int) -> dict[str, str]:
    return cut_brief(
        {
            "objective": sanitize_diagnostic_paths(brief.objective, limit),
            "approach": sanitize_diagnostic_paths(brief.approach, limit),
            "expectedOutcome": sanitize_diagnostic_paths(brief.expected_outcome, limit),
        },
        limit,
    )


def action_stats_entry(
    action: ActionState, ledger: LedgerState | None, run_stats: RunStats | None
) -> dict[str, Any]:
    stats = execution_stats(identity_runs(action), ledger, run_stats=run_stats)
    entry: dict[str, Any] = {
        "id": str(action.id),
        "generation": rev(action.generation),
        "status": action.status,
        "contentSummary": content_summary(action),
        "executionStats": stats,
        "loopCount": stats["loopCount"],
        "toolCount": stats["toolCount"],
        "progressRevision": cnt(action.version),
        "attempt": cnt(action.attempt),
    }
    if reason := action_failure_reason(action):
        entry["failureReason"] = reason
    return entry


def action_entry(
    item: WorkItemState,
    action: ActionState,
    ledger: LedgerState | None,
    *,
    body: bool,
    run_stats: RunStats | None,
    turns: Sequence[Any],
    live_message: str | None,
) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "id": str(action.id),
        "sequence": cnt(action.sequence),
        "type": truncate_utf8(action.type, 64),
    }
    if item.mode == "linear":
        entry["stageId"] = truncate_utf8(action.type, 64)
    entry |= {
        "workspaceMode": action.workspace_mode or "shared",
        "dependsOnActionIds": [],  # dynamic and linear plans have no dependencies
        "generation": rev(action.generation),
        "contractRevision": rev(action.contract_revision),
        "status": action.status,
        "attempt": cnt(action.attempt),
        "maxAttempts": cnt(action.max_attempts),
    }
    if action.status == "closed" and action.close_reason:
        entry["closeReason"] = sanitize_diagnostic_paths(action.close_reason, 1024)
    entry |= {
        "brief": brief_view(action.brief, BODY_BRIEF_LIMIT if body else BRIEF_LIMIT),
        "contentSummary": content_summary(action),
        "executionStats": execution_stats(identity_runs(action), ledger, run_stats=run_stats),
        "messageCount": 0,  # Action conversations do not exist yet
        "updatedAt": epoch_ms(action.updated_at),
    }
    if not body:
        return entry
    if reason := action_failure_reason(action):
        entry["failureReason"] = reason
    entry |= body_fields(action, live_message)
    window, _ = message_window(turns, MAX_TURNS)
    entry["turns"] = window
    return entry


def _progress(item: WorkItemState, ordered: Sequence[ActionState]) -> GoalProgress:
    return derive_goal_progress(
        criteria=item.acceptance_criteria,
        contract_revision=item.contract_revision,
        delivery_target=item.delivery_target,
        actions=ordered,
    )


def _item_failure_reason(
    item: WorkItemState, ordered: Sequence[ActionState], ledger: LedgerState | None
) -> str:
    if item.status not in ("needs_attention", "cancelled"):
        return ""
    stop = item.stopped or (ledger.stop_reason.code if ledger and ledger.stop_reason else None)
    if stop:
        return failure_reason(f"Execution stopped: {stop}")
    current = current_action(item, ordered)
    for action in [current, *ordered] if current is not None else ordered:
        if reason := action_failure_reason(action):
            return reason
    return ""


def _board(item: WorkItemState, ordered: Sequence[ActionState]) -> dict[str, Any]:
    statuses = [a.status for a in ordered]
    if item.status in TERMINAL_STATUSES:
        lane = "closed"
    elif item.status in ("draft", "waiting", "needs_attention") or {"waiting", "failed"} & set(
        statuses
    ):
        lane = "needs_attention"
    else:
        lane = "active"
    counts: Counter[str] = Counter(statuses)

    def first(*wanted: str) -> ActionState | None:
        for status in wanted:
            found = next((a for a in ordered if a.status == status), None)
            if found is not None:
                return found
        return None

    board: dict[str, Any] = {
        "boardLane": lane,
        "actionCounts": {s: counts[s] for s in ACTION_STATUS_ORDER if counts[s]},
    }
    if (attention := action_ref(first("waiting", "failed"))) is not None:
        board["attentionAction"] = attention
    if (active := action_ref(first("running", "ready"))) is not None:
        board["activeAction"] = active
    active_ids = ids(a.id for a in ordered if a.status in ("running", "ready"))
    attention_ids = ids(a.id for a in ordered if a.status in ("waiting", "failed"))
    if active_ids:
        board["activeActionIds"] = active_ids
    if attention_ids:
        board["attentionActionIds"] = attention_ids
    board["executors"] = []  # the distinct VPs: no VP assignment yet
    return board


def _base(
    item: WorkItemState,
    ordered: Sequence[ActionState],
    ledger: LedgerState | None,
    *,
    now: datetime,
    coordinator_revision: int,
    attachment_count: int,
    run_stats: RunStats | None,
) -> dict[str, Any]:
    visible = visible_actions(ordered)
    runs = [run for action in ordered for run in action.runs]
    dto: dict[str, Any] = {
        "id": str(item.id),
        "revision": rev(item.contract_revision),
        "planRevision": cnt(item.version),
        "ledgerRevision": sum(1 for run in runs if run.status != "running"),
        "coordinatorRevision": cnt(coordinator_revision),
        "coordinationMode": item.mode,
        "executionMode": item.mode,
        "title": sanitize_personal(item.title, TITLE_LIMIT),
        "goal": sanitize_personal(item.goal, GOAL_LIMIT),
        "status": item.status,
    }
    if item.current_action_id is not None:
        dto["currentActionId"] = str(item.current_action_id)
    dto |= {
        "actionCount": len(visible),
        "completedActionCount": sum(1 for a in visible if a.status == "completed"),
        "executionStats": execution_stats(runs, ledger, whole_item=True, run_stats=run_stats),
    }
    if ledger is not None:
        dto["executionControl"] = execution_control(
            ledger,
            ordered,
            now=now,
            data_revision=data_revision(item, ordered, ledger, now=now),
        )
    if reason := _item_failure_reason(item, ordered, ledger):
        dto["failureReason"] = reason
    dto |= {
        "linkedSessionIds": [],
        "attachmentCount": cnt(attachment_count),
        "createdAt": epoch_ms(item.created_at),
        "updatedAt": epoch_ms(item.updated_at),
    }
    return dto | _board(item, ordered)


def _summary(
    item: WorkItemState,
    ordered: Sequence[ActionState],
    ledger: LedgerState | None,
    *,
    now: datetime,
    coordinator_revision: int,
    attachment_count: int,
    run_stats: RunStats | None,
    body_extras: bool = False,
    live_message: str | None = None,
) -> dict[str, Any]:
    dto = _base(
        item,
        ordered,
        ledger,
        now=now,
        coordinator_revision=coordinator_revision,
        attachment_count=attachment_count,
        run_stats=run_stats,
    )
    current = current_action(item, ordered)
    if current is not None:
        entry: dict[str, Any] = {
            "id": str(current.id),
            "type": truncate_utf8(current.type, 64),
        }
        if item.mode == "linear":
            entry["stageId"] = truncate_utf8(current.type, 64)
        entry |= {
            "generation": rev(current.generation),
            "status": current.status,
            "objective": sanitize_diagnostic_paths(current.brief.objective, OBJECTIVE_LIMIT),
        }
        dto["currentAction"] = entry
    body = body_action(item, ordered)
    stats = []
    for action in visible_actions(ordered):
        entry = action_stats_entry(action, ledger, run_stats)
        if body_extras and action is body:
            entry |= body_fields(action, live_message)
        stats.append(entry)
    dto["actionStats"] = stats
    return dto


def summary_dto(
    item: WorkItemState,
    actions: Actions,
    ledger: LedgerState | None,
    *,
    now: datetime,
    coordinator_revision: int = 0,
    attachment_count: int = 0,
    run_stats: RunStats | None = None,
    budget: int = MAX_DTO_BYTES,
) -> dict[str, Any]:
    """A list row and the base of broadcasts (2.3), within ``budget`` bytes."""
    dto = _summary(
        item,
        ordered_actions(actions),
        ledger,
        now=now,
        coordinator_revision=coordinator_revision,
        attachment_count=attachment_count,
        run_stats=run_stats,
    )
    return enforce_budget(dto, "summary", budget=budget)


def broadcast_dto(
    event_type: str,
    item: WorkItemState,
    actions: Actions,
    ledger: LedgerState | None,
    *,
    now: datetime,
    action_id: UUID | str | None = None,
    run_id: UUID | str | None = None,
    client_message_id: str | None = None,
    live_message: str | None = None,
    coordinator_revision: int = 0,
    attachment_count: int = 0,
    run_stats: RunStats | None = None,
    budget: int = MAX_DTO_BYTES,
) -> dict[str, Any]:
    """``{type, actionId?, runId?, clientMessageId?, workItem: summary}``; the body
    action's actionStats entry carries its response, failure (c) and liveMessage."""
    envelope: dict[str, Any] = {"type": truncate_utf8(event_type, 128)}
    extra = (("actionId", action_id), ("runId", run_id), ("clientMessageId", client_message_id))
    for key, value in extra:
        if value:
            envelope[key] = bounded_id(value)
    envelope["workItem"] = _summary(
        item,
        ordered_actions(actions),
        ledger,
        now=now,
        coordinator_revision=coordinator_revision,
        attachment_count=attachment_count,
        run_stats=run_stats,
        body_extras=True,
        live_message=live_message,
    )
    return enforce_budget(envelope, "broadcast", budget=budget)


def deleted_broadcast_dto(work_item_id: UUID | str, revision: int) -> dict[str, Any]:
    return {
        "type": "work_item.deleted",
        "workItem": {"id": bounded_id(work_item_id), "revision": rev(revision)},
    }


def _output(
    kind: str, label: str, ref: str, status: str | None, action_id: UUID, run_id: UUID
) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "kind": kind,
        "label": sanitize_diagnostic_paths(label, LABEL_LIMIT),
        "ref": sanitize_diagnostic_paths(ref, REF_LIMIT),
    }
    if status:
        entry["status"] = status
    return entry | {"actionId": bounded_id(action_id), "runId": bounded_id(run_id)}


def _outputs(ordered: Sequence[ActionState]) -> list[dict[str, Any]]:
    outputs: list[dict[str, Any]] = []
    seen: set[tuple[str, str]] = set()
    for action in ordered:
        run = action.result_run
        if run is None or run.status != "completed" or run.result is None:
            continue
        for output in run.result.outputs:
            if output.kind == "tool" or not output.ref or (output.kind, output.ref) in seen:
                continue
            seen.add((output.kind, output.ref))
            outputs.append(
                _output(output.kind, output.label, output.ref, output.status, action.id, run.id)
            )
            if len(outputs) >= MAX_OUTPUTS:
                return outputs
    return outputs


def _final_result(final: FinalResult, runs: Mapping[UUID, Run]) -> dict[str, Any]:
    responses = []
    for response in final.responses[:MAX_RESPONSES]:
        run = runs.get(response.run_id)
        evidence = run.result.evidence if run is not None and run.result is not None else ()
        tools = {e.label for e in evidence if e.kind == "tool"}
        labels = [label for label in response.evidence if label not in tools]
        responses.append(
            {
                "runId": bounded_id(response.run_id),
                "summary": sanitize_diagnostic_paths(response.summary),
                "evidence": [
                    sanitize_diagnostic_paths(label, LABEL_LIMIT)
                    for label in labels[:MAX_RESPONSE_EVIDENCE]
                ],
            }
        )
    return {
        "summary": sanitize_diagnostic_paths(final.summary, RESPONSE_LIMIT),
        "acceptanceResults": [
            {
                "criterion": sanitize_personal(r.criterion, CRITERION_LIMIT),
                "status": r.status,
                "evidenceRunIds": ids(r.evidence_run_ids, 24),
            }
            for r in final.acceptance_results[:24]
        ],
        "evidenceRunIds": ids(final.evidence_run_ids),
        "outputs": [
            _output(o.kind, o.label, o.ref, o.status, o.action_id, o.run_id)
            for o in final.outputs[:MAX_OUTPUTS]
        ],
        "responses": responses,
        "residualRisks": [sanitize_diagnostic_paths(r, 2000) for r in final.residual_risks[:24]],
    }


def _criteria(criteria: Sequence[str]) -> list[str]:
    return [sanitize_personal(c, CONTRACT_CRITERION_LIMIT) for c in criteria[:MAX_CRITERIA]]


def _mainline(item: WorkItemState, ordered: Sequence[ActionState]) -> dict[str, Any]:
    """The contract, counters and each visible action's canonical result; never errors."""
    revision = rev(item.contract_revision)
    runs = [run for action in ordered for run in action.runs]
    mainline: dict[str, Any] = {
        "contractRevision": revision,
        "criteria": _criteria(item.acceptance_criteria),
    }
    if item.delivery_target in DELIVERY_TARGETS:
        mainline["deliveryTarget"] = item.delivery_target
    visible = visible_actions(ordered)
    return mainline | {
        "counters": {
            "actionCount": len(ordered),
            "openActionCount": sum(1 for a in visible if a.status not in ("completed", "closed")),
            "completedActionCount": sum(1 for a in visible if a.status == "completed"),
            "runCount": len(runs),
            "outcomeRevision": sum(1 for run in runs if run.status != "running"),
        },
        "actions": [canonical_result(action, revision) for action in visible],
    }


def _waiting_reason(
    item: WorkItemState, ordered: Sequence[ActionState], messages: Sequence[Any]
) -> str:
    """The latest request_human question, else (while waiting) the current action's reason."""
    if item.status in TERMINAL_STATUSES:
        return ""
    for message in reversed(messages):
        decision = message.get("decision") if isinstance(message, Mapping) else None
        if not isinstance(decision, Mapping) or decision.get("kind") != "request_human":
            continue
        if question := text_of(decision.get("question")).strip():
            return sanitize_waiting_reason(question)
    current = current_action(item, ordered)
    if item.status != "waiting" or current is None:
        return ""
    run = current_run(current, item.contract_revision) or latest_finished_run(current)
    if run is None or run.result is None:
        return ""
    return sanitize_waiting_reason(run.result.waiting_reason or "")


def _action_summary(ordered: Sequence[ActionState]) -> str:
    if not ordered:
        return "No actions"
    counts: Counter[str] = Counter(a.status for a in ordered)
    parts = ", ".join(f"{counts[s]} {s}" for s in ACTION_STATUS_ORDER if counts[s])
    return f"{len(ordered)} action{'s' if len(ordered) != 1 else ''}: {parts}"


def detail_dto(
    item: WorkItemState,
    actions: Actions,
    ledger: LedgerState | None,
    *,
    now: datetime,
    messages: Sequence[Message] = (),
    turns: Sequence[Message] = (),
    attachments: Sequence[Mapping[str, Any]] = (),
    live_message: str | None = None,
    coordinator_revision: int = 0,
    run_stats: RunStats | None = None,
    budget: int = MAX_DTO_BYTES,
) -> dict[str, Any]:
    """The explicit, authenticated read of one item (2.4), within ``budget`` bytes.

    ``messages`` are the item's Coordinator entries oldest first (the newest 100 are
    kept); ``turns`` are the body action's conversation turns (the newest 20)."""
    ordered = ordered_actions(actions)
    attachment_list = [a for a in attachments if isinstance(a, Mapping)]
    dto = _base(
        item,
        ordered,
        ledger,
        now=now,
        coordinator_revision=coordinator_revision,
        attachment_count=len(attachment_list),
        run_stats=run_stats,
    )
    dto["acceptanceCriteria"] = _criteria(item.acceptance_criteria)
    if item.delivery_target in DELIVERY_TARGETS:
        dto["deliveryTarget"] = item.delivery_target
    progress = goal_progress_dto(_progress(item, ordered))
    if progress is not None:
        dto["goalProgress"] = progress
    dto["outputs"] = _outputs(ordered)
    if item.final_result is not None:
        runs = {run.id: run for action in ordered for run in action.runs}
        dto["finalResult"] = _final_result(item.final_result, runs)
    if waiting := _waiting_reason(item, ordered, messages):
        dto["waitingReason"] = waiting
    dto["mainline"] = _mainline(item, ordered)
    window, omitted = message_window(messages, MAX_MESSAGES)
    dto["messages"] = window
    if omitted:
        dto["omittedMessageCount"] = omitted
    dto["attachments"] = [attachment_view(a) for a in attachment_list[:MAX_ATTACHMENTS]]
    dto["actionCount"] = len(ordered)
    dto["actionSummary"] = _action_summary(ordered)
    body = body_action(item, ordered)
    dto["actions"] = [
        action_entry(
            item,
            action,
            ledger,
            body=action is body,
            run_stats=run_stats,
            turns=turns,
            live_message=live_message,
        )
        for action in ordered
    ]
    return enforce_budget(dto, "detail", budget=budget)
