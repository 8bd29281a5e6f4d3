"""The work queue read model: claimable Actions, live Runs, and the WorkItem list.

A claim reads its candidates here, but never trusts them: the command re-checks
each candidate against its aggregates and simply moves on when one is stale.
Rows and the tracking position are written in one transaction, so the view can
be resumed, measured and rebuilt from position zero.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar, NamedTuple
from uuid import UUID

import orjson
from eventsourcing.dispatch import singledispatchmethod
from eventsourcing.persistence import Tracking
from eventsourcing.projection import Projection

from workcenter.domain import action as act
from workcenter.domain import work_item as wi
from workcenter.projections import sql
from workcenter.projections.tracked import Batch, TrackedView

READY = (
    "SELECT action_id, work_item_id FROM wq_actions WHERE status = 'ready' AND held = 0"
    " ORDER BY ready_since, sequence LIMIT ? OFFSET ?"
)
# SQLite: a claim's next page of candidates, the ready Actions it has not seen (a JSON
# array of ids). Not by offset: rows other claims took meanwhile would shift the pages
# and skip ready Actions (ADR-0138).
READY_UNSEEN = (
    "SELECT action_id, work_item_id FROM wq_actions WHERE status = 'ready' AND held = 0"
    " AND action_id NOT IN (SELECT value FROM json_each(?))"
    " ORDER BY ready_since, sequence LIMIT ?"
)
# PostgreSQL: the oldest ready Action no other claim holds, and a hold on it until the
# claim ends (ADR-0054): a session advisory lock, which its reads release at their end
# (``sql.claim_reads``, ADR-0105). The lock is tried in the outer query, over
# a page already ordered and limited, so only the row returned is ever locked; the ids
# this claim already tried are left out (it holds their locks itself).
RESERVE = (
    "SELECT action_id, work_item_id FROM (SELECT action_id, work_item_id FROM wq_actions"
    " WHERE status = 'ready' AND held = 0 AND action_id <> ALL(?)"
    " ORDER BY ready_since, sequence LIMIT ?) AS page"
    " WHERE pg_try_advisory_lock(?, hashtext(action_id)) LIMIT 1"
)
# The first key of the claim holds: apart from the views' write locks (one bigint key).
CLAIM_LOCKS = 0x57C1
CLAIMED_BY_ID = "SELECT action_id, run_id FROM wq_claims WHERE client_claim_id = ?"


class ClaimedById(NamedTuple):
    """What a claim id's turn read of the id (ADR-0118): the (Action, Run) the latest
    claim with it got, or None."""

    found: tuple[UUID, UUID] | None


class Candidate(NamedTuple):
    """A claimable Action as the queue shows it, with its WorkItem's id: a claim loads
    the Action, the item and its ledger in one read, though it has not seen the Action
    (ADR-0074). Only a hint: the claim checks it against the Action's own events."""

    action_id: UUID
    work_item_id: UUID

    @classmethod
    def of(cls, row: Any) -> Candidate:
        return cls(UUID(row[0]), UUID(row[1]))


# The status an item's row takes after an event of these classes (StatusChanged says its
# own, and so do ActionAdded and ActionStatusRecorded that make their Action current).
ITEM_STATUS_AFTER: dict[type[wi.WorkItemEvent], str] = {
    wi.WorkItemCancelled: "cancelled",
    wi.WorkItemCompleted: "done",
}


# The columns of an item's row its later events change, in the order an update names them.
ITEM_COLUMNS = ("title", "status", "updated_at")


def _ts(moment: datetime) -> float:
    return moment.timestamp()


@dataclass(frozen=True)
class Titles:
    """How a WorkItem's title is kept in ``wq_items`` (sealed by the store's cipher when
    it has one, given by the composition root so that read models import no adapter)."""

    seal: Callable[[str], str]
    unseal: Callable[[str], str]


TITLES_AS_IS = Titles(seal=lambda title: title, unseal=lambda title: title)


