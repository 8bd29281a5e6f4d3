"""The mailbox read model: which WorkItems have a Coordinator wake due.

The Coordinator loop asks it for due items so it never loads every
Conversation; like claims from the work queue, it never trusts a row: the
command claims on the Conversation itself and moves on when a row was stale.
Written inline in each command's transaction (from the events in memory).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar
from uuid import UUID

from eventsourcing.dispatch import singledispatchmethod
from eventsourcing.persistence import Tracking
from eventsourcing.projection import Projection

from workcenter.domain import conversation as conv
from workcenter.domain import resource_ledger as rl
from workcenter.domain import work_item as wi
from workcenter.domain.model import DomainEvent
from workcenter.projections.tracked import TrackedView


def _ts(moment: datetime | None) -> float | None:
    return None if moment is None else moment.timestamp()


class MailboxView(TrackedView):
    TABLES: ClassVar[tuple[str, ...]] = ("mb_entries", "mb_items")
    # Its rows follow from the events alone (ADR-0070).
    ROWS_NEED_POSITIONS = False

    def table_statements(self) -> list[str]:
        return [
            "CREATE TABLE IF NOT EXISTS mb_entries ("
            " entry_id TEXT PRIMARY KEY, work_item_id TEXT NOT NULL, sequence INTEGER NOT NULL,"
            " kind TEXT NOT NULL, status TEXT NOT NULL, lease_expires_at REAL,"
            " created_at REAL NOT NULL, has_turn INTEGER NOT NULL DEFAULT 0)",
            "CREATE INDEX IF NOT EXISTS mb_open ON mb_entries (created_at)"
            " WHERE status IN ('pending', 'claimed')",
            # One row per WorkItem: what gates its automatic turns (coordinator.md 6.3).
            "CREATE TABLE IF NOT EXISTS mb_items ("
            " work_item_id TEXT PRIMARY KEY, conversation_id TEXT NOT NULL UNIQUE,"
            " ledger_id TEXT NOT NULL UNIQUE, closed INTEGER NOT NULL DEFAULT 0,"
            " stopped INTEGER NOT NULL DEFAULT 0, retry_after REAL)",
        ]

    # --- writing --------------------------------------------------------------

    def _apply(self, c: Any, event: DomainEvent) -> None:
        if isinstance(event, conv.ConversationEvent):
            self._apply_conversation(c, event)
        elif isinstance(event, wi.WorkItemEvent):
            self._apply_item(c, event)
        elif isinstance(event, rl.LedgerEvent):
            self._apply_ledger(c, event)

    def _apply_conversation(self, c: Any, event: conv.ConversationEvent) -> None:
        if isinstance(event, conv.ConversationOpened):
            item_id = event.work_item_id
            c.execute(
                "INSERT INTO mb_items (work_item_id, conversation_id, ledger_id) VALUES (?, ?, ?)",
                (item_id.hex, event.originator_id.hex, rl.ledger_id_for(item_id).hex),
            )
        elif isinstance(event, conv.MailboxEntryEnqueued):
            c.execute(
                "INSERT INTO mb_entries SELECT ?, work_item_id, ?, ?, 'pending', NULL, ?, ?"
                " FROM mb_items WHERE conversation_id = ?",
                (
                    event.entry_id.hex,
                    event.sequence,
                    event.kind,
                    event.timestamp.timestamp(),
                    int(event.turn_id is not None),
                    event.originator_id.hex,
                ),
            )
        elif isinstance(event, conv.CoordinatorTurnBegun):
            c.execute(
                "UPDATE mb_entries SET has_turn = 1 WHERE entry_id = ?", (event.entry_id.hex,)
            )
        elif isinstance(event, conv.MailboxEntryClaimed | conv.MailboxLeaseRenewed):
            self._set(c, event.entry_id, "claimed", _ts(event.lease_expires_at))
        elif isinstance(event, conv.MailboxEntryReleased):
            self._set(c, event.entry_id, "pending", None)
            if event.detach_turn:
                c.execute(
                    "UPDATE mb_entries SET has_turn = 0 WHERE entry_id = ?", (event.entry_id.hex,)
                )
        elif isinstance(event, conv.MailboxEntryAcked):
            self._set(c, event.entry_id, "acked", None)
        elif isinstance(event, conv.MailboxEntryCancelled):
            self._set(c, event.entry_id, "cancelled", None)

    @staticmethod
    def _set(c: Any, entry_id: UUID, status: str, lease: float | None) -> None:
        c.execute(
            "UPDATE mb_entries SET status = ?, lease_expires_at = ? WHERE entry_id = ?",
            (status, lease, entry_id.hex),
        )

    # Items that never had a Conversation have no row and need none: the updates
    # below then change nothing. The WorkItem's mirror of a stop is enough for the
    # gate; the ledger's own events carry the retry delay.

    def _apply_item(self, c: Any, event: wi.WorkItemEvent) -> None:
        sql = "UPDATE mb_items SET {} = ? WHERE work_item_id = ?"
        iid = event.originator_id.hex
        if isinstance(event, wi.WorkItemCancelled | wi.WorkItemCompleted):
            c.execute(sql.format("closed"), (1, iid))
        elif isinstance(event, wi.WorkItemResumed):
            c.execute(sql.format("closed"), (0, iid))
        elif isinstance(event, wi.BudgetStopRecorded | wi.BudgetStopCleared):
            stopped = int(isinstance(event, wi.BudgetStopRecorded))
            c.execute(sql.format("stopped"), (stopped, iid))

    def _apply_ledger(self, c: Any, event: rl.LedgerEvent) -> None:
        retry_after: float | None
        if isinstance(event, rl.CoordinatorFailureRecorded):
            retry_after = event.retry_after.timestamp()
        elif isinstance(event, rl.ExecutionResumed):
            retry_after = None
        else:
            return
        c.execute(
            "UPDATE mb_items SET retry_after = ? WHERE ledger_id = ?",
            (retry_after, event.originator_id.hex),
        )

    # --- reading --------------------------------------------------------------

    def due(self, now: datetime, limit: int = 100) -> list[UUID]:
        """Items with an entry pending or under an expired claim, oldest wake first; a
        message entry ignores the retry delay (it is a user's turn)."""
        at = now.timestamp()
        rows = self._rows(
            "SELECT e.work_item_id, MIN(e.created_at) AS first FROM mb_entries e"
            " JOIN mb_items i ON i.work_item_id = e.work_item_id"
            " WHERE (e.status = 'pending' OR (e.status = 'claimed' AND e.lease_expires_at <= ?))"
            " AND i.closed = 0 AND i.stopped = 0"
            " AND (e.kind = 'message' OR i.retry_after IS NULL OR i.retry_after <= ?)"
            " GROUP BY e.work_item_id ORDER BY first, e.work_item_id LIMIT ?",
            (at, at, limit),
        )
        return [UUID(row[0]) for row in rows]

    def to_recover(self, now: datetime, *, at_open: bool) -> list[UUID]:
        """Items recovery has to look at: a claim whose lease ran out, a turn on an item
        stopped or closed since, and at store open every open entry with a turn."""
        rows = self._rows(
            "SELECT DISTINCT e.work_item_id FROM mb_entries e"
            " JOIN mb_items i ON i.work_item_id = e.work_item_id"
            " WHERE e.status IN ('pending', 'claimed') AND ("
            " (e.status = 'claimed' AND e.lease_expires_at <= ?)"
            " OR (e.has_turn = 1 AND (? = 1 OR i.closed = 1 OR i.stopped = 1)))"
            " ORDER BY e.work_item_id",
            (now.timestamp(), int(at_open)),
        )
        return [UUID(row[0]) for row in rows]


class Mailbox(Projection[MailboxView]):
    name = "mailbox"

    @singledispatchmethod
    def process_event(self, domain_event: Any, tracking: Tracking) -> None:
        self.view.apply(self.name, [(tracking.notification_id, domain_event)])
