"""What the Coordinator's model sees: a bounded snapshot of one WorkItem and the request
built around it (coordinator.md 1.3, 9.6).

The request is a pure function of decision-relevant state: the contract, goal
progress, the Actions with their canonical results, the conversation and the turn's
input. Budget usage, times of bookkeeping and aggregate versions of other streams
are never in it, so a resumed turn rebuilds a byte-identical request and its hash is
the staleness guard for a replayed response (3.4). The snapshot stays within 64 KiB
of canonical JSON: finished Actions go first (oldest first), then briefs (the
compact form), then the oldest conversation lines; if the unfinished Actions still do
not fit, the turn fails with ``SnapshotTooLarge``. ADR-0026 records the layout.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Literal
from uuid import UUID

import orjson

from workcenter.domain import action as act
from workcenter.domain import bounds, lifecycle
from workcenter.domain import resource_ledger as rl
from workcenter.domain import work_item as wi
from workcenter.domain.decision_models import DECISION_KINDS, reply_schema
from workcenter.domain.errors import SnapshotTooLarge
from workcenter.domain.goal_progress import GoalProgress
from workcenter.domain.model import Immutable

SNAPSHOT_LIMIT = 64 * 1024
MAX_ACTIONS = 64
MAX_CRITERIA = 24
MAX_LINES = 20
SNAPSHOT_HEADING = "WorkItem snapshot (JSON):"
PROMPT_HEADING = "This turn:"
CORRECTION_HEADING = "Correction of your previous reply:"
KINDS_HEADING = "Decision kinds possible in this turn:"
PROMPT_LIMIT = 8_000
CORRECTION_LIMIT = 2_000
# Per-field bounds inside the snapshot (characters). The goal is the model's whole, as
# the user wrote it: 4,000 of the 8,000 the contract takes were sent (found by acceptance
# testing, ADR-0144).
GOAL_LIMIT = bounds.GOAL
LINE_LIMIT = 1_000
BRIEF_LIMIT = 1_000
SUMMARY_LIMIT = 1_000
COMPACT_SUMMARY_LIMIT = 200
REASON_LIMIT = 500
LABEL_LIMIT = 200
REF_LIMIT = 300
CHECK_LIMIT = 160
RESULT_ITEMS = 3
_HIDDEN_STATUSES = frozenset({"superseded", "cancelled"})

SYSTEM_PROMPT = """You are the Coordinator of one WorkItem in Workcenter. You have no tools.
Read the snapshot, then answer with exactly one JSON object {reply, decision} that follows
the response schema. `reply` is what the user reads; `decision.reason` says why.

Decision kinds:
- answer: only reply to the user (user turns only; never in an automatic turn).
- create_actions: 1 to 8 next Actions (objective, approach, expectedOutcome; type a slug,
  never triage; workspaceMode read unless it must write). Without a delivery target only
  read Actions are allowed: ask the human first. Repeating the type and objective of an
  Action that still stands needs goalRefs and a rationale of 20+ characters. closeActions
  closes waiting or failed Actions; supersedeActionIds replaces ready, waiting or failed
  ones. Refused while an Action is running.
- guide_actions: guidance to 1 to 8 ready, waiting or failed Actions (a new attempt);
  never to an Action marked noAttemptLeft: ask the human to extend its attempts instead.
- request_human: ask the human a question; the item waits.
- complete: finish the item when every criterion is passed by current evidence: close
  every unfinished Action with closeActions, give one acceptance result per criterion in
  order with its exact text, status passed and the Run ids that prove it.

