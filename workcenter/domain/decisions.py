"""Coordinator decisions: parse a model's reply, apply a decision, and fence it
(coordinator.md 4, 5, 9.1-9.4).

``parse_reply`` finds the JSON object in the model's text and runs every rule 9.1
checks at parse, against the snapshot the turn saw: a failure is ``DecisionInvalid``,
whose ``correction`` the turn's second attempt carries. ``apply_decision`` runs the
rules checked at apply against the state now and returns the decision's effects as
one ``Unit`` (WorkItem, Action and ledger events only); a failure is
``DecisionRefused`` and fails the turn. ``conflicts_since`` and ``action_fingerprint``
are the two halves of the fence a turn freezes at begin (5.3). ADR-0025 records the
choices.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

import orjson
from pydantic import ValidationError

from workcenter.domain import action as act
from workcenter.domain import inputs, modes, planning
from workcenter.domain import resource_ledger as rl
from workcenter.domain import work_item as wi
from workcenter.domain.actor import COORDINATOR, Actor
from workcenter.domain.decision_models import (
    AUTOMATIC_TURN as AUTOMATIC_TURN,
)
from workcenter.domain.decision_models import (
    USER_TURN as USER_TURN,
)
from workcenter.domain.decision_models import (
    CoordinatorReply as CoordinatorReply,
)
from workcenter.domain.decision_models import (
    Decision as Decision,
)
from workcenter.domain.decision_models import (
    TurnAuthority as TurnAuthority,
)
from workcenter.domain.decision_models import (
    reply_schema as reply_schema,
)
from workcenter.domain.decision_rules import (
    PATCH_KINDS,
    Patch,
    Stage,
    check_authority,
    check_complete_closures,
    check_create_actions,
    check_guidance,
    check_patch_kind,
    completion_payload,
    normalise_patch,
    record_create_actions,
    record_guidance,
    refined,
    refuse,
)
from workcenter.domain.errors import CommandRefused, DecisionInvalid, DecisionRefused, InvalidInput
from workcenter.domain.model import DomainEvent
from workcenter.domain.unit import Unit

_FENCED = re.compile(r"```json[ \t]*\r?\n?(.*?)```", re.DOTALL | re.IGNORECASE)

# WorkItem events after a turn's fence that refuse its decision (5.3): the contract,
# the plan, Run outcomes (mirrored as Action statuses), the item's status and stop.
# A title change is benign; Coordinator bookkeeping lives in other streams.
CONFLICT_CLASS: tuple[type[DomainEvent], ...] = (
    wi.ContractRefined,
    wi.ActionAdded,
    wi.ActionStatusRecorded,
    wi.StatusChanged,
    wi.WorkItemStarted,
    wi.WorkItemResumed,
    wi.WorkItemCancelled,
    wi.WorkItemCompleted,
    wi.BudgetStopRecorded,
    wi.BudgetStopCleared,
)


# --- parse ---------------------------------------------------------------------------


def _json_object(text: str) -> dict[str, Any]:
    """The whole text, then the first fenced json block, then first "{" to last "}"."""
    candidates = [text]
    fenced = _FENCED.search(text)
    if fenced:
        candidates.append(fenced.group(1))
    first, last = text.find("{"), text.rfind("}")
    if 0 <= first < last:
        candidates.append(text[first : last + 1])
    for candidate in candidates:
        try:
            value = json.loads(candidate)
        except (ValueError, RecursionError):
            continue
        if isinstance(value, dict):
            return value
    raise DecisionInvalid("the reply holds no JSON object")


def reply_object(text: str) -> dict[str, Any]:
    """The JSON object a reply holds, found as ``parse_reply`` finds it (for reading
    a stored reply back); ``DecisionInvalid`` when it holds none."""
    return _json_object(text)


def _validated(raw: dict[str, Any]) -> CoordinatorReply:
    try:
        inputs.payload(raw, "the reply")
    except InvalidInput as error:
        raise DecisionInvalid(str(error)) from None
    try:
        reply = CoordinatorReply.model_validate(raw)
    except ValidationError as error:
        raise DecisionInvalid(inputs.describe(error)) from None
    if not reply.reply.strip():
        raise DecisionInvalid("reply is required")
    if not reply.decision.reason.strip():
        raise DecisionInvalid("decision.reason is required")
    return reply


def parse_reply(
    text: str,
    authority: TurnAuthority,
    item: wi.WorkItemState,
    actions: Mapping[UUID, act.ActionState],
) -> CoordinatorReply:
    """The decision in ``text``, checked by every at-parse rule against the turn's
    snapshot (``item`` and every one of its open Actions, plus any the reply names);
    a patch on a kind that cannot carry one is dropped. Raises ``DecisionInvalid``."""
    if not isinstance(text, str):
        raise DecisionInvalid("the reply is not text")
    reply = _validated(_json_object(text))
    decision = reply.decision
    check_authority(decision, authority, "parse")
    _check_offered(decision, authority, item, "parse")
    patch = normalise_patch(decision.contract_patch, "parse")
    if decision.kind not in PATCH_KINDS and decision.contract_patch is not None:
        decision = decision.model_copy(update={"contract_patch": None})
        reply = reply.model_copy(update={"decision": decision})
        patch = None
    match decision.kind:
        case "create_actions":
            # Whether a delivery target may ride along is an apply rule (9.1); the
            # snapshot's view of the plan is the contract it will be planned under.
            view = patch.model_copy(update={"delivery_target": None}) if patch else None
            unit, changed = refined(
                item, actions, view if view != Patch() else None, at=item.updated_at, by=COORDINATOR
            )
            check_create_actions(decision, unit, changed, "parse")
        case "guide_actions":
            check_guidance(decision, item, actions, "parse")
        case "request_human":
            if not (decision.question or "").strip():
                raise DecisionInvalid("request_human needs a question")
        case "complete":
            check_complete_closures(decision, actions, "parse")
    return reply


# --- apply ---------------------------------------------------------------------------


def offered_kinds(authority: TurnAuthority, item: wi.WorkItemState) -> tuple[str, ...]:
    """The decision kinds a turn may take on ``item``: its authority's (1.2), narrowed to
    ``answer`` on an item that takes no plans (linear) or has not started (a draft).
    An answer changes only the conversation, so any item may take one (4.2). Empty when
    nothing may be decided: such a turn fails before any request is sent."""
    if modes.of(item).takes_plans and item.status != "draft":
        return authority.allowed_kinds
    return tuple(k for k in authority.allowed_kinds if k == "answer")


def _check_offered(
    decision: Decision, authority: TurnAuthority, item: wi.WorkItemState, stage: Stage
) -> None:
    if decision.kind in authority.allowed_kinds and decision.kind not in offered_kinds(
        authority, item
    ):
        why = "is a draft" if item.status == "draft" else "takes no plans"
        refuse(stage, f"this WorkItem {why}; only an answer is possible")


def _refuse_unless_decidable(
    decision: Decision, item: wi.WorkItemState, ledger: rl.LedgerState
) -> None:
    if item.status in wi.TERMINAL:
        refuse("apply", f"WorkItem is {item.status}")
    stop = ledger.stop_reason.code if ledger.stop_reason is not None else item.stopped
    if stop:
        refuse("apply", f"WorkItem is stopped by its budget ({stop})")


def apply_decision(
    reply: CoordinatorReply,
    authority: TurnAuthority,
    item: wi.WorkItemState,
    actions: Mapping[UUID, act.ActionState],
    ledger: rl.LedgerState,
    *,
    at: datetime,
    by: Actor,
) -> Unit:
    """The decision's effects as one Unit, after every at-apply rule (9.1) on the state
    now. ``actions`` must hold every open Action of the item (and any it names).
    The caller has checked the claim and the fences (``conflicts_since``,
    ``action_fingerprint``). ``answer`` returns an empty Unit. Raises ``DecisionRefused``.
    """
    decision = reply.decision
    check_authority(decision, authority, "apply")
    _check_offered(decision, authority, item, "apply")
    _refuse_unless_decidable(decision, item, ledger)
    patch: Patch | None = normalise_patch(decision.contract_patch, "apply")
    check_patch_kind(decision, patch)
    unit, changed = refined(item, actions, patch, at=at, by=by, ledger=ledger)
    match decision.kind:
        case "answer":
            pass
        case "create_actions":
            prepared = check_create_actions(decision, unit, changed, "apply")
            record_create_actions(decision, unit, changed, prepared)
        case "guide_actions":
            targets = check_guidance(decision, unit.item, unit.actions, "apply", ledger)
            record_guidance(unit, targets)
        case "request_human":
            if not (decision.question or "").strip():
                refuse("apply", "request_human needs a question")
            unit.set_status("waiting", None)
        case "complete":
            unit = _complete(decision, item, actions, at=at, by=by)
    return unit


def _complete(
    decision: Decision,
    item: wi.WorkItemState,
    actions: Mapping[UUID, act.ActionState],
    *,
    at: datetime,
    by: Actor,
) -> Unit:
    """All of 4.6 (closures first, then every evidence and progress rule), by the
    same rules as the ``complete`` command."""
    payload = completion_payload(decision)
    try:
        return planning.complete(item, actions, payload, at=at, by=by)
    except (InvalidInput, CommandRefused) as error:
        raise DecisionRefused(str(error)) from None


# --- fences (5.3) --------------------------------------------------------------------


def conflicts_since(item_events_since: Sequence[DomainEvent]) -> list[str]:
    """Names of the WorkItem events after a turn's fence that refuse its decision."""
    return [type(e).__name__ for e in item_events_since if isinstance(e, CONFLICT_CLASS)]


