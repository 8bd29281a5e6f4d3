"""Browser DTOs (read-models.md 2.3 to 2.6): pure functions of aggregate states.

No I/O and no clock: ``now`` (for lease expiry) is an argument, every time comes
from event payloads as epoch milliseconds, and actions are ordered by
(sequence, id), so a rebuilt projection and the live one serve equal DTOs.

Keys are camelCase; optional fields are omitted, never null. Every DTO passes
``enforce_budget`` (512 KiB). What is never sent: workDir and local paths, raw
Run records (worker, boot id, lease, error, end reason, tool output, checks),
context entries (instructions, guidance, input), credentials. Errors reach a
browser only through sanitisers (c) and (d) (ADR-0009), other text a Run or the
Coordinator wrote through (b), and the user's title, goal and criteria through
``sanitize_personal`` (no credential, no home directory; ADR-0013).

The stored detail takes ``messages`` from the item's Coordinator conversation;
``turns``, ``attachments`` and ``live_message`` have no source yet and are optional
inputs, bounded here already. A message is a mapping with the keys of
coordinator.md 1.1 (snake_case or camelCase): id, turn_id, role, status, text,
speaker {id, name}, decision {kind, reason, affected_action_ids, question}, error,
created_at, updated_at.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from typing import Any, Literal
from uuid import UUID

import orjson

from workcenter.domain.action import ActionState, Run
from workcenter.domain.conversation import ConversationState
from workcenter.domain.goal_progress import GoalProgress, current_run, derive_goal_progress
from workcenter.domain.resource_ledger import LedgerState
from workcenter.domain.work_item import FinalResult, WorkItemState, is_delivery_target
from workcenter.projections import dto_models as dtos
from workcenter.projections.budget import (
    MAX_DTO_BYTES,
    DtoKind,
    dto_size,
    enforce_budget,
)
from workcenter.projections.execution import (
    RunStats,
    data_revision,
    execution_control,
    execution_stats,
)
from workcenter.projections.goal_progress_dto import goal_progress_dto
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
    CRITERION_LIMIT,
    GOAL_LIMIT,
    LABEL_LIMIT,
    MAX_ATTACHMENTS,
    MAX_CRITERIA,
    MAX_MESSAGES,
    MAX_OUTPUTS,
    MAX_RESPONSE_EVIDENCE,
    MAX_RESPONSES,
    OBJECTIVE_LIMIT,
    REF_LIMIT,
    RESPONSE_LIMIT,
    TERMINAL_STATUSES,
    TITLE_LIMIT,
    Actions,
    ItemActions,
    Message,
    action_entry,
    action_failure_reason,
    action_ref,
    action_stats_entry,
    add_body_fields,
    attachment_view,
    canonical_result,
    conversation_entries,
    latest_finished_run,
    message_window,
    text_of,
)

__all__ = [
    "MAX_DTO_BYTES",
    "DtoKind",
    "broadcast_dto",
    "deleted_broadcast_dto",
    "detail_dto",
    "dto_size",
    "enforce_budget",
    "execution_control",
    "execution_stats",
    "goal_progress_dto",
    "summary_dto",
]


# --- goal progress (2.5; its DTO is in goal_progress_dto.py) ----------------------------


def _progress(item: WorkItemState, acts: ItemActions) -> GoalProgress:
    return derive_goal_progress(
        criteria=item.acceptance_criteria,
        contract_revision=item.contract_revision,
        delivery_target=item.delivery_target,
        actions=acts.ordered,
    )


# --- summary (2.3) ---------------------------------------------------------------------


def _item_failure_reason(item: WorkItemState, acts: ItemActions, ledger: LedgerState | None) -> str:
    if item.status not in ("needs_attention", "cancelled"):
        return ""
    stop = item.stopped or (ledger.stop_reason.code if ledger and ledger.stop_reason else None)
    if stop:
        return failure_reason(f"Execution stopped: {stop}")
    current, ordered = acts.current, acts.ordered
    for action in [current, *ordered] if current is not None else ordered:
        if reason := action_failure_reason(action):
            return reason
    return ""


def _lane(item: WorkItemState, acts: ItemActions) -> Literal["active", "needs_attention", "closed"]:
    if item.status in TERMINAL_STATUSES:
        return "closed"
    if item.status in ("draft", "waiting", "needs_attention") or {"waiting", "failed"} & set(
        acts.counts
    ):
        return "needs_attention"
    return "active"


def _attention(dto: dtos.ItemBase, acts: ItemActions) -> None:
    """The board's optional keys: the first Action needing attention and the first
    active one, and the ids of each kind."""
    firsts = acts.firsts

    def first(*wanted: str) -> ActionState | None:
        return next((firsts[status] for status in wanted if status in firsts), None)

    if (attention := action_ref(first("waiting", "failed"))) is not None:
        dto["attentionAction"] = attention
    if (active := action_ref(first("running", "ready"))) is not None:
        dto["activeAction"] = active
    ordered = acts.ordered
    if active_ids := ids(a.id for a in ordered if a.status in ("running", "ready")):
        dto["activeActionIds"] = active_ids
    if attention_ids := ids(a.id for a in ordered if a.status in ("waiting", "failed")):
        dto["attentionActionIds"] = attention_ids


def _base(
    item: WorkItemState,
    acts: ItemActions,
    ledger: LedgerState | None,
    *,
    now: datetime,
    coordinator_revision: int,
    dispatching: Collection[str],
    attachment_count: int,
    run_stats: RunStats | None,
) -> dtos.ItemBase:
    ordered, runs, counts = acts.ordered, acts.runs, acts.counts
    dto: dtos.ItemBase = {
        "id": str(item.id),
        "revision": rev(item.contract_revision),
        "planRevision": cnt(item.version),
        "ledgerRevision": acts.outcome_count,
        "coordinatorRevision": cnt(coordinator_revision),
        "coordinationMode": item.mode,
        "executionMode": item.mode,
        "title": sanitize_personal(item.title, TITLE_LIMIT),
        "goal": sanitize_personal(item.goal, GOAL_LIMIT),
        "status": item.status,
        "actionCount": len(acts.visible),
        "completedActionCount": acts.completed_count,
        "executionStats": execution_stats(runs, ledger, whole_item=True, run_stats=run_stats),
        "linkedSessionIds": [],
        "attachmentCount": cnt(attachment_count),
        "createdAt": epoch_ms(item.created_at),
        "updatedAt": epoch_ms(item.updated_at),
        "boardLane": _lane(item, acts),
        "actionCounts": {s: counts[s] for s in ACTION_STATUS_ORDER if s in counts},
        "executors": [],  # the distinct VPs: no VP assignment yet
    }
    if item.current_action_id is not None:
        dto["currentActionId"] = str(item.current_action_id)
    if ledger is not None:
        dto["executionControl"] = execution_control(
            ledger,
            ordered,
            now=now,
            data_revision=data_revision(item, ordered, ledger, now=now),
            dispatching=dispatching,
            done=item.status == "done",
        )
    if reason := _item_failure_reason(item, acts, ledger):
        dto["failureReason"] = reason
    _attention(dto, acts)
    return dto


def _summary(
    item: WorkItemState,
    acts: ItemActions,
    ledger: LedgerState | None,
    *,
    now: datetime,
    coordinator_revision: int,
    dispatching: Collection[str],
    attachment_count: int,
    run_stats: RunStats | None,
) -> dtos.SummaryRow:
    base = _base(
        item,
        acts,
        ledger,
        now=now,
        coordinator_revision=coordinator_revision,
        dispatching=dispatching,
        attachment_count=attachment_count,
        run_stats=run_stats,
    )
    dto: dtos.SummaryRow = {
        **base,
        "actionStats": [action_stats_entry(a, ledger, run_stats) for a in acts.visible],
    }
    current = acts.current
    if current is not None:
        entry: dtos.CurrentAction = {
            "id": str(current.id),
            "type": truncate_utf8(current.type, 64),
            "generation": rev(current.generation),
            "status": current.status,
            "objective": sanitize_diagnostic_paths(current.brief.objective, OBJECTIVE_LIMIT),
        }
        if item.mode == "linear":
            entry["stageId"] = truncate_utf8(current.type, 64)
        dto["currentAction"] = entry
    return dto


def summary_dto(
    item: WorkItemState,
    actions: Actions,
    ledger: LedgerState | None,
    *,
    now: datetime,
    coordinator_revision: int = 0,
    dispatching: Collection[str] = (),
    attachment_count: int = 0,
    run_stats: RunStats | None = None,
    budget: int = MAX_DTO_BYTES,
) -> dict[str, Any]:
    """A list row and the base of broadcasts (2.3), within ``budget`` bytes."""
    dto = _summary(
        item,
        ItemActions.of(item, actions),
        ledger,
        now=now,
        coordinator_revision=coordinator_revision,
        dispatching=dispatching,
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
    dispatching: Collection[str] = (),
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
    acts = ItemActions.of(item, actions)
    summary = _summary(
        item,
        acts,
        ledger,
        now=now,
        coordinator_revision=coordinator_revision,
        dispatching=dispatching,
        attachment_count=attachment_count,
        run_stats=run_stats,
    )
    body = acts.body
    if body is not None:
        fields: dtos.BodyFields = {}
        add_body_fields(fields, body, live_message)
        body_id = str(body.id)
        # Only in a broadcast: its own shape, beyond the list row's.
        envelope["workItem"] = summary | {
            "actionStats": [
                {**entry, **fields} if entry["id"] == body_id else entry
                for entry in summary["actionStats"]
            ]
        }
    else:
        envelope["workItem"] = summary
    return enforce_budget(envelope, "broadcast", budget=budget)


def deleted_broadcast_dto(work_item_id: UUID | str, revision: int) -> dict[str, Any]:
    return {
        "type": "work_item.deleted",
        "workItem": {"id": bounded_id(work_item_id), "revision": rev(revision)},
    }


# --- detail (2.4) ----------------------------------------------------------------------


def _output(
    kind: str, label: str, ref: str, status: str | None, action_id: UUID, run_id: UUID
) -> dtos.Output:
    entry: dtos.Output = {
        "kind": kind,
        "label": sanitize_diagnostic_paths(label, LABEL_LIMIT),
        "ref": sanitize_diagnostic_paths(ref, REF_LIMIT),
        "actionId": bounded_id(action_id),
        "runId": bounded_id(run_id),
    }
    if status:
        entry["status"] = status
    return entry


def _outputs(ordered: Sequence[ActionState]) -> list[dtos.Output]:
    outputs: list[dtos.Output] = []
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


def _final_result(final: FinalResult, runs: Mapping[UUID, Run]) -> dtos.FinalResult:
    responses: list[dtos.RunResponse] = []
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
    return [sanitize_personal(c, CRITERION_LIMIT) for c in criteria[:MAX_CRITERIA]]


def _mainline(item: WorkItemState, acts: ItemActions, criteria: list[str]) -> dtos.Mainline:
    """The contract, counters and each visible action's canonical result; never errors."""
    revision = rev(item.contract_revision)
    visible = acts.visible
    mainline: dtos.Mainline = {
        "contractRevision": revision,
        "criteria": criteria,
        "counters": {
            "actionCount": len(acts.ordered),
            "openActionCount": sum(1 for a in visible if a.status not in ("completed", "closed")),
            "completedActionCount": acts.completed_count,
            "runCount": len(acts.runs),
            "outcomeRevision": acts.outcome_count,
        },
        "actions": [canonical_result(action, revision) for action in visible],
    }
    if is_delivery_target(item.delivery_target):
        mainline["deliveryTarget"] = item.delivery_target
    return mainline