Only a turn the user began may carry contractPatch (on create_actions or request_human);
otherwise leave contractPatch null. Only request_human may set the delivery target.
Use null for every field your decision does not use."""


class ConversationLine(Immutable):
    """What the snapshot shows of one conversation message."""

    role: Literal["user", "assistant"]
    text: str
    status: str
    at: datetime


class CoordinatorRequestBody(Immutable):
    """The chat messages, the reply schema and the reply's bound in tokens (when the
    provider declares one) sent to the provider; immutable once prepared, and hashed
    as canonical JSON (3.1)."""

    messages: tuple[dict[str, str], ...]
    reply_schema: dict[str, Any]
    max_output_tokens: int | None = None

    def canonical(self) -> bytes:
        body: dict[str, Any] = {"messages": list(self.messages), "reply_schema": self.reply_schema}
        if self.max_output_tokens is not None:  # absent, the hashes of earlier turns hold
            body["max_output_tokens"] = self.max_output_tokens
        return canonical_json(body)

    def hash(self) -> str:
        return hashlib.sha256(self.canonical()).hexdigest()


def canonical_json(value: object) -> bytes:
    """Keys sorted recursively, compact, UTF-8."""
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def _cut(text: str | None, limit: int) -> str | None:
    return None if text is None else text[:limit]


# --- the parts of the snapshot ------------------------------------------------------


def _work_item(item: wi.WorkItemState, progress: GoalProgress) -> dict[str, Any]:
    by_text = {c.criterion: c for c in progress.criteria}
    criteria = []
    for text in item.acceptance_criteria[:MAX_CRITERIA]:
        row = by_text.get(text)
        criteria.append(
            {
                "criterion": text,  # exact: goalRefs and completions cite it verbatim
                "status": row.status if row else "unmet",
                "evidenceRunIds": [str(r) for r in row.evidence_run_ids] if row else [],
            }
        )
    return {
        "id": str(item.id),
        "version": item.version,
        "contractRevision": item.contract_revision,
        "status": item.status,
        "title": item.title,
        "goal": _cut(item.goal, GOAL_LIMIT),
        "deliveryTarget": item.delivery_target,
        "acceptanceCriteria": criteria,
        "criteriaLeftOut": max(0, len(item.acceptance_criteria) - MAX_CRITERIA),
    }


def _progress(progress: GoalProgress) -> dict[str, Any]:
    return {
        "completedCriteria": progress.completed_criteria_count,
        "totalCriteria": progress.total_criteria_count,
        "remainingCriteria": len(progress.remaining_criteria),
        "blockers": [
            {
                "actionId": str(b.action_id),
                "status": b.status,
                "reason": _cut(b.reason, REASON_LIMIT),
            }
            for b in progress.blockers
        ],
        "delivery": {
            "target": progress.delivery.target,
            "status": progress.delivery.status,
            "evidenceRunIds": [str(r) for r in progress.delivery.evidence_run_ids],
        },
    }


def _shown_run(action: act.ActionState) -> act.Run | None:
    """The canonical result Run, else the latest Run that reported something."""
    if action.result_run is not None:
        return action.result_run
    return next((r for r in reversed(action.runs) if r.result is not None), None)


def _result(action: act.ActionState, compact: bool) -> dict[str, Any] | None:
    run = _shown_run(action)
    if run is None or run.result is None:
        return None
    result = run.result
    shown: dict[str, Any] = {
        "runId": str(run.id),
        "outcome": run.status,
        "summary": _cut(result.summary, COMPACT_SUMMARY_LIMIT if compact else SUMMARY_LIMIT),
        "waitingReason": _cut(result.waiting_reason, REASON_LIMIT),
        "error": _cut(result.error, REASON_LIMIT),
    }
    if compact:
        return shown
    return shown | {
        "evidence": [
            {"kind": e.kind, "label": e.label[:LABEL_LIMIT], "status": e.status}
            for e in result.evidence[:RESULT_ITEMS]
        ],
        "outputs": [
            {
                "kind": o.kind,
                "label": o.label[:LABEL_LIMIT],
                "ref": _cut(o.ref, REF_LIMIT),
                "status": o.status,
            }
            for o in result.outputs[:RESULT_ITEMS]
        ],
        # In criteria order: the criterion's text is in the work item.
        "checks": [
            {"status": c.status, "evidence": c.evidence[:CHECK_LIMIT]}
            for c in result.checks[:MAX_CRITERIA]
        ],
        "reviewDecision": result.review_decision,
    }


def _action(action: act.ActionState, compact: bool, spent: bool) -> dict[str, Any]:
    shown: dict[str, Any] = {
        "id": str(action.id),
        "sequence": action.sequence,
        "type": action.type,
        "status": action.status,
        "generation": action.generation,
        "workspaceMode": action.workspace_mode,
        "result": _result(action, compact),
    }
    if spent:
        # Guidance would run it again with no attempt left: the item would stop at its
        # next claim (ADR-0130), as a user's retry or guidance is refused for (ADR-0091).
        shown["noAttemptLeft"] = True
    if not compact:
        shown["brief"] = {
            "objective": action.brief.objective[:BRIEF_LIMIT],
            "approach": action.brief.approach[:BRIEF_LIMIT],
            "expectedOutcome": action.brief.expected_outcome[:BRIEF_LIMIT],
        }
    return shown


def _lines(lines: Sequence[ConversationLine]) -> list[dict[str, Any]]:
    finished = [line for line in lines if line.status != "thinking"]
    # Newest first; a stable sort keeps the given order among equal times.
    newest = sorted(finished, key=lambda line: line.at, reverse=True)[:MAX_LINES]
    return [
        {
            "role": line.role,
            "status": line.status,
            "at": line.at.isoformat(),
            "text": line.text[:LINE_LIMIT],
        }
        for line in newest
    ]


def _listed(
    item: wi.WorkItemState, actions: Mapping[UUID, act.ActionState]
) -> tuple[list[act.ActionState], list[act.ActionState]]:
    """(unfinished by sequence, finished newest first), superseded and cancelled left out."""
    mine = sorted(
        (a for a in actions.values() if a.work_item_id == item.id),
        key=lambda a: (a.sequence, str(a.id)),
    )
    unfinished = [a for a in mine if a.status in act.OPEN_STATUSES]
    finished = [a for a in reversed(mine) if a.status not in act.OPEN_STATUSES | _HIDDEN_STATUSES]
    return unfinished[:MAX_ACTIONS], finished[: max(0, MAX_ACTIONS - len(unfinished))]


def build_snapshot(
    item: wi.WorkItemState,
    actions: Mapping[UUID, act.ActionState],
    progress: GoalProgress,
    lines: Sequence[ConversationLine],
    ledger: rl.LedgerState | None = None,
) -> dict[str, Any]:
    """The largest snapshot within ``SNAPSHOT_LIMIT`` bytes of canonical JSON; with the
    item's ``ledger``, each open Action with no attempt left is marked so."""
    unfinished, finished = _listed(item, actions)
    spent = {
        a.id
        for a in unfinished
        if ledger is not None and lifecycle.no_attempt_left(item, a, ledger)
    }
    known = len(item.plan)
    if len(item.entries(*act.OPEN_STATUSES)) > MAX_ACTIONS:
        raise SnapshotTooLarge(f"more than {MAX_ACTIONS} unfinished Actions")
    fixed = {"workItem": _work_item(item, progress), "goalProgress": _progress(progress)}
    conversation = _lines(lines)

    def snapshot(form: str, shown: list[act.ActionState], kept_lines: int) -> dict[str, Any]:
        compact = form == "compact"
        return fixed | {
            "form": form,
            "actions": [_action(a, compact, a.id in spent) for a in shown],
            "actionsLeftOut": known - len(shown),
            "conversation": conversation[:kept_lines],
        }

    def fits(value: dict[str, Any]) -> bool:
        return len(canonical_json(value)) <= SNAPSHOT_LIMIT

    for form in ("full", "compact"):
        for kept in range(len(finished), -1, -1):  # the oldest finished go first
            candidate = snapshot(form, unfinished + finished[:kept], len(conversation))
            if fits(candidate):
                return candidate
    for kept_lines in range(len(conversation) - 1, -1, -1):
        candidate = snapshot("compact", unfinished, kept_lines)
        if fits(candidate):
            return candidate
    raise SnapshotTooLarge(
        f"the {len(unfinished)} unfinished Actions do not fit the Coordinator's "
        f"{SNAPSHOT_LIMIT // 1024} KiB snapshot"
    )


