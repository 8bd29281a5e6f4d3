"""A unit of change: the events one command appends to a WorkItem and its Actions.

A command builds its events here step by step; each step sees the states the
earlier steps produced, and the whole unit is saved in one atomic write.
Action status changes are mirrored onto the WorkItem automatically, so every
claim, finish or invalidation also moves the WorkItem's version.

The Unit carries the command's actor (``by``), and every event of the unit is
stamped with it when decided, mirrors included: they are part of the same
decision. A budget stop is the one exception: the ledger records it as the
system's, caused by the command's actor, and its mirrors on the WorkItem take
the stop's actor.

A unit may also wake the item's Coordinator (a mailbox entry on its Conversation)
or retire its thinking turns: the domain records the wake, and the Conversation
events are decided once the service has attached the Conversation's state, in
the same write as their cause.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any
from uuid import UUID

from workcenter.domain import action as act
from workcenter.domain import conversation as conv
from workcenter.domain import resource_ledger as rl
from workcenter.domain import turns
from workcenter.domain import work_item as wi
from workcenter.domain.actor import Actor
from workcenter.domain.model import DomainEvent, Emitter, Immutable


class Wake(Immutable):
    """A cause that wakes the Coordinator once (coordinator.md 2.1)."""

    kind: str
    source_key: str
    trigger: dict[str, Any]


class Unit:
    def __init__(
        self,
        item: wi.WorkItemState,
        actions: Mapping[UUID, act.ActionState],
        at: datetime,
        ledger: rl.LedgerState | None = None,
        *,
        by: Actor,
    ) -> None:
        self.at = at
        self.by = by
        self.item = item
        self.actions: dict[UUID, act.ActionState] = dict(actions)
        self.ledger = ledger
        self.events: list[DomainEvent] = []
        # The item before its latest event, while that event is the last one here: a
        # status that follows from it is merged into it (``set_status``).
        self._item_before_last: wi.WorkItemState | None = None
        self.wakes: list[Wake] = []
        self.retire_turns = False
        self.talk: turns.Decider | None = None

    # --- the Conversation --------------------------------------------------------

    @property
    def conversation(self) -> conv.ConversationState | None:
        return self.talk.state if self.talk is not None else None

    @property
    def needs_conversation(self) -> bool:
        """It woke the Coordinator or retires turns, and the state is not attached yet."""
        return self.talk is None and (bool(self.wakes) or self.retire_turns)

    def attach_conversation(self, state: conv.ConversationState | None) -> turns.Decider:
        """Decide the Conversation events of this unit against ``state`` (None: no stream yet)."""
        if self.talk is None:
            self.talk = turns.Decider(state, self.item.id, self.at, self.by, sink=self.events)
            self._deliver()
        return self.talk

    def wake(self, kind: str, source_key: str, **trigger: Any) -> None:
        self.wakes.append(Wake(kind=kind, source_key=source_key, trigger=trigger))
        self._deliver()

    def retire_thinking_turns(self) -> None:
        self.retire_turns = True
        self._deliver()

    def _deliver(self) -> None:
        if self.talk is None:
            return
        if self.retire_turns:
            for provider_turn in self.talk.retire_thinking():
                self.settle_dispatch(provider_turn.id, None, complete=False)
            self.retire_turns = False
        for wake in self.wakes:
            self.talk.enqueue(wake.kind, wake.source_key, wake.trigger)
        self.wakes.clear()

    @classmethod
    def new_item(cls, events: list[wi.WorkItemEvent], at: datetime, *, by: Actor) -> Unit:
        item = wi.fold(None, events)
        assert item is not None
        unit = cls(item, {}, at, by=by)
        unit.events.extend(events)
        return unit

    def item_event(
        self, event_class: type[wi.WorkItemEvent], by: Actor | None = None, **fields: object
    ) -> None:
        emit: Emitter[wi.WorkItemEvent] = Emitter.after(self.item, self.at, by or self.by)
        self.apply_item(emit(event_class, **fields))

    def apply_item(self, event: wi.WorkItemEvent) -> None:
        self._item_before_last = self.item
        self.item = wi.evolve(self.item, event)
        self.events.append(event)

    def apply_action(self, events: list[act.ActionEvent]) -> None:
        for event in events:
            before = self.actions.get(event.originator_id)
            after = act.evolve(before, event)
            self.actions[after.id] = after
            self.events.append(event)
            if before is None:
                self.item_event(
                    wi.ActionAdded,
                    action_id=after.id,
                    sequence=after.sequence,
                    type=after.type,
                    current=False,
                )
            elif after.status != before.status:
                self.item_event(
                    wi.ActionStatusRecorded, action_id=after.id, status=after.status, current=False
                )

    def settle_dispatch(
        self, provider_turn_id: UUID, usage: rl.Usage | None, *, complete: bool
    ) -> None:
        """A Coordinator dispatch's reservations settled, the newest with ``usage``; a
        dispatch given up (None, not complete) is charged at least their estimate."""
        if self.ledger is not None:
            self.apply_ledger(
                rl.settle_coordinator(
                    self.ledger,
                    turn_id=str(provider_turn_id),
                    usage=usage,
                    complete=complete,
                    at=self.at,
                    by=self.by,
                )
            )

    def apply_ledger(self, events: list[rl.LedgerEvent] | tuple[rl.LedgerEvent, ...]) -> None:
        """Ledger events; a stop or resume is mirrored onto the WorkItem in the same write."""
        for event in events:
            self.ledger = rl.evolve(self.ledger, event)
            self.events.append(event)
            if isinstance(event, rl.ExecutionStopped):
                self.item_event(wi.BudgetStopRecorded, event.actor, code=event.code)
                if self.item.status not in wi.TERMINAL:
                    self.set_status("needs_attention", self.item.current_action_id, event.actor)
            elif isinstance(event, rl.ExecutionResumed) and self.item.stopped:
                self.item_event(wi.BudgetStopCleared)

    def set_status(
        self,
        status: wi.WorkItemStatus,
        current_action_id: UUID | None,
        by: Actor | None = None,
    ) -> None:
        if self.item.stopped and status not in wi.TERMINAL:
            status = "needs_attention"  # while stopped an item only needs attention
        if (self.item.status, self.item.current_action_id) == (status, current_action_id):
            return
        if not self._carried(status, current_action_id, by):
            self.item_event(
                wi.StatusChanged, by, status=status, current_action_id=current_action_id
            )

    def _carried(self, status: str, current_action_id: UUID | None, by: Actor | None) -> bool:
        """Merge the change into the event just recorded when it follows from it: the Action
        that was just added (ready) or whose status was just recorded (ready or running)
        becomes current with that status. An event, not a status, is the fact (ADR-0046)."""
        last = self.events[-1] if self.events else None
        before = self._item_before_last
        if (
            not isinstance(last, wi.ActionAdded | wi.ActionStatusRecorded)
            or before is None
            or last.current
            or last.action_id != current_action_id
            or (by or self.by) != last.actor  # the status's actor is the event's
        ):
            return False
        carried = "ready" if isinstance(last, wi.ActionAdded) else last.status
        if carried != status or status not in wi.CARRIED_STATUSES:
            return False
        merged = last.model_copy(update={"current": True})
        self.events[-1] = merged
        self.item = wi.evolve(before, merged)
        return True

    def derive_status(self) -> None:
        """Dynamic items derive their status from their Actions after every change."""
        self.set_status(*wi.derived_status(self.item))

    def action(self, action_id: UUID) -> act.ActionState:
        return self.actions[action_id]

    def plan_action(
        self,
        *,
        type: str,
        brief: act.Brief,
        workspace_mode: act.WorkspaceMode = "shared",
        max_attempts: int = act.DEFAULT_MAX_ATTEMPTS,
        context: tuple[act.ContextEntry, ...] = (),
        source_action_ids: tuple[UUID, ...] = (),
    ) -> act.ActionState:
        events = act.plan(
            work_item_id=self.item.id,
            sequence=self.item.next_sequence,
            type=type,
            brief=brief,
            workspace_mode=workspace_mode,
            max_attempts=max_attempts,
            contract_revision=self.item.contract_revision,
            context=context,
            at=self.at,
            by=self.by,
            source_action_ids=source_action_ids,
        )
        self.apply_action(list(events))
        return self.actions[events[0].originator_id]