def _waiting_reason(item: WorkItemState, acts: ItemActions, messages: Sequence[Any]) -> str:
    """The latest request_human question, else (while waiting) the current action's reason."""
    if item.status in TERMINAL_STATUSES:
        return ""
    for message in reversed(messages):
        decision = message.get("decision") if isinstance(message, Mapping) else None
        if not isinstance(decision, Mapping) or decision.get("kind") != "request_human":
            continue
        if question := text_of(decision.get("question")).strip():
            return sanitize_waiting_reason(question)
    current = acts.current
    if item.status != "waiting" or current is None:
        return ""
    run = current_run(current, item.contract_revision) or latest_finished_run(current)
    if run is None or run.result is None:
        return ""
    return sanitize_waiting_reason(run.result.waiting_reason or "")


def _action_summary(acts: ItemActions) -> str:
    total, counts = len(acts.ordered), acts.counts
    if not total:
        return "No actions"
    parts = ", ".join(f"{counts[s]} {s}" for s in ACTION_STATUS_ORDER if s in counts)
    return f"{total} action{'s' if total != 1 else ''}: {parts}"


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
    dispatching: Collection[str] = (),
    run_stats: RunStats | None = None,
    budget: int = MAX_DTO_BYTES,
) -> dict[str, Any]:
    """The explicit, authenticated read of one item (2.4), within ``budget`` bytes.

    ``messages`` are the item's Coordinator entries oldest first (the newest 100 are
    kept); ``turns`` are the body action's conversation turns (the newest 20)."""
    dto = _detail(
        item,
        ItemActions.of(item, actions),
        ledger,
        now=now,
        messages=messages,
        turns=turns,
        attachments=[a for a in attachments if isinstance(a, Mapping)],
        live_message=live_message,
        coordinator_revision=coordinator_revision,
        dispatching=dispatching,
        run_stats=run_stats,
    )
    return enforce_budget(dto, "detail", budget=budget)


