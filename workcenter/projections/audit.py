"""The audit view: one row per event of a WorkItem, its Actions (Runs included) and its ledger.

Rows are keyed by notification position, so the merged history of the three
kinds of stream is in the order the events were written (read-models.md 3).
Action and ledger streams are mapped to their WorkItem through a small id
table filled from ``ActionPlanned`` and ``LedgerOpened``.

Each row records who caused the event:

- ``worker``: a Run's events (the worker and boot id come from ``RunClaimed``;
  later events of the Run inherit them from the claim row);
- ``operator``: recovery ending a Run (``RunInterrupted`` with a recovery reason);
- ``coordinator``: what only ``plan_actions``/``complete`` emit (planned dynamic
  Actions, closures, supersession by a replan, completion) and coordinator requests;
- ``system``: budget stops;
- ``user``: every other command.

Mirror events (``ActionAdded``, ``ActionStatusRecorded``, ``StatusChanged``, ...)
take the cause of the event just before them when it is the same write (the
next position, the same timestamp); otherwise the user.

Rows and the tracking position are written in one transaction, like the work
queue, so the view can be resumed and rebuilt from zero.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar
from uuid import UUID

import orjson
from eventsourcing.dispatch import singledispatchmethod
from eventsourcing.persistence import Tracking
from eventsourcing.projection import Projection
from eventsourcing.sqlite import SQLiteCursor

from workcenter.domain import action as act
from workcenter.domain import resource_ledger as rl
from workcenter.domain import work_item as wi
from workcenter.domain.goal_progress import GoalProgress, current_run, is_proof
from workcenter.domain.model import DomainEvent
from workcenter.domain.runs import RECOVERED_REASON
from workcenter.projections.tracked import Batch, TrackedView

DEFAULT_LIMIT = 500
RECOVERY_REASONS = frozenset({RECOVERED_REASON, "no longer owns the current Action"})
ENVELOPE = ("originator_id", "originator_version", "timestamp")

COLUMNS = (
    "position",
    "work_item_id",
    "at",
    "time",
    "aggregate",
    "aggregate_id",
    "version",
    "type",
    "action_id",
    "run_id",
    "generation",
    "actor",
    "worker",
    "boot_id",
    "payload",
)


@dataclass(frozen=True)
class Cause:
    actor: str
    worker: str | None = None
    boot_id: str | None = None


USER = Cause("user")
COORDINATOR = Cause("coordinator")
OPERATOR = Cause("operator")
SYSTEM = Cause("system")


@dataclass(frozen=True)
class AuditRow:
    position: int
    work_item_id: UUID
    time: str
    aggregate: str
    aggregate_id: UUID
    version: int
    type: str
    action_id: UUID | None
    run_id: UUID | None
    generation: int | None
    actor: str
    worker: str | None
    boot_id: str | None
    payload: dict[str, Any]

    def json(self) -> dict[str, Any]:
        return {
            "position": self.position,
            "time": self.time,
            "aggregate": self.aggregate,
            "aggregate_id": str(self.aggregate_id),
            "version": self.version,
            "type": self.type,
            "action_id": str(self.action_id) if self.action_id else None,
            "run_id": str(self.run_id) if self.run_id else None,
            "generation": self.generation,
            "actor": self.actor,
            "worker": self.worker,
            "boot_id": self.boot_id,
            "payload": self.payload,
        }


def _uuid(value: str | None) -> UUID | None:
    return UUID(value) if value else None


class AuditView(TrackedView):
    TABLES: ClassVar[tuple[str, ...]] = (
        "audit_events",
        "audit_ids",
        "audit_runs",
        "audit_requests",
        "audit_items",
    )

    def construct_create_table_statements(self) -> list[str]:
        return [
            *super().construct_create_table_statements(),
            "CREATE TABLE IF NOT EXISTS audit_events ("
            " position INTEGER PRIMARY KEY, work_item_id TEXT NOT NULL, at REAL NOT NULL,"
            " time TEXT NOT NULL, aggregate TEXT NOT NULL, aggregate_id TEXT NOT NULL,"
            " version INTEGER NOT NULL, type TEXT NOT NULL, action_id TEXT, run_id TEXT,"
            " generation INTEGER, actor TEXT NOT NULL, worker TEXT, boot_id TEXT,"
            " payload TEXT NOT NULL)",
            "CREATE INDEX IF NOT EXISTS audit_by_item ON audit_events (work_item_id, position)",
            # Action and ledger streams -> their WorkItem (and an Action's generation).
            "CREATE TABLE IF NOT EXISTS audit_ids ("
            " aggregate_id TEXT PRIMARY KEY, work_item_id TEXT NOT NULL, generation INTEGER)",
            "CREATE TABLE IF NOT EXISTS audit_runs ("
            " run_id TEXT PRIMARY KEY, action_id TEXT NOT NULL, worker TEXT NOT NULL,"
            " boot_id TEXT NOT NULL, generation INTEGER NOT NULL)",
            "CREATE TABLE IF NOT EXISTS audit_requests ("
            " ledger_id TEXT NOT NULL, request_id TEXT NOT NULL, run_id TEXT,"
            " actor TEXT NOT NULL, worker TEXT, boot_id TEXT,"
            " PRIMARY KEY (ledger_id, request_id))",
            # The item's mode and the cause of its last row, for mirror events.
            "CREATE TABLE IF NOT EXISTS audit_items ("
            " work_item_id TEXT PRIMARY KEY, mode TEXT NOT NULL, last_position INTEGER,"
            " last_at REAL, actor TEXT, worker TEXT, boot_id TEXT)",
        ]

    # --- writing --------------------------------------------------------------

    def _apply_batch(self, c: SQLiteCursor, batch: Batch) -> None:
        for position, event in batch:
            self._apply_at(c, position, event)

    def _one(self, c: SQLiteCursor, sql: str, params: tuple[Any, ...]) -> Any:
        c.execute(sql, params)
        return c.fetchone()

    def _item_of(self, c: SQLiteCursor, event: DomainEvent) -> tuple[str, str] | None:
        """(aggregate kind, WorkItem id hex) of the event's stream, or None if not ours."""
        oid = event.originator_id.hex
        if isinstance(event, wi.WorkItemEvent):
            return "work_item", oid
        kind = (
            "action"
            if isinstance(event, act.ActionEvent)
            else "ledger"
            if isinstance(event, rl.LedgerEvent)
            else None
        )
        if kind is None:
            return None
        if isinstance(event, act.ActionPlanned | rl.LedgerOpened):
            generation = 1 if isinstance(event, act.ActionPlanned) else None
            c.execute(
                "INSERT OR REPLACE INTO audit_ids VALUES (?, ?, ?)",
                (oid, event.work_item_id.hex, generation),
            )
            return kind, event.work_item_id.hex
        row = self._one(c, "SELECT work_item_id FROM audit_ids WHERE aggregate_id = ?", (oid,))
        return (kind, row[0]) if row else None

    def _run_cause(self, c: SQLiteCursor, run_id: UUID | None) -> Cause | None:
        if run_id is None:
            return None
        row = self._one(c, "SELECT worker, boot_id FROM audit_runs WHERE run_id = ?", (run_id.hex,))
        return Cause("worker", row[0], row[1]) if row else None

    def _generation(self, c: SQLiteCursor, action_id: UUID | None) -> int | None:
        if action_id is None:
            return None
        row = self._one(
            c, "SELECT generation FROM audit_ids WHERE aggregate_id = ?", (action_id.hex,)
        )
        return row[0] if row else None

    def _direct_cause(self, c: SQLiteCursor, event: DomainEvent, mode: str) -> Cause | None:
        """Who caused the event, when the event alone tells; None for mirror events."""
        match event:
            case act.RunClaimed():
                return Cause("worker", event.worker, event.boot_id)
            case act.LeaseRenewed() | act.RunFinished() | act.RunDeferred() | act.InputConsumed():
                return self._run_cause(c, event.run_id) or USER
            case act.InputQueued():
                return USER
            case act.RunInterrupted():
                if event.reason in RECOVERY_REASONS:
                    return OPERATOR
                if event.run_status == "interrupted":
                    return self._run_cause(c, event.run_id) or USER
                return USER
            case act.ActionPlanned():
                # Dynamic items get their Actions from plan_actions (triage from start).
                return COORDINATOR if mode == "dynamic" and event.type != "triage" else None
            case act.ActionClosed() | wi.WorkItemCompleted() | rl.CoordinatorFailureRecorded():
                return COORDINATOR
            case act.ActionInvalidated():
                return COORDINATOR if event.reason == "replanned" else USER
            case rl.RequestReserved():
                if event.kind == "coordinator":
                    return COORDINATOR
                return self._run_cause(c, event.run_id) or SYSTEM
            case rl.RequestSettled():
                row = self._one(
                    c,
                    "SELECT actor, worker, boot_id FROM audit_requests"
                    " WHERE ledger_id = ? AND request_id = ?",
                    (event.originator_id.hex, event.request_id),
                )
                return Cause(*row) if row else SYSTEM
            case rl.ExecutionStopped():
                return SYSTEM
            case (
                wi.ActionAdded()
                | wi.ActionStatusRecorded()
                | wi.StatusChanged()
                | wi.BudgetStopRecorded()
                | wi.BudgetStopCleared()
                | rl.LedgerOpened()
            ):
                return None
        return USER

    def _apply_at(self, c: SQLiteCursor, position: int, event: DomainEvent) -> None:
        mapped = self._item_of(c, event)
        if mapped is None:
            return
        aggregate, item_hex = mapped
        at = event.timestamp.timestamp()
        if isinstance(event, wi.WorkItemCreated):
            c.execute(
                "INSERT OR REPLACE INTO audit_items VALUES (?, ?, NULL, NULL, NULL, NULL, NULL)",
                (item_hex, event.mode),
            )
        item = self._one(
            c,
            "SELECT mode, last_position, last_at, actor, worker, boot_id FROM audit_items"
            " WHERE work_item_id = ?",
            (item_hex,),
        )
        mode, last_position, last_at, *last_cause = item or ("dynamic", None, None, None)
        cause = self._direct_cause(c, event, mode)
        if cause is None:
            same_write = last_position == position - 1 and last_at == at and last_cause[0]
            cause = Cause(*last_cause) if same_write else USER

        action_id: UUID | None = None
        run_id: UUID | None = None
        if isinstance(event, act.ActionEvent):
            action_id = event.originator_id
            run_id = getattr(event, "run_id", None) or getattr(event, "ended_run_id", None)
            if isinstance(event, act.ActionReset):
                c.execute(
                    "UPDATE audit_ids SET generation = ? WHERE aggregate_id = ?",
                    (event.generation, action_id.hex),
                )
        elif isinstance(event, wi.ActionAdded | wi.ActionStatusRecorded):
            action_id = event.action_id
        elif isinstance(event, rl.RequestReserved) and event.run_id is not None:
            run_id = event.run_id
            row = self._one(c, "SELECT action_id FROM audit_runs WHERE run_id = ?", (run_id.hex,))
            action_id = UUID(row[0]) if row else None
        generation = self._generation(c, action_id)
        if isinstance(event, act.RunClaimed):
            c.execute(
                "INSERT OR REPLACE INTO audit_runs VALUES (?, ?, ?, ?, ?)",
                (
                    event.run_id.hex,
                    event.originator_id.hex,
                    event.worker,
                    event.boot_id,
                    generation,
                ),
            )
        elif isinstance(
            event, act.LeaseRenewed | act.RunFinished | act.RunInterrupted | act.RunDeferred
        ):
            row = self._one(
                c, "SELECT generation FROM audit_runs WHERE run_id = ?", (event.run_id.hex,)
            )
            generation = row[0] if row else generation  # the generation the Run ran under
        if isinstance(event, rl.RequestReserved):
            c.execute(
                "INSERT OR REPLACE INTO audit_requests VALUES (?, ?, ?, ?, ?, ?)",
                (
                    event.originator_id.hex,
                    event.request_id,
                    run_id.hex if run_id else None,
                    cause.actor,
                    cause.worker,
                    cause.boot_id,
                ),
            )

        payload = event.model_dump(mode="json", exclude=set(ENVELOPE))
        c.execute(
            f"INSERT INTO audit_events ({', '.join(COLUMNS)})"
            f" VALUES ({', '.join('?' * len(COLUMNS))})",
            (
                position,
                item_hex,
                at,
                event.timestamp.isoformat(),
                aggregate,
                event.originator_id.hex,
                event.originator_version,
                type(event).__name__,
                action_id.hex if action_id else None,
                run_id.hex if run_id else None,
                generation,
                cause.actor,
                cause.worker,
                cause.boot_id,
                orjson.dumps(payload).decode(),
            ),
        )
        c.execute(
            "UPDATE audit_items SET last_position = ?, last_at = ?, actor = ?, worker = ?,"
            " boot_id = ? WHERE work_item_id = ?",
            (position, at, cause.actor, cause.worker, cause.boot_id, item_hex),
        )

    # --- reading --------------------------------------------------------------

    def events(
        self,
        work_item_id: UUID,
        *,
        limit: int | None = DEFAULT_LIMIT,
        action_id: UUID | None = None,
        run_id: UUID | None = None,
        type: str | None = None,
        max_position: int | None = None,
    ) -> list[AuditRow]:
        """The item's rows in position order: the newest ``limit`` that match the filters."""
        where = ["work_item_id = ?"]
        params: list[Any] = [work_item_id.hex]
        for column, value in (
            ("action_id", action_id.hex if action_id else None),
            ("run_id", run_id.hex if run_id else None),
            ("type", type),
            ("position <=", max_position),
        ):
            if value is not None:
                where.append(f"{column} ?" if column.endswith("=") else f"{column} = ?")
                params.append(value)
        sql = f"SELECT {', '.join(COLUMNS)} FROM audit_events WHERE {' AND '.join(where)}"
        sql += " ORDER BY position DESC"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        rows = self._rows(sql, params)
        rows.reverse()
        return [
            AuditRow(
                position=r[0],
                work_item_id=UUID(r[1]),
                time=r[3],
                aggregate=r[4],
                aggregate_id=UUID(r[5]),
                version=r[6],
                type=r[7],
                action_id=_uuid(r[8]),
                run_id=_uuid(r[9]),
                generation=r[10],
                actor=r[11],
                worker=r[12],
                boot_id=r[13],
                payload=orjson.loads(r[14]),
            )
            for r in rows
        ]

    def cut(
        self, work_item_id: UUID, *, version: int | None = None, at: datetime | None = None
    ) -> int | None:
        """The position of the item's state at WorkItem ``version`` or at time ``at``.

        None when the item had no such version or nothing had happened by then.
        """
        if version is not None:
            rows = self._rows(
                "SELECT position FROM audit_events WHERE work_item_id = ?"
                " AND aggregate = 'work_item' AND aggregate_id = ? AND version = ?",
                (work_item_id.hex, work_item_id.hex, version),
            )
        else:
            assert at is not None
            rows = self._rows(
                "SELECT MAX(position) FROM audit_events WHERE work_item_id = ? AND at <= ?",
                (work_item_id.hex, at.timestamp()),
            )
        return rows[0][0] if rows and rows[0][0] is not None else None

    def versions_at(self, work_item_id: UUID, position: int) -> dict[tuple[str, UUID], int]:
        """The version of each of the item's streams at ``position`` (kind, id) -> version."""
        rows = self._rows(
            "SELECT aggregate, aggregate_id, MAX(version) FROM audit_events"
            " WHERE work_item_id = ? AND position <= ? GROUP BY aggregate, aggregate_id",
            (work_item_id.hex, position),
        )
        return {(r[0], UUID(r[1])): r[2] for r in rows}

    def dump(self) -> dict[str, list[tuple[Any, ...]]]:
        """Every row of every table in a total order, to compare a rebuild with the live view."""
        return {
            t: [tuple(r) for r in self._rows(f"SELECT * FROM {t} ORDER BY 1, 2")]
            for t in self.TABLES
        }


