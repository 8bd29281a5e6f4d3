"""The replay check of Coordinator decisions (ADR-0061): every stored reply judged again
by today's rules on the state it was judged on, rebuilt from the history alone, and
compared with the verdict and the effects the history recorded.

One pass folds the item's events in write order (WorkItem, Actions, ledger,
Conversation); at the first event of each write that recorded a verdict, the states
are exactly those the judging command read, and the reply is parsed, checked and
applied there as the turn did (``decision_verdict``), writing nothing. A decision's
new ids (Actions, mailbox entries) are random: they are matched one to one with the
recorded ones, while every id the state already held must be the same.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from workcenter.domain import action as act
from workcenter.domain import conversation as conv
from workcenter.domain import resource_ledger as rl
from workcenter.domain import work_item as wi
from workcenter.domain.errors import CommandRefused, InvalidInput, ResourceStopError
from workcenter.domain.model import DomainEvent
from workcenter.domain.unit import Unit
from workcenter.service_layer.handlers.coordinator import response_hash, turn_actor
from workcenter.service_layer.handlers.coordinator_rules import DecisionRules, ParsedReply
from workcenter.service_layer.handlers.coordinator_step import CORRECTION_LIMIT
from workcenter.service_layer.handlers.decision_verdict import check_before_apply
from workcenter.service_layer.queries.decision_turns import (
    Attempt,
    Positioned,
    TurnEvents,
    VerdictKind,
    turns,
)

JUDGED: tuple[VerdictKind, ...] = ("applied", "refused_parse", "refused_apply", "fenced")


@dataclass(frozen=True)
class Replayed:
    """One judged reply, replayed: ``same``, or what differs and why."""

    turn_id: UUID
    attempt: int
    position: int  # of the write that recorded the verdict
    recorded: VerdictKind
    recorded_reason: str
    today: VerdictKind
    today_reason: str
    differences: tuple[str, ...] = ()
    # "history" when the stored turn contradicts itself (the history was altered),
    # "rules" when the history is whole and today's rules judge otherwise.
    cause: str | None = None

    @property
    def same(self) -> bool:
        return not self.differences

    def json(self) -> dict[str, Any]:
        return {
            "turn_id": str(self.turn_id),
            "attempt": self.attempt,
            "position": self.position,
            "result": "same" if self.same else "differs",
            "recorded": {"verdict": self.recorded, "reason": self.recorded_reason},
            "today": {"verdict": self.today, "reason": self.today_reason},
            "differences": list(self.differences),
            "cause": self.cause,
        }


@dataclass
class _Today:
    verdict: VerdictKind
    reason: str = ""
    parsed: ParsedReply | None = None
    unit: Unit | None = None


@dataclass
class _States:
    item: wi.WorkItemState | None = None
    actions: dict[UUID, act.ActionState] = field(default_factory=dict)
    ledger: rl.LedgerState | None = None
    conversation: conv.ConversationState | None = None
    item_events: list[DomainEvent] = field(default_factory=list)

    def evolve(self, event: DomainEvent) -> None:
        if isinstance(event, wi.WorkItemEvent):
            self.item = wi.evolve(self.item, event)
            self.item_events.append(event)
        elif isinstance(event, act.ActionEvent):
            action = act.evolve(self.actions.get(event.originator_id), event)
            self.actions[action.id] = action
        elif isinstance(event, rl.LedgerEvent):
            self.ledger = rl.evolve(self.ledger, event)
        elif isinstance(event, conv.ConversationEvent):
            self.conversation = conv.evolve(self.conversation, event)


def replay(events: Sequence[Positioned], rules: DecisionRules) -> list[Replayed]:
    """Every judged reply of the item whose merged events are ``events``, replayed."""
    found = turns(events)
    due: dict[int, list[tuple[TurnEvents, Attempt]]] = {}
    for turn in found:
        for attempt in turn.attempts:
            if attempt.verdict in JUDGED and attempt.verdict_write is not None:
                due.setdefault(attempt.verdict_write, []).append((turn, attempt))
    results: list[Replayed] = []
    states = _States()
    for index, (_, event) in enumerate(events):
        for turn, attempt in due.get(index, ()):
            results.append(_replay_one(events, index, turn, attempt, states, rules))
        states.evolve(event)
    return results


def _replay_one(
    events: Sequence[Positioned],
    index: int,
    turn: TurnEvents,
    attempt: Attempt,
    states: _States,
    rules: DecisionRules,
) -> Replayed:
    recorded = attempt.verdict
    assert recorded is not None
    recorded_reason = (attempt.error or "") if recorded != "applied" else ""
    position, write = events[index]
    state = states.conversation.turns.get(turn.turn_id) if states.conversation else None
    broken: list[str] = []
    text = attempt.response or ""
    if attempt.response_hash != response_hash(text):
        broken.append("the stored reply does not match its response hash")
    item = states.item
    if item is not None and any(e.action_id not in states.actions for e in item.plan):
        # An Action's stream deleted (in the store, or cut from a bundle): a KeyError
        # escaped as a traceback (found by acceptance testing, ADR-0134).
        state = None
    if state is None or item is None or states.ledger is None:
        broken.append("the turn's item, ledger, turn or Actions are missing before its verdict")
        return Replayed(
            turn.turn_id, attempt.attempt, position, recorded, recorded_reason, recorded, "",
            tuple(broken), "history",
        )  # fmt: skip
    today = _judge(rules, state, text, states, parse_only=recorded == "refused_parse", at=write)
    differences = list(broken)
    if today.verdict != recorded:
        differences.append(
            f"recorded {recorded}, today {today.verdict}"
            + (f": {today.reason}" if today.reason else "")
        )
    elif recorded != "applied" and today.reason[: conv.ERROR_LIMIT] != recorded_reason:
        differences.append(f"recorded reason {recorded_reason!r}, today {today.reason!r}")
    elif recorded == "applied":
        differences += _compare_applied(events, turn, today, states, rules)
    cause = None
    if differences:
        cause = "history" if broken else "rules"
    return Replayed(
        turn.turn_id,
        attempt.attempt,
        position,
        recorded,
        recorded_reason,
        today.verdict,
        today.reason,
        tuple(differences),
        cause,
    )


def _judge(
    rules: DecisionRules,
    turn: conv.Turn,
    text: str,
    states: _States,
    *,
    parse_only: bool,
    at: DomainEvent,
) -> _Today:
    """What the turn's parse and apply decide today on ``states`` (nothing written)."""
    item, ledger = states.item, states.ledger
    assert item is not None and ledger is not None
    actions = {e.action_id: states.actions[e.action_id] for e in item.plan}
    try:
        parsed = rules.parse_reply(text, turn, item, actions)
    except InvalidInput as invalid:
        detail = str(getattr(invalid, "correction", "") or invalid)[:CORRECTION_LIMIT]
        return _Today("refused_parse", detail)
    if parse_only:
        return _Today("parsed", "the reply passes parsing today", parsed)
    since = states.item_events[turn.item_version :]
    try:
        check_before_apply(rules, turn, item, actions, ledger, since)
    except CommandRefused as refused:
        fenced = str(refused).startswith("the WorkItem changed while")
        return _Today("fenced" if fenced else "refused_apply", str(refused), parsed)
    except ResourceStopError as stopped:
        return _Today("refused_apply", str(stopped), parsed)
    try:
        unit = rules.apply_decision(
            parsed, turn, item, actions, ledger, at=at.timestamp, by=turn_actor(turn)
        )
    except (CommandRefused, InvalidInput, ResourceStopError) as refused:
        return _Today("refused_apply", str(refused), parsed)
    # The wakes the decision causes join its write, as in the turn's apply.
    unit.attach_conversation(states.conversation)
    return _Today("applied", "", parsed, unit)