class WorkQueueView(TrackedView):
    TABLES: ClassVar[tuple[str, ...]] = ("wq_actions", "wq_runs", "wq_items", "wq_claims")
    # Its rows follow from the events alone (ADR-0070).
    ROWS_NEED_POSITIONS = False

    def __init__(self, datastore: Any, *, titles: Titles = TITLES_AS_IS) -> None:
        super().__init__(datastore)
        self.titles = titles

    def shadow(self, datastore: Any) -> WorkQueueView:
        return type(self)(datastore, titles=self.titles)

    def table_statements(self) -> list[str]:
        return [
            "CREATE TABLE IF NOT EXISTS wq_actions ("
            " action_id TEXT PRIMARY KEY, work_item_id TEXT NOT NULL,"
            " sequence INTEGER NOT NULL, status TEXT NOT NULL, ready_since REAL,"
            " held INTEGER NOT NULL DEFAULT 0)",
            "CREATE INDEX IF NOT EXISTS wq_ready ON wq_actions (ready_since, sequence)"
            " WHERE status = 'ready' AND held = 0",
            "CREATE INDEX IF NOT EXISTS wq_by_item ON wq_actions (work_item_id)",
            "CREATE TABLE IF NOT EXISTS wq_runs ("
            " run_id TEXT PRIMARY KEY, action_id TEXT NOT NULL, work_item_id TEXT NOT NULL,"
            " worker TEXT NOT NULL, boot_id TEXT NOT NULL, expires_at REAL NOT NULL)",
            # Every client claim id and the Run its latest claim got, ended or not (ADR-0114):
            # a retried claim is answered by any process, and a reused id refused.
            "CREATE TABLE IF NOT EXISTS wq_claims ("
            " client_claim_id TEXT PRIMARY KEY, run_id TEXT NOT NULL, action_id TEXT NOT NULL)",
            "CREATE TABLE IF NOT EXISTS wq_items ("
            " work_item_id TEXT PRIMARY KEY, title TEXT NOT NULL, status TEXT NOT NULL,"
            " mode TEXT NOT NULL, created_at REAL NOT NULL, updated_at REAL NOT NULL)",
        ]

    # --- writing --------------------------------------------------------------

    # ``apply`` (TrackedView) runs ``_apply_batch`` on the events after the position,
    # under the lock.

    def _apply_batch(self, c: Any, batch: Batch) -> None:
        # An item's row is written once per batch, after the others (nothing else reads
        # it): inserted with its status if the batch created it, else one update of what
        # its events changed, its update time (its latest event's) always (ADR-0038,
        # ADR-0087).
        items: dict[str, dict[str, Any]] = {}
        for _, event in batch:
            if isinstance(event, act.ActionEvent):
                self._apply_action(c, event)
            elif isinstance(event, wi.WorkItemEvent):
                iid = event.originator_id.hex
                row = items.setdefault(iid, {})
                self._apply_item(c, event, row)
                row["updated_at"] = _ts(event.timestamp)
        for iid, row in items.items():
            if "created_at" in row:
                c.execute(
                    "INSERT INTO wq_items VALUES (?, ?, ?, ?, ?, ?)",
                    (
                        iid,
                        row["title"],
                        row.get("status", "draft"),
                        row["mode"],
                        row["created_at"],
                        row["updated_at"],
                    ),
                )
            else:
                changed = [column for column in ITEM_COLUMNS if column in row]
                c.execute(
                    f"UPDATE wq_items SET {', '.join(f'{column} = ?' for column in changed)}"
                    " WHERE work_item_id = ?",
                    (*(row[column] for column in changed), iid),
                )

    def _apply_action(self, c: Any, event: act.ActionEvent) -> None:
        aid = event.originator_id.hex
        if isinstance(event, act.ActionPlanned):
            c.execute(
                "INSERT INTO wq_actions VALUES (?, ?, ?, 'ready', ?, 0)",
                (aid, event.work_item_id.hex, event.sequence, _ts(event.timestamp)),
            )
            return
        if isinstance(event, act.RunClaimed):
            c.execute(
                "INSERT INTO wq_runs SELECT ?, action_id, work_item_id, ?, ?, ?"
                " FROM wq_actions WHERE action_id = ?",
                (event.run_id.hex, event.worker, event.boot_id, _ts(event.expires_at), aid),
            )
            if event.client_claim_id is not None:
                # The latest claim wins: an id is claimed again only once its Run was
                # given back unanswered, or by claims that raced (ADR-0114).
                c.execute(
                    "INSERT INTO wq_claims VALUES (?, ?, ?) ON CONFLICT (client_claim_id)"
                    " DO UPDATE SET run_id = excluded.run_id, action_id = excluded.action_id",
                    (event.client_claim_id, event.run_id.hex, aid),
                )
        elif isinstance(event, act.LeaseRenewed):
            c.execute(
                "UPDATE wq_runs SET expires_at = ? WHERE run_id = ?",
                (_ts(event.expires_at), event.run_id.hex),
            )
        elif isinstance(event, act.RunFinished | act.RunInterrupted | act.RunDeferred):
            c.execute("DELETE FROM wq_runs WHERE run_id = ?", (event.run_id.hex,))
        elif isinstance(event, act.ActionReset | act.ActionInvalidated) and event.ended_run_id:
            c.execute("DELETE FROM wq_runs WHERE run_id = ?", (event.ended_run_id.hex,))
        status = act.status_after(event)
        if status is not None:
            c.execute(
                "UPDATE wq_actions SET status = ?, ready_since = ? WHERE action_id = ?",
                (status, _ts(event.timestamp) if status == "ready" else None, aid),
            )

    def _kept(self, title: str) -> str:
        """The title as the row keeps it: PostgreSQL's text holds no NUL character, so
        there a NUL is kept as U+FFFD (the events keep the title as it was given, and
        SQLite's rows too, ADR-0082)."""
        if "\x00" in title and sql.is_postgres(self.datastore):
            title = title.replace("\x00", "\ufffd")
        return self.titles.seal(title)

    def _apply_item(self, c: Any, event: wi.WorkItemEvent, row: dict[str, Any]) -> None:
        """Write what ``event`` changes of the Actions' rows; note in ``row`` what it
        changes of its item's (``_apply_batch`` writes it)."""
        if isinstance(event, wi.WorkItemCreated):
            row.update(
                title=self._kept(event.title), mode=event.mode, created_at=_ts(event.timestamp)
            )
            return
        if isinstance(event, wi.BudgetStopRecorded | wi.BudgetStopCleared):
            # A stopped item's Actions stay out of the claim queue until it resumes.
            c.execute(
                "UPDATE wq_actions SET held = ? WHERE work_item_id = ?",
                (int(isinstance(event, wi.BudgetStopRecorded)), event.originator_id.hex),
            )
        if isinstance(event, wi.TitleChanged):
            row["title"] = self._kept(event.title)
        # Not ``getattr(event, "status", None)`` on every event: a pydantic model's missing
        # attribute costs a raised and caught error, about 5 us (ADR-0038).
        if isinstance(event, wi.StatusChanged):
            status: str | None = event.status
        elif isinstance(event, wi.ActionAdded | wi.ActionStatusRecorded):
            # The Action became current and its status the item's (ADR-0046).
            status = (
                ("ready" if isinstance(event, wi.ActionAdded) else event.status)
                if (event.current)
                else None
            )
        else:
            status = ITEM_STATUS_AFTER.get(type(event))
        if status is not None:
            row["status"] = status

    # --- reading --------------------------------------------------------------

    def ready_actions(self, limit: int, offset: int = 0) -> list[UUID]:
        rows = self._rows(READY, (limit, offset))
        return [UUID(row[0]) for row in rows]

    @contextmanager
    def claim_candidates(
        self,
        page: int,
        current: Callable[[Any], Callable[[], bool]] | None = None,
        catch_up: Callable[[], None] | None = None,
    ) -> Iterator[Iterator[Candidate] | None]:
        """The claimable Actions, oldest first, for one claim to try in turn; None when
        ``current`` says the view is behind the head (given a cursor, it sends its read
        and returns what takes the answer).

        On PostgreSQL each candidate is held for the claim (a session advisory lock,
        released when the claim ends; no transaction is held open, ADR-0105) and one that
        another claim holds is passed over, so concurrent claims take different Actions
        instead of racing for the oldest (ADR-0054). The hold is a hint only: the claim's
        optimistic save stays the fence. A candidate the claim found stale means the view
        is behind (kept by a runner, it lags the claims other workers committed):
        ``catch_up`` brings it to the head before the next one. ``current``'s read and the
        first candidate's go to the server together, one round trip (ADR-0074).
        On SQLite (one writer) the candidates are the pages of the queue, as before."""
        if sql.is_postgres(self.datastore):
            with sql.claim_reads(self.datastore) as read:
                at_head = current(read.cursor()) if current is not None else None
                first = read.cursor().execute(RESERVE, ([], page, CLAIM_LOCKS))
                read.sync()
                if at_head is not None and not at_head():
                    yield None
                    return
                yield self._reserved(first, page, catch_up)
            return
        with sql.transaction(self.datastore, commit=False) as c:
            if current is not None and not current(c)():
                yield None
                return
            c.execute(READY, (page, 0))
            candidates = [Candidate.of(row) for row in c.fetchall()]
        yield self._paged(candidates, page)

    def claim_turn(
        self, client_claim_id: str, current: Callable[[Any], Callable[[], bool]]
    ) -> AbstractContextManager[ClaimedById | None]:
        """The turn of the claims with ``client_claim_id`` in every process of the store,
        held until the claim made in it has saved (``sql.claim_turn``, ADR-0118, 0123).
        Yields what its exchange read of the id (``claimed_by_id``), or None when it read
        nothing (SQLite) or ``current`` found the view behind the head."""

        def ask(read: sql.Reads) -> Callable[[], ClaimedById | None]:
            at_head = current(read.cursor())
            found = read.cursor().execute(CLAIMED_BY_ID, (client_claim_id,))

            def answer() -> ClaimedById | None:
                rows = found.fetchall()
                if not at_head():
                    return None
                return ClaimedById((UUID(rows[0][0]), UUID(rows[0][1])) if rows else None)

            return answer

        return sql.claim_turn(self.datastore, client_claim_id, ask)

    def _reserved(
        self, c: Any, page: int, catch_up: Callable[[], None] | None
    ) -> Iterator[Candidate]:
        """The candidates, each reserved in turn: the first's statement was sent on ``c``."""
        tried: list[str] = []
        while True:
            row = c.fetchone()
            if row is None:
                return
            tried.append(row[0])
            yield Candidate.of(row)
            if catch_up is not None:
                catch_up()  # the last candidate was stale
            c.execute(RESERVE, (tried, page, CLAIM_LOCKS))

    def _paged(self, first: list[Candidate], page: int) -> Iterator[Candidate]:
        candidates = first
        seen: list[str] = []
        while candidates:
            for candidate in candidates:
                seen.append(candidate.action_id.hex)
                yield candidate
            unseen = (orjson.dumps(seen).decode(), page)
            candidates = [Candidate.of(row) for row in self._rows(READY_UNSEEN, unseen)]

    def live_runs(self) -> list[tuple[UUID, UUID, str, str, float]]:
        """(action id, run id, worker, boot id, expires at) of every Run believed live."""
        rows = self._rows(
            "SELECT action_id, run_id, worker, boot_id, expires_at FROM wq_runs ORDER BY expires_at"
        )
        return [(UUID(r[0]), UUID(r[1]), r[2], r[3], r[4]) for r in rows]

    def claimed_by_id(self, client_claim_id: str) -> tuple[UUID, UUID] | None:
        """(action id, run id) of the Run the latest claim with this client claim id got."""
        rows = self._rows(CLAIMED_BY_ID, (client_claim_id,))
        return (UUID(rows[0][0]), UUID(rows[0][1])) if rows else None

    def work_items(
        self,
        status: str | None = None,
        limit: int | None = None,
        offset: int = 0,
        *,
        newest: bool = False,
    ) -> list[dict[str, Any]]:
        """Items oldest first (creation time, then id), or ``newest`` first: all, or
        ``limit`` of them from the ``offset``-th."""
        sql = "SELECT work_item_id, title, status, mode, created_at, updated_at FROM wq_items"
        params: list[Any] = []
        if status:
            sql += " WHERE status = ?"
            params.append(status)
        sql += (
            " ORDER BY created_at DESC, work_item_id DESC"
            if newest
            else " ORDER BY created_at, work_item_id"
        )
        if limit is not None:
            sql += " LIMIT ? OFFSET ?"
            params += [limit, offset]
        rows = self._rows(sql, params)
        return [
            {
                "id": UUID(r[0]),
                "title": self.titles.unseal(r[1]),
                "status": r[2],
                "mode": r[3],
                "created_at": r[4],
                "updated_at": r[5],
            }
            for r in rows
        ]

    def newest_work_items(
        self, status: str | None, limit: int, before: tuple[float, str] | None
    ) -> list[dict[str, Any]]:
        """Items newest first (creation time, then id, both descending), those created
        before ``before`` (a row's creation time and id) only: a page that starts at
        a row it has seen stays the same page however many items are created since."""
        sql = "SELECT work_item_id, title, status, mode, created_at, updated_at FROM wq_items"
        where: list[str] = []
        params: list[Any] = []
        if status:
            where.append("status = ?")
            params.append(status)
        if before is not None:
            where.append("(created_at < ? OR (created_at = ? AND work_item_id < ?))")
            params.extend([before[0], before[0], before[1]])
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY created_at DESC, work_item_id DESC LIMIT ?"
        return [
            {
                "id": UUID(r[0]),
                "title": self.titles.unseal(r[1]),
                "status": r[2],
                "created_at": r[4],
                "key": r[0],
            }
            for r in self._rows(sql, [*params, limit])
        ]

    def count_work_items(self, status: str | None = None) -> int:
        sql = "SELECT COUNT(*) FROM wq_items"
        rows = self._rows(sql + " WHERE status = ?", [status]) if status else self._rows(sql, [])
        return int(rows[0][0])


class WorkQueue(Projection[WorkQueueView]):
    """The same code serves the inline lifecycle (after each save) and a runner.

    Positions are keyed by the projection's name, so several views can share
    one database and its single ``tracking`` table.
    """

    name = "work_queue"

    @singledispatchmethod
    def process_event(self, domain_event: Any, tracking: Tracking) -> None:
        self.view.apply(self.name, [(tracking.notification_id, domain_event)])