def action_fingerprint(item: wi.WorkItemState, actions: Mapping[UUID, act.ActionState]) -> str:
    """SHA-256 of the sorted (id, generation, status, current Run, lease epoch, result
    Run) of the item's unfinished Actions: a guide of a ready Action moves it even though
    no WorkItem event records it. ``actions`` must hold every open Action."""
    rows = []
    for entry in item.entries(*act.OPEN_STATUSES):
        action = actions.get(entry.action_id)
        if action is None:
            raise ValueError(f"the fingerprint needs every open Action; missing {entry.action_id}")
        rows.append(
            [
                str(action.id),
                action.generation,
                action.status,
                str(action.current_run_id) if action.current_run_id else None,
                action.lease_epoch,
                str(action.result_run_id) if action.result_run_id else None,
            ]
        )
    rows.sort(key=lambda row: str(row[0]))
    return hashlib.sha256(orjson.dumps(rows)).hexdigest()


__all__ = [
    "AUTOMATIC_TURN",
    "CONFLICT_CLASS",
    "USER_TURN",
    "CoordinatorReply",
    "Decision",
    "DecisionInvalid",
    "DecisionRefused",
    "Stage",
    "TurnAuthority",
    "action_fingerprint",
    "apply_decision",
    "conflicts_since",
    "offered_kinds",
    "parse_reply",
    "reply_object",
    "reply_schema",
]