def _compare_applied(
    events: Sequence[Positioned],
    turn: TurnEvents,
    today: _Today,
    states: _States,
    rules: DecisionRules,
) -> list[str]:
    assert today.unit is not None and today.parsed is not None
    recorded = [events[i][1] for i in turn.effects]
    known = _known_ids(states)
    mapping: dict[str, str] = {}
    differences = _compare_events(today.unit.events, recorded, known, mapping)
    end = turn.end
    assert isinstance(end, conv.CoordinatorTurnDecided)
    touched = (e.originator_id for e in today.unit.events if isinstance(e, act.ActionEvent))
    summary = rules.summary(today.parsed).model_copy(
        update={"affected_action_ids": tuple(dict.fromkeys(touched))}
    )
    differences += _diff(
        summary.model_dump(mode="json"), end.decision.model_dump(mode="json"), known, mapping,
        "the decision",
    )  # fmt: skip
    if today.parsed.reply[: conv.TEXT_LIMIT] != end.reply:
        differences.append("the reply's text differs from the one the decision recorded")
    return differences


def _known_ids(states: _States) -> set[str]:
    """Ids the state held before the decision: these must match as they are."""
    known: set[str] = set()
    if states.item is not None:
        known.add(str(states.item.id))
    for action in states.actions.values():
        known.add(str(action.id))
        known.update(str(run.id) for run in action.runs)
    if states.conversation is not None:
        known.update(str(e.id) for e in states.conversation.entries)
    return known


