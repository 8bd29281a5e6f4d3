"""Decision provenance (ADR-0061): for each Coordinator turn of an item, what woke it,
the versions its request was built from, each provider attempt and what it cost,
the reply's decision, the verdict and the events it caused, read from the history
and masked like every audit row (``projections/sanitize.py``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from workcenter.domain import action as act
from workcenter.domain import conversation as conv
from workcenter.domain import decisions
from workcenter.domain import resource_ledger as rl
from workcenter.domain import work_item as wi
from workcenter.domain.errors import DecisionInvalid
from workcenter.projections.sanitize import sanitize_record
from workcenter.service_layer.queries.decision_turns import Attempt, Positioned, TurnEvents, turns


def provenance(events: Sequence[Positioned]) -> list[dict[str, Any]]:
    """One masked record per Coordinator turn of the item, in the order they began."""
    found = turns(events)
    wanted = {a.prepared: a for t in found for a in t.attempts}
    seen: dict[int, dict[str, Any]] = {}
    item: wi.WorkItemState | None = None
    ledger: rl.LedgerState | None = None
    actions: dict[Any, int] = {}
    for index, (_, event) in enumerate(events):
        if index in wanted:
            seen[index] = _versions(item, ledger, actions)
        if isinstance(event, wi.WorkItemEvent):
            item = wi.evolve(item, event)
        elif isinstance(event, rl.LedgerEvent):
            ledger = rl.evolve(ledger, event)
        elif isinstance(event, act.ActionEvent):
            actions[event.originator_id] = event.originator_version
    return [sanitize_record(_turn(t, events, seen, ledger)) for t in found]


def _versions(
    item: wi.WorkItemState | None, ledger: rl.LedgerState | None, actions: dict[Any, int]
) -> dict[str, Any]:
    """The versions a request prepared now was built from."""
    if item is None:
        return {}
    return {
        "item_version": item.version,
        "contract_revision": item.contract_revision,
        "plan": {str(e.action_id): actions.get(e.action_id) for e in item.plan},
        "ledger_version": ledger.version if ledger is not None else None,
    }


def _turn(
    turn: TurnEvents,
    events: Sequence[Positioned],
    seen: dict[int, dict[str, Any]],
    ledger: rl.LedgerState | None,
) -> dict[str, Any]:
    begun = turn.event
    first = turn.attempts[0] if turn.attempts else None
    answered = next((a for a in reversed(turn.attempts) if a.responded is not None), None)
    return {
        "turn_id": str(turn.turn_id),
        "position": events[turn.begun][0],
        "wake": {
            "kind": turn.wake_kind,
            "user_originated": begun.user_originated,
            "automatic": begun.automatic,
            "user_message": begun.user_text,
            "trigger": begun.trigger,
        },
        "fence": {"item_version": begun.item_version, "fingerprint": begun.fingerprint},
        "request": {
            **(seen.get(first.prepared, {}) if first else {}),
            "hash": first.request_hash if first else None,
            "size": first.request_size if first else None,
        },
        "attempts": [_attempt(a, events, ledger) for a in turn.attempts],
        "decision": _decision(answered.response if answered else None),
        "verdict": {
            "kind": turn.verdict,
            "reason": turn.reason,
            "position": events[turn.ended][0] if turn.ended is not None else None,
        },
        "created": [
            str(e.action_id)
            for e in (events[i][1] for i in turn.effects)
            if isinstance(e, wi.ActionAdded)
        ],
        "affected": [str(i) for i in turn.end.decision.affected_action_ids]
        if isinstance(turn.end, conv.CoordinatorTurnDecided)
        else [],
        "effects": [_effect(*events[i]) for i in turn.effects],
    }


def _attempt(
    attempt: Attempt, events: Sequence[Positioned], ledger: rl.LedgerState | None
) -> dict[str, Any]:
    ids = rl.turn_request_ids(ledger, str(attempt.provider_turn_id)) if ledger else []
    reservations = [ledger.reservations[i] for i in ids] if ledger else []
    return {
        "attempt": attempt.attempt,
        "provider_turn_id": str(attempt.provider_turn_id),
        "position": events[attempt.prepared][0],
        "status": attempt.status,
        "verdict": attempt.verdict,
        "requests": len(reservations),
        "charged": sum(r.charged_tokens for r in reservations),
        "usage": [r.usage.model_dump(mode="json") if r.usage else None for r in reservations],
        "request_hash": attempt.request_hash,
        "response_hash": attempt.response_hash,
        "error": attempt.error,
    }


def _decision(text: str | None) -> dict[str, Any] | None:
    """What the reply proposed, read as the decision's JSON (a reply that holds none
    shows none)."""
    if text is None:
        return None
    try:
        raw = decisions.reply_object(text)
    except DecisionInvalid:
        return None
    decision = raw.get("decision")
    if not isinstance(decision, dict):
        return None
    completion = decision.get("completion") if isinstance(decision.get("completion"), dict) else {}
    assert isinstance(completion, dict)
    return {
        "kind": decision.get("kind"),
        "reason": decision.get("reason"),
        "question": decision.get("question"),
        "actions": [
            {"type": a.get("type"), "objective": a.get("objective")}
            for a in _dicts(decision.get("actions"))
        ],
        "guided": [g.get("actionId") for g in _dicts(decision.get("guidance"))],
        "closed": [c.get("actionId") for c in _dicts(decision.get("closeActions"))],
        "superseded": decision.get("supersedeActionIds"),
        "contract_patch": decision.get("contractPatch"),
        "citations": {
            "evidence_run_ids": completion.get("evidenceRunIds"),
            "acceptance_results": completion.get("acceptanceResults"),
        },
    }


def _dicts(value: object) -> list[dict[str, Any]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _effect(position: int, event: Any) -> dict[str, Any]:
    kind = (
        "work_item"
        if isinstance(event, wi.WorkItemEvent)
        else "action"
        if isinstance(event, act.ActionEvent)
        else "ledger"
        if isinstance(event, rl.LedgerEvent)
        else "conversation"
        if isinstance(event, conv.ConversationEvent)
        else "other"
    )
    return {
        "position": position,
        "type": type(event).__name__,
        "stream": kind,
        "id": str(event.originator_id),
        "version": event.originator_version,
    }
