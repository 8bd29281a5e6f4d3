"""Views of one Action, Run result or message for the browser DTOs (read-models.md 2.3, 2.4).

Building blocks of ``dto.py``: each takes a frozen state (or a message mapping)
and returns a bounded, sanitised, camelCase dict or string. Pure: no clock, no I/O.
A tool evidence item's label is its output and is never sent; errors appear only
through sanitisers (c) and (d).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, get_args
from uuid import UUID

from workcenter.domain import bounds
from workcenter.domain import conversation as conv
from workcenter.domain.action import ActionState, Brief, Run
from workcenter.domain.evidence import EvidenceItem
from workcenter.domain.goal_progress import current_run
from workcenter.domain.resource_ledger import LedgerState
from workcenter.domain.work_item import WorkItemState
from workcenter.projections import dto_models as dtos
from workcenter.projections.budget import cut_brief
from workcenter.projections.execution import RunStats, execution_stats
from workcenter.projections.sanitize import (
    UTF8_MAX,
    bounded_id,
    cnt,
    epoch_ms,
    failure_reason,
    ids,
    rev,
    sanitize_diagnostic,
    sanitize_diagnostic_paths,
    sanitize_failure,
    sanitize_personal,
    sanitize_waiting_reason,
    truncate_chars,
    truncate_utf8,
)

ACTION_STATUS_ORDER: tuple[str, ...] = (
    "ready", "running", "waiting", "failed", "completed", "closed", "superseded", "cancelled",
)  # fmt: skip
HIDDEN_STATUSES: frozenset[str] = frozenset({"superseded", "cancelled"})
_FAILED_RUN: frozenset[str] = frozenset({"failed", "retryable", "interrupted"})
TERMINAL_STATUSES: frozenset[str] = frozenset({"done", "cancelled"})
_MESSAGE_ROLES: Mapping[Any, dtos.MessageRole] = {r: r for r in get_args(dtos.MessageRole)}
_MESSAGE_STATUSES: frozenset[str] = frozenset({"thinking", "completed", "failed"})
FAILED_REPLY = "The Action failed."

MAX_CRITERIA = 100
# In UTF-8 bytes, as the read models cut; a character takes at most 4, so these hold
# every goal and criterion the bounds take whole, in goal progress and in the contract's
# list (read-models.md's criterion of 1,024 bytes cut a criterion of 342 CJK characters;
# found by acceptance testing, ADR-0144).
CRITERION_LIMIT = UTF8_MAX * bounds.CRITERION
MAX_BLOCKERS = 64
MAX_OUTPUTS = 50
MAX_RESPONSES = 24
MAX_RESPONSE_EVIDENCE = 20
MAX_MESSAGES = 100
MAX_TURNS = 20
MAX_ATTACHMENTS = 100
MAX_RESULT_ITEMS = 20
MESSAGE_CHARS = 16_000
GOAL_LIMIT = UTF8_MAX * bounds.GOAL
TITLE_LIMIT = 4 * 1024
RESPONSE_LIMIT = 16_000
OBJECTIVE_LIMIT = 1000
CONTENT_SUMMARY_LIMIT = 256
BODY_BRIEF_LIMIT = 8 * 1024
BRIEF_LIMIT = 256
LABEL_LIMIT = 500
REF_LIMIT = 1000

Actions = Mapping[UUID, ActionState] | Collection[ActionState]
Message = Mapping[str, Any]


def ordered_actions(actions: Actions) -> list[ActionState]:
    values = actions.values() if isinstance(actions, Mapping) else actions
    return sorted(values, key=lambda a: (a.sequence, a.id))


def visible_actions(ordered: Sequence[ActionState]) -> list[ActionState]:
    return [a for a in ordered if a.status not in HIDDEN_STATUSES]


def current_action(item: WorkItemState, ordered: Sequence[ActionState]) -> ActionState | None:
    return next((a for a in ordered if a.id == item.current_action_id), None)


@dataclass(frozen=True)
class ItemActions:
    """An item's Actions as one DTO build reads them, each list derived once (ADR-0037)."""

    ordered: list[ActionState]
    visible: list[ActionState]
    runs: list[Run]  # every Run of every Action, in that order
    current: ActionState | None
    body: ActionState | None  # the current Action, else the last one in order
    completed_count: int  # of the visible ones
    outcome_count: int  # Runs no longer running
    counts: dict[str, int]  # Actions by status, the statuses no Action has left out
    firsts: dict[str, ActionState]  # the first Action in order of each status

    @classmethod
    def of(cls, item: WorkItemState, actions: Actions) -> ItemActions:
        ordered = ordered_actions(actions)
        visible = visible_actions(ordered)
        runs = [run for action in ordered for run in action.runs]
        current = current_action(item, ordered)
        counts: dict[str, int] = {}
        firsts: dict[str, ActionState] = {}
        for action in ordered:
            counts[action.status] = counts.get(action.status, 0) + 1
            firsts.setdefault(action.status, action)
        return cls(
            ordered=ordered,
            visible=visible,
            runs=runs,
            current=current,
            body=current or (ordered[-1] if ordered else None),
            completed_count=sum(1 for a in visible if a.status == "completed"),
            outcome_count=sum(1 for run in runs if run.status != "running"),
            counts=counts,
            firsts=firsts,
        )


