"""The 512 KiB budget of every browser DTO (read-models.md 2.6), with its holes closed.

``enforce_budget`` leaves a DTO that fits untouched. Otherwise it sets
``truncated: true`` and walks a ladder, measuring ``len(orjson.dumps(dto))``
after every step, until the DTO fits:

1. shrink ``actionStats`` entries to {id, generation, status, progressRevision, attempt};
2. strip the body fields of every action but the kept one, cut their briefs to
   256 B, and reduce their mainline entries to {actionId, type, status};
3. strip the kept action's body fields, keeping its failure;
4. (new) keep the newest 20 messages, their text cut to 2 KiB and error to 1 KiB;
5. keep only the kept action and set ``omittedActionCount``;
6. drop its brief and failure, cut title, goal, waitingReason and actionSummary to
   4 KiB, empty acceptanceCriteria, linkedSessionIds, attachments and (new)
   messages, and (new) compact goalProgress, finalResult, outputs, mainline and
   executionControl;
7. the minimal item, re-measured (new): without executionControl and with title
   and goal at 256 B if needed, then only {id, revision, truncated, actions}.

The result always fits for any budget of at least ``MIN_BUDGET`` bytes. The input
is never mutated.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any, Literal, get_args

import orjson

from workcenter.projections.dto_models import BriefKey, BriefView
from workcenter.projections.execution import STATS_KEYS
from workcenter.projections.sanitize import bounded_id, cnt, rev, truncate_utf8, utf8_len

MAX_DTO_BYTES = 512 * 1024
MIN_BUDGET = 2 * 1024
BODY_FIELDS: tuple[str, ...] = ("response", "messages", "turns", "liveMessage", "failure")
SHRUNK_STATS_KEYS: tuple[str, ...] = ("id", "generation", "status", "progressRevision", "attempt")
BRIEF_KEYS: tuple[BriefKey, ...] = get_args(BriefKey)
_ENVELOPE_KEYS: tuple[str, ...] = ("actionId", "runId", "clientMessageId")
_KB = 1024

DtoKind = Literal["summary", "detail", "broadcast"]
Dto = dict[str, Any]


def dto_size(dto: Mapping[str, Any]) -> int:
    return len(orjson.dumps(dto))


def cut_brief(brief: Mapping[str, Any], limit: int) -> BriefView:
    """Objective, approach and expected outcome, together at most ``limit`` bytes."""
    kept: BriefView = {}
    room = limit
    for key in BRIEF_KEYS:
        text = truncate_utf8(brief.get(key), room) if isinstance(brief.get(key), str) else ""
        if text:
            kept[key] = text
            room -= utf8_len(text)
    return kept


def _cut(value: Any, limit: int) -> Any:
    return truncate_utf8(value, limit) if isinstance(value, str) else value


def _dicts(value: Any) -> list[Dto]:
    return [entry for entry in value if isinstance(entry, dict)] if isinstance(value, list) else []


def _entry_lists(item: Dto) -> list[list[Any]]:
    return [item[key] for key in ("actionStats", "actions") if isinstance(item.get(key), list)]


def _mainline_actions(item: Dto) -> list[Dto]:
    mainline = item.get("mainline")
    return _dicts(mainline.get("actions")) if isinstance(mainline, dict) else []


def _action_total(item: Dto) -> int:
    lists = _entry_lists(item)
    return max((len(entries) for entries in lists), default=0)


def _kept_id(item: Dto) -> Any:
    """The body or current action, else the last one."""
    entries = _dicts(item.get("actions")) or _dicts(item.get("actionStats"))
    present = [entry.get("id") for entry in entries]
    current = item.get("currentActionId")
    if current is not None and current in present:
        return current
    for entry in entries:
        if any(field in entry for field in BODY_FIELDS):
            return entry.get("id")
    return present[-1] if present else None


# --- the ladder ----------------------------------------------------------------------


def _shrink_stats(item: Dto, kept: Any) -> None:
    if isinstance(item.get("actionStats"), list):
        item["actionStats"] = [
            {key: entry[key] for key in SHRUNK_STATS_KEYS if key in entry}
            for entry in _dicts(item["actionStats"])
        ]


def _strip_others(item: Dto, kept: Any) -> None:
    for entries in _entry_lists(item):
        for entry in _dicts(entries):
            if entry.get("id") == kept:
                continue
            for field in BODY_FIELDS:
                entry.pop(field, None)
            if isinstance(entry.get("brief"), dict):
                entry["brief"] = cut_brief(entry["brief"], 256)
    for entry in _mainline_actions(item):
        if entry.get("actionId") != kept:
            for key in [k for k in entry if k not in ("actionId", "type", "status")]:
                del entry[key]


def _strip_kept(item: Dto, kept: Any) -> None:
    for entries in _entry_lists(item):
        for entry in _dicts(entries):
            if entry.get("id") == kept:
                for field in BODY_FIELDS:
                    if field != "failure":
                        entry.pop(field, None)


def _trim_message(message: Dto) -> Dto:
    message = dict(message)
    message["text"] = _cut(message.get("text", ""), 2 * _KB)
    if "error" in message:
        message["error"] = _cut(message["error"], _KB)
    decision = message.get("decision")
    if isinstance(decision, dict):
        decision = dict(decision)
        for key in ("kind", "reason", "question"):
            if key in decision:
                decision[key] = _cut(decision[key], 512)
        if isinstance(decision.get("affectedActionIds"), list):
            decision["affectedActionIds"] = decision["affectedActionIds"][:8]
        message["decision"] = decision
    return message


def _omit_messages(item: Dto, keep: int) -> None:
    messages = item.get("messages")
    if not isinstance(messages, list):
        return
    kept = messages[len(messages) - keep :] if keep else []
    dropped = len(messages) - len(kept)
    if dropped:
        item["omittedMessageCount"] = cnt(item.get("omittedMessageCount")) + dropped
    item["messages"] = [_trim_message(m) for m in _dicts(kept)]


def _trim_messages(item: Dto, kept: Any) -> None:
    _omit_messages(item, 20)


def _only_kept(item: Dto, kept: Any) -> None:
    total = _action_total(item)
    for key in ("actionStats", "actions"):
        entries = _dicts(item.get(key))
        if key in item:
            chosen = [e for e in entries if e.get("id") == kept] or entries[-1:]
            item[key] = chosen[:1]
    mainline = item.get("mainline")
    if isinstance(mainline, dict) and isinstance(mainline.get("actions"), list):
        mainline["actions"] = [e for e in _mainline_actions(item) if e.get("actionId") == kept][:1]
    item["omittedActionCount"] = max(0, total - _action_total(item))


def _compact_progress(progress: Dto) -> None:
    criteria = _dicts(progress.get("criteria"))
    for entry in criteria:
        entry["criterion"] = _cut(entry.get("criterion", ""), 128)
        for key in ("evidenceRunIds", "conflictingRunIds"):
            if isinstance(entry.get(key), list):
                entry[key] = entry[key][:4]
    progress["criteria"] = criteria
    if isinstance(progress.get("remainingCriteria"), list):
        progress["remainingCriteria"] = [_cut(t, 128) for t in progress["remainingCriteria"]]
    if isinstance(progress.get("evidenceRunIds"), list):
        progress["evidenceRunIds"] = progress["evidenceRunIds"][:16]
    blockers = _dicts(progress.get("blockers"))
    if len(blockers) > 16:
        progress["omittedBlockerCount"] = len(blockers) - 16
    progress["blockers"] = [b | {"reason": _cut(b.get("reason", ""), 512)} for b in blockers[:16]]
    delivery = progress.get("delivery")
    if isinstance(delivery, dict) and isinstance(delivery.get("evidenceRunIds"), list):
        delivery["evidenceRunIds"] = delivery["evidenceRunIds"][:8]


def _compact_final(final: Dto) -> None:
    final["summary"] = _cut(final.get("summary", ""), 4 * _KB)
    final["acceptanceResults"] = [
        entry
        | {
            "criterion": _cut(entry.get("criterion", ""), 256),
            "evidenceRunIds": list(entry.get("evidenceRunIds") or [])[:4],
        }
        for entry in _dicts(final.get("acceptanceResults"))[:24]
    ]
    for key, keep in (("evidenceRunIds", 16), ("outputs", 10)):
        if isinstance(final.get(key), list):
            final[key] = final[key][:keep]
    final["responses"] = []
    if isinstance(final.get("residualRisks"), list):
        final["residualRisks"] = [_cut(risk, 512) for risk in final["residualRisks"][:8]]


def _compact(item: Dto, kept: Any) -> None:
    for entries in _entry_lists(item):
        for entry in _dicts(entries):
            entry.pop("brief", None)
            entry.pop("failure", None)
    for key in ("title", "goal", "waitingReason", "actionSummary"):
        if key in item:
            item[key] = _cut(item[key], 4 * _KB)
    for key in ("acceptanceCriteria", "linkedSessionIds", "attachments"):
        if key in item:
            item[key] = []
    _omit_messages(item, 0)
    if "failureReason" in item:
        item["failureReason"] = _cut(item["failureReason"], 512)
    if isinstance(item.get("currentAction"), dict):
        item["currentAction"]["objective"] = _cut(item["currentAction"].get("objective"), 256)
    if isinstance(item.get("goalProgress"), dict):
        _compact_progress(item["goalProgress"])
    if isinstance(item.get("finalResult"), dict):
        _compact_final(item["finalResult"])
    if isinstance(item.get("outputs"), list):
        item["outputs"] = item["outputs"][:10]
    mainline = item.get("mainline")
    if isinstance(mainline, dict):
        mainline["criteria"] = []
        for entry in _mainline_actions(item):
            if isinstance(entry.get("result"), dict):
                result = entry["result"]
                entry["result"] = {k: result[k] for k in ("runId", "status") if k in result}
    control = item.get("executionControl")
    if isinstance(control, dict) and isinstance(control.get("actionAttempts"), list):
        attempts = control["actionAttempts"]
        if len(attempts) > 8:
            omitted = cnt(control.get("omittedActionAttemptCount")) + len(attempts) - 8
            control["actionAttempts"] = attempts[:8]
            control["omittedActionAttemptCount"] = omitted


_STEPS: tuple[Callable[[Dto, Any], None], ...] = (
    _shrink_stats,
    _strip_others,
    _strip_kept,
    _trim_messages,
    _only_kept,
    _compact,
)


# --- fallbacks -----------------------------------------------------------------------


def _minimal(item: Dto, omitted: int, *, text_limit: int, control: bool) -> Dto:
    stats = item.get("executionStats")
    minimal: Dto = {
        "id": bounded_id(item.get("id")),
        "revision": rev(item.get("revision")),
        "title": truncate_utf8(item.get("title"), text_limit),
        "goal": truncate_utf8(item.get("goal"), text_limit),
        "status": truncate_utf8(item.get("status"), 64),
    }
    if item.get("currentActionId"):
        minimal["currentActionId"] = bounded_id(item["currentActionId"])
    minimal["executionStats"] = {
        key: cnt(stats.get(key) if isinstance(stats, dict) else 0) for key in STATS_KEYS
    }
    if control and isinstance(item.get("executionControl"), dict):
        minimal["executionControl"] = item["executionControl"]
    minimal |= {
        "actionCount": cnt(item.get("actionCount")),
        "actions": [],
        "truncated": True,
        "omittedActionCount": omitted,
        "createdAt": cnt(item.get("createdAt")),
        "updatedAt": cnt(item.get("updatedAt")),
        "coordinatorRevision": cnt(item.get("coordinatorRevision")),
    }
    return minimal


def _bare(item: Dto, omitted: int) -> Dto:
    return {
        "id": bounded_id(item.get("id")),
        "revision": rev(item.get("revision")),
        "actions": [],
        "truncated": True,
        "omittedActionCount": omitted,
    }


def _bounded_envelope(envelope: Dto) -> Dto:
    bounded: Dto = {"type": truncate_utf8(envelope.get("type"), 128)}
    for key in _ENVELOPE_KEYS:
        if envelope.get(key):
            bounded[key] = bounded_id(envelope[key])
    return bounded


def enforce_budget(
    dto: Mapping[str, Any], kind: DtoKind, *, budget: int = MAX_DTO_BYTES
) -> dict[str, Any]:
    """``dto`` itself when it fits in ``budget`` bytes; otherwise a trimmed copy with
    ``truncated: true`` that fits (for a broadcast, its ``workItem`` is trimmed and
    carries the flag, and the envelope is kept)."""
    if dto_size(dto) <= budget:
        return dict(dto)
    envelope: Dto | None = None
    if kind == "broadcast":
        envelope = {key: value for key, value in dto.items() if key != "workItem"}
        work_item = dto.get("workItem")
        item: Dto = copy.deepcopy(dict(work_item)) if isinstance(work_item, Mapping) else {}
    else:
        item = copy.deepcopy(dict(dto))

    def wrap(candidate: Dto, outer: Dto | None = envelope) -> Dto:
        return candidate if outer is None else {**outer, "workItem": candidate}

    total = _action_total(item)
    item["truncated"] = True
    kept = _kept_id(item)
    for step in _STEPS:
        step(item, kept)
        if dto_size(wrap(item)) <= budget:
            return wrap(item)
    outer = _bounded_envelope(envelope) if envelope is not None else None
    fallbacks = (
        _minimal(item, total, text_limit=4 * _KB, control=True),
        _minimal(item, total, text_limit=4 * _KB, control=False),
        _minimal(item, total, text_limit=256, control=False),
    )
    for candidate in fallbacks:
        if dto_size(wrap(candidate, outer)) <= budget:
            return wrap(candidate, outer)
    return wrap(_bare(item, total), outer)