def _compare_events(
    today: Sequence[DomainEvent],
    recorded: Sequence[DomainEvent],
    known: set[str],
    mapping: dict[str, str],
) -> list[str]:
    names = [type(e).__name__ for e in recorded]
    if [type(e).__name__ for e in today] != names:
        return [
            f"the decision's effects today are {[type(e).__name__ for e in today]}, "
            f"recorded {names}"
        ]
    if _same_json(today, recorded, known, mapping):
        return []
    differences: list[str] = []
    for number, (mine, theirs) in enumerate(zip(today, recorded, strict=True), 1):
        differences += _diff(
            _dump(mine), _dump(theirs), known, mapping, f"effect {number} ({type(mine).__name__})"
        )
    return differences


def _same_json(
    today: Sequence[DomainEvent],
    recorded: Sequence[DomainEvent],
    known: set[str],
    mapping: dict[str, str],
) -> bool:
    """The fast path: the events' JSON equal once each new stream of today's is named
    as the recorded one at the same place (the mapping is kept when they are)."""
    streams: dict[str, str] = {}
    for mine, theirs in zip(today, recorded, strict=True):
        new, old = str(mine.originator_id), str(theirs.originator_id)
        fresh = new != old and new not in known and old not in known
        if fresh and streams.setdefault(new, old) != old:
            return False
    if len(set(streams.values())) != len(streams):
        return False
    for mine, theirs in zip(today, recorded, strict=True):
        text = _json(mine)
        for new, old in streams.items():
            text = text.replace(new, old)
        if text != _json(theirs):
            return False
    mapping.update(streams)
    return True


def _json(event: DomainEvent) -> str:
    return type(event).__pydantic_serializer__.to_json(event).decode()


def _dump(event: DomainEvent) -> dict[str, Any]:
    data: dict[str, Any] = event.model_dump(mode="json")
    return data


def _diff(
    mine: Any, theirs: Any, known: set[str], mapping: dict[str, str], where: str
) -> list[str]:
    """Where ``mine`` (today's) and ``theirs`` (recorded) differ; a new id of today's
    matches the recorded one it first meets, and only that one."""
    if isinstance(mine, Mapping) and isinstance(theirs, Mapping):
        if mine.keys() != theirs.keys():
            return [f"{where}: fields {sorted(mine)} today, {sorted(theirs)} recorded"]
        return [d for k in mine for d in _diff(mine[k], theirs[k], known, mapping, f"{where}.{k}")]
    if isinstance(mine, list) and isinstance(theirs, list):
        if len(mine) != len(theirs):
            return [f"{where}: {len(mine)} entries today, {len(theirs)} recorded"]
        return [
            d
            for i, (a, b) in enumerate(zip(mine, theirs, strict=True))
            for d in _diff(a, b, known, mapping, f"{where}[{i}]")
        ]
    if isinstance(mine, str) and isinstance(theirs, str) and _new_id(mine, known):
        bound = mapping.get(mine)
        if bound is None and theirs not in known and theirs not in mapping.values():
            mapping[mine] = theirs
            return []
        if bound == theirs:
            return []
    elif mine == theirs:
        return []
    return [f"{where}: {_short(mine)} today, {_short(theirs)} recorded"]


def _new_id(value: str, known: set[str]) -> bool:
    if value in known or len(value) != 36:
        return False
    try:
        UUID(value)
    except ValueError:
        return False
    return True


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."