def identity_runs(action: ActionState) -> list[Run]:
    return [
        r
        for r in action.runs
        if rev(r.generation) == rev(action.generation) and r.spec_hash == action.spec_hash
    ]


def latest_finished_run(action: ActionState) -> Run | None:
    if action.status == "completed" and action.result_run is not None:
        return action.result_run
    return next((r for r in reversed(action.runs) if r.status != "running"), None)


def failure_text(run: Run | None) -> str:
    if run is None:
        return ""
    return (run.result.error if run.result is not None else None) or run.end_reason or ""


def get_key(mapping: Mapping[str, Any], snake: str, camel: str) -> Any:
    value = mapping.get(snake)
    return mapping.get(camel) if value is None else value


def text_of(value: Any) -> str:
    return value if isinstance(value, str) else ""


def action_ref(action: ActionState | None) -> dtos.ActionRef | None:
    if action is None:
        return None
    return {"id": str(action.id), "type": truncate_utf8(action.type, 64), "status": action.status}


def run_text(run: Run, text: str, limit: int) -> str:
    """A Run's own words: (c) when the Run failed (its text may carry the error), else (b)."""
    if run.status in _FAILED_RUN:
        return sanitize_failure(text, limit)
    return sanitize_diagnostic_paths(text, limit)


def content_summary(action: ActionState) -> str:
    run = latest_finished_run(action)
    if run is not None and run.result is not None and run.result.summary:
        return run_text(run, run.result.summary, CONTENT_SUMMARY_LIMIT)
    return sanitize_diagnostic_paths(action.brief.objective, CONTENT_SUMMARY_LIMIT)


def action_failure_reason(action: ActionState) -> str:
    if action.status != "failed":
        return ""
    return failure_reason(failure_text(latest_finished_run(action)))


def failure_view(action: ActionState) -> dtos.Failure | None:
    run = latest_finished_run(action) if action.status == "failed" else None
    if run is None:
        return None
    result = run.result
    failure: dtos.Failure = {
        "kind": truncate_utf8((result.failure_kind if result else None) or run.status, 64)
    }
    if result is not None and result.failure_code:
        failure["code"] = sanitize_diagnostic(result.failure_code, 128)
    if text := sanitize_failure(failure_text(run)):
        failure["error"] = text
    if result is not None and (summary := sanitize_failure(result.summary)):
        failure["summary"] = summary
    if run.ended_at is not None:
        failure["failedAt"] = epoch_ms(run.ended_at)
    return failure


def response_view(action: ActionState) -> str | None:
    run = latest_finished_run(action)
    if run is None:
        return None
    if run.result is not None:
        reply = run.result.response or run.result.summary
    else:  # a gracefully interrupted Run keeps what it had answered so far
        reply = (run.progress.response or run.progress.summary) if run.progress else ""
    if reply.strip():
        return run_text(run, reply, RESPONSE_LIMIT)
    if run.status in _FAILED_RUN:
        return sanitize_failure(failure_text(run)) or FAILED_REPLY
    return None


def live_message_view(action: ActionState, live_message: str | None) -> str:
    if not live_message or action.status != "running":
        return ""
    text = sanitize_diagnostic_paths(truncate_chars(live_message, MESSAGE_CHARS), 4 * MESSAGE_CHARS)
    return truncate_chars(text, MESSAGE_CHARS)