def build_request(
    item: wi.WorkItemState,
    actions: Mapping[UUID, act.ActionState],
    progress: GoalProgress,
    lines: Sequence[ConversationLine],
    prompt: str,
    correction: str | None,
    *,
    kinds: tuple[str, ...] = DECISION_KINDS,
    max_output_tokens: int | None = None,
    ledger: rl.LedgerState | None = None,
) -> CoordinatorRequestBody:
    """The request of one provider turn: the fixed instructions, then the snapshot under
    a fixed heading, the turn's input (the latest user text, or the automatic trigger as
    JSON), the decision kinds the turn may take when they are fewer than all (the reply
    schema offers only those) and, on a second attempt, the correction. Raises
    ``SnapshotTooLarge``."""
    snapshot = canonical_json(build_snapshot(item, actions, progress, lines, ledger)).decode()
    parts = [f"{SNAPSHOT_HEADING}\n{snapshot}", f"{PROMPT_HEADING}\n{prompt[:PROMPT_LIMIT]}"]
    if kinds != DECISION_KINDS:
        parts.append(f"{KINDS_HEADING} {', '.join(kinds)}")
    if correction:
        parts.append(f"{CORRECTION_HEADING}\n{correction[:CORRECTION_LIMIT]}")
    return CoordinatorRequestBody(
        messages=(
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": "\n\n".join(parts)},
        ),
        reply_schema=reply_schema(kinds),
        max_output_tokens=max_output_tokens,
    )