class Audit(Projection[AuditView]):
    """One row per event of a WorkItem; positions are keyed by the projection's name."""

    name = "audit"

    @singledispatchmethod
    def process_event(self, domain_event: Any, tracking: Tracking) -> None:
        self.view.apply(self.name, [(tracking.notification_id, domain_event)])


# --- progress explanation -----------------------------------------------------


def explain_progress(
    item: wi.WorkItemState, actions: Mapping[UUID, act.ActionState], progress: GoalProgress
) -> dict[str, Any]:
    """Which Runs were proof, which were stale and which conflicted (read-models.md 3).

    Everything comes from ``goal_progress``: proof and conflicts are read off the
    derived progress, and a stale Run is one its Action still speaks through
    (``current_run``) and that is proof on its own (``is_proof``) but that the
    derivation left out, because a writer ended after it started.
    """
    proof = set(progress.proof_run_ids)
    conflicts: dict[UUID, list[str]] = {}
    for row in progress.criteria:
        for run_id in row.conflicting_run_ids:
            conflicts.setdefault(run_id, []).append(row.criterion)
    runs: list[dict[str, Any]] = []
    stale: list[UUID] = []
    for action in sorted(actions.values(), key=lambda a: (a.sequence, a.id)):
        speaking = current_run(action, item.contract_revision)
        for run in action.runs:
            roles: list[str] = []
            if run.id in proof:
                roles.append("proof")
            elif (
                speaking is not None
                and run.id == speaking.id
                and is_proof(run, item.acceptance_criteria)
            ):
                roles.append("stale")
                stale.append(run.id)
            if run.id in conflicts:
                roles.append("conflicting")
            if speaking is not None and run.id == speaking.id and not roles:
                roles.append("current")
            runs.append(
                {
                    "action_id": str(action.id),
                    "sequence": action.sequence,
                    "action_type": action.type,
                    "run_id": str(run.id),
                    "status": run.status,
                    "generation": run.generation,
                    "contract_revision": run.contract_revision,
                    "roles": roles or ["observation" if run.result is not None else "none"],
                    "conflicts_with": conflicts.get(run.id, []),
                }
            )
    return {
        "proof_run_ids": [str(r) for r in progress.proof_run_ids],
        "stale_run_ids": [str(r) for r in stale],
        "conflicting_run_ids": [str(r) for r in conflicts],
        "runs": runs,
    }