def add_body_fields(fields: dtos.BodyFields, action: ActionState, live_message: str | None) -> None:
    """Give the body Action's entry its response, failure and live message."""
    if (response := response_view(action)) is not None:
        fields["response"] = response
    if (failure := failure_view(action)) is not None:
        fields["failure"] = failure
    if live := live_message_view(action, live_message):
        fields["liveMessage"] = live


def action_stats_entry(
    action: ActionState, ledger: LedgerState | None, run_stats: RunStats | None
) -> dtos.ActionStats:
    stats = execution_stats(identity_runs(action), ledger, run_stats=run_stats)
    entry: dtos.ActionStats = {
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


def brief_view(brief: Brief, limit: int) -> dtos.BriefView:
    objective = sanitize_diagnostic_paths(brief.objective, limit)
    approach = sanitize_diagnostic_paths(brief.approach, limit)
    expected = sanitize_diagnostic_paths(brief.expected_outcome, limit)
    # ASCII texts within the limit together: cut_brief would keep each as it is.
    texts = (objective, approach, expected)
    if not all(text.isascii() for text in texts) or sum(map(len, texts)) > limit:
        return cut_brief(
            {"objective": objective, "approach": approach, "expectedOutcome": expected}, limit
        )
    shown: dtos.BriefView = {}
    if objective:
        shown["objective"] = objective
    if approach:
        shown["approach"] = approach
    if expected:
        shown["expectedOutcome"] = expected
    return shown


def evidence_view(item: EvidenceItem) -> dtos.EvidenceView:
    entry: dtos.EvidenceView
    if item.kind == "tool":  # a tool's label is its output: never sent
        entry = {"kind": "tool"}
        if item.status:
            entry["status"] = item.status
        return entry
    entry = {
        "kind": item.kind,
        "label": sanitize_diagnostic_paths(item.label, LABEL_LIMIT),
    }
    if item.ref and (ref := sanitize_diagnostic_paths(item.ref, REF_LIMIT)):
        entry["ref"] = ref
    if item.status:
        entry["status"] = item.status
    return entry


def canonical_result(action: ActionState, revision: int) -> dtos.CanonicalAction:
    entry: dtos.CanonicalAction = {
        "actionId": str(action.id),
        "type": truncate_utf8(action.type, 64),
        "status": action.status,
    }
    run = current_run(action, revision)
    if run is None or run.result is None:
        return entry
    result = run.result
    canonical: dtos.CanonicalResult = {
        "runId": str(run.id),
        "status": run.status,
        "summary": run_text(run, result.summary, 2048),
        "evidence": [evidence_view(e) for e in result.evidence[:MAX_RESULT_ITEMS]],
        "outputs": [evidence_view(o) for o in result.outputs[:MAX_RESULT_ITEMS]],
    }
    if result.waiting_reason:
        canonical["waitingReason"] = sanitize_waiting_reason(result.waiting_reason, 2048)
    if result.review_decision:
        canonical["reviewDecision"] = result.review_decision
    entry["result"] = canonical
    return entry


def message_view(message: Message) -> dtos.MessageView:
    role = _MESSAGE_ROLES.get(message.get("role"), "assistant")
    text = truncate_chars(text_of(message.get("text")), MESSAGE_CHARS)
    # The user's own words as elsewhere (no credential, no home directory; ADR-0013),
    # the Coordinator's through (b).
    sanitise = sanitize_personal if role == "user" else sanitize_diagnostic_paths
    text = truncate_chars(sanitise(text, UTF8_MAX * MESSAGE_CHARS), MESSAGE_CHARS)
    status = message.get("status")
    entry: dtos.MessageView = {
        "id": bounded_id(message.get("id")),
        "turnId": bounded_id(get_key(message, "turn_id", "turnId")),
        "role": role,
        "text": text,
        "status": status if status in _MESSAGE_STATUSES else "completed",
        "createdAt": epoch_ms(get_key(message, "created_at", "createdAt")),
        "updatedAt": epoch_ms(get_key(message, "updated_at", "updatedAt")),
    }
    speaker = message.get("speaker")
    if isinstance(speaker, Mapping):
        entry["speaker"] = {
            "id": bounded_id(speaker.get("id")),
            "name": truncate_utf8(text_of(speaker.get("name")), 256),
        }
    if error := sanitize_failure(text_of(message.get("error")), 8000):
        entry["error"] = error
    decision = message.get("decision")
    if isinstance(decision, Mapping):
        affected = get_key(decision, "affected_action_ids", "affectedActionIds")
        shown: dtos.DecisionView = {
            "kind": truncate_utf8(text_of(decision.get("kind")), 64),
            "affectedActionIds": ids(affected if isinstance(affected, list | tuple) else ()),
        }
        if reason := sanitize_diagnostic_paths(text_of(decision.get("reason")), 2048):
            shown["reason"] = reason
        if question := sanitize_waiting_reason(text_of(decision.get("question"))):
            shown["question"] = question
        entry["decision"] = shown
    return entry


def conversation_entries(state: conv.ConversationState | None) -> list[Message]:
    """The conversation's messages, oldest first, with the keys of coordinator.md 1.1:
    the Coordinator entries ``message_view`` shows in the detail (read-models.md 2.4)."""
    if state is None:
        return []
    return [_entry(m) for m in state.messages]


def _entry(message: conv.Message) -> Message:
    entry: dict[str, Any] = {
        "id": str(message.id),
        "turn_id": str(message.turn_id),
        "role": message.role,
        "status": message.status,
        "text": message.text,
        "error": message.error,
        "created_at": message.created_at,
        "updated_at": message.finished_at or message.created_at,
    }
    if message.speaker is not None:
        entry["speaker"] = {"id": message.speaker.id, "name": message.speaker.name}
    if (decision := message.decision) is not None:
        entry["decision"] = {
            "kind": decision.kind,
            "reason": decision.reason,
            "affected_action_ids": [str(i) for i in decision.affected_action_ids],
            "question": decision.question,
        }
    return entry


def message_window(entries: Iterable[Any], limit: int) -> tuple[list[dtos.MessageView], int]:
    """The newest ``limit`` mappings, oldest first, and how many were left out."""
    valid = [m for m in entries if isinstance(m, Mapping)]
    kept = valid[-limit:]
    return [message_view(m) for m in kept], len(valid) - len(kept)


def attachment_view(attachment: Mapping[str, Any]) -> dtos.Attachment:
    return {
        "id": bounded_id(attachment.get("id")),
        "name": sanitize_diagnostic_paths(text_of(attachment.get("name")), 256),
        "mimeType": truncate_utf8(text_of(get_key(attachment, "mime_type", "mimeType")), 128),
        "size": cnt(attachment.get("size")),
        "isImage": get_key(attachment, "is_image", "isImage") is True,
    }


def action_entry(
    item: WorkItemState,
    action: ActionState,
    ledger: LedgerState | None,
    *,
    body: bool,
    run_stats: RunStats | None,
    turns: Sequence[Any],
    live_message: str | None,
) -> dtos.ActionEntry:
    entry: dtos.ActionEntry = {
        "id": str(action.id),
        "sequence": cnt(action.sequence),
        "type": truncate_utf8(action.type, 64),
        "workspaceMode": action.workspace_mode or "shared",
        "dependsOnActionIds": [],  # dynamic and linear plans have no dependencies
        "generation": rev(action.generation),
        "contractRevision": rev(action.contract_revision),
        "status": action.status,
        "attempt": cnt(action.attempt),
        "maxAttempts": cnt(action.max_attempts),
        "brief": brief_view(action.brief, BODY_BRIEF_LIMIT if body else BRIEF_LIMIT),
        "contentSummary": content_summary(action),
        "executionStats": execution_stats(identity_runs(action), ledger, run_stats=run_stats),
        "messageCount": 0,  # Action conversations do not exist yet
        "updatedAt": epoch_ms(action.updated_at),
    }
    if item.mode == "linear":
        entry["stageId"] = truncate_utf8(action.type, 64)
    if action.status == "closed" and action.close_reason:
        entry["closeReason"] = sanitize_diagnostic_paths(action.close_reason, 1024)
    if not body:
        return entry
    if reason := action_failure_reason(action):
        entry["failureReason"] = reason
    add_body_fields(entry, action, live_message)
    window, _ = message_window(turns, MAX_TURNS)
    entry["turns"] = window
    return entry