def detail_json(
    item: WorkItemState,
    actions: Actions,
    ledger: LedgerState | None,
    *,
    now: datetime,
    conversation: ConversationState | None = None,
) -> bytes:
    """``orjson.dumps(detail_dto(...))`` of the states and the item's conversation (its
    messages and coordinator revision), serialised once when it fits the budget (the
    budget measures the same bytes; ADR-0037)."""
    dto = _detail(
        item,
        ItemActions.of(item, actions),
        ledger,
        now=now,
        messages=conversation_entries(conversation),
        turns=(),
        attachments=[],
        live_message=None,
        coordinator_revision=conversation.coordinator_revision if conversation else 0,
        dispatching=conversation.dispatching if conversation else (),
        run_stats=None,
    )
    data = orjson.dumps(dto)
    if len(data) <= MAX_DTO_BYTES:
        return data
    return orjson.dumps(enforce_budget(dto, "detail"))


def _detail(
    item: WorkItemState,
    acts: ItemActions,
    ledger: LedgerState | None,
    *,
    now: datetime,
    messages: Sequence[Message],
    turns: Sequence[Message],
    attachments: list[Mapping[str, Any]],
    live_message: str | None,
    coordinator_revision: int,
    dispatching: Collection[str],
    run_stats: RunStats | None,
) -> dtos.Detail:
    base = _base(
        item,
        acts,
        ledger,
        now=now,
        coordinator_revision=coordinator_revision,
        dispatching=dispatching,
        attachment_count=len(attachments),
        run_stats=run_stats,
    )
    criteria = _criteria(item.acceptance_criteria)
    window, omitted = message_window(messages, MAX_MESSAGES)
    dto: dtos.Detail = {
        **base,
        "acceptanceCriteria": criteria,
        "outputs": _outputs(acts.ordered),
        "mainline": _mainline(item, acts, list(criteria)),  # a list of its own to trim
        "messages": window,
        "attachments": [attachment_view(a) for a in attachments[:MAX_ATTACHMENTS]],
        "actionCount": len(acts.ordered),
        "actionSummary": _action_summary(acts),
        "actions": [
            action_entry(
                item,
                action,
                ledger,
                body=action is acts.body,
                run_stats=run_stats,
                turns=turns,
                live_message=live_message,
            )
            for action in acts.ordered
        ],
    }
    if is_delivery_target(item.delivery_target):
        dto["deliveryTarget"] = item.delivery_target
    progress = goal_progress_dto(_progress(item, acts))
    if progress is not None:
        dto["goalProgress"] = progress
    if item.final_result is not None:
        dto["finalResult"] = _final_result(item.final_result, {r.id: r for r in acts.runs})
    if waiting := _waiting_reason(item, acts, messages):
        dto["waitingReason"] = waiting
    if omitted:
        dto["omittedMessageCount"] = omitted
    return dto
