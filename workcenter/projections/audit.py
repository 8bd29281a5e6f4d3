"""The audit of a WorkItem: every event of it, its Actions (Runs included), its
ledger and its Conversation (the Coordinator's turns), in the order they were
written (read-models.md 3).

There is no audit table: the rows are shaped here, purely, from the item's
streams as the event store returns them merged by notification position (the
adapters read them). Who caused each event is the actor the command recorded on
it, never inferred; events stored before actors were recorded show the unknown
actor. The Action and Run a row concerns, and the Action generation it ran
under, are folded from the earlier rows of the same read.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from workcenter.domain import action as act
from workcenter.domain import conversation as conv
from workcenter.domain import resource_ledger as rl
from workcenter.domain import work_item as wi
from workcenter.domain.goal_progress import GoalProgress, current_run, is_proof
from workcenter.domain.model import DomainEvent, event_classes

DEFAULT_LIMIT = 500
STREAM_EVENTS: tuple[type[DomainEvent], ...] = (
    wi.WorkItemEvent,
    act.ActionEvent,
    rl.LedgerEvent,
    conv.ConversationEvent,
)

# What a row's type can be: the class names of the events of the item's streams (the
# stream bases themselves name no event).
EVENT_TYPES: frozenset[str] = frozenset(
    name
    for base in STREAM_EVENTS
    for name, cls in event_classes(base).items()
    if cls.__module__.startswith("workcenter.domain.")
)
# Shown as columns of the row, so left out of its payload.
ENVELOPE = {"originator_id", "originator_version", "timestamp", "actor"}


@dataclass(frozen=True)
class AuditRow:
    position: int
    work_item_id: UUID
    at: datetime
    aggregate: str
    aggregate_id: UUID
    version: int
    type: str
    action_id: UUID | None
    run_id: UUID | None
    generation: int | None
    actor: str
    actor_id: str
    worker: str | None
    boot_id: str | None
    caused_by: str | None
    payload: dict[str, Any]

    @property
    def time(self) -> str:
        return self.at.isoformat()

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
            "actor_id": self.actor_id,
            "worker": self.worker,
            "boot_id": self.boot_id,
            "caused_by": self.caused_by,
            "payload": self.payload,
        }


def audit_rows(work_item_id: UUID, events: Iterable[tuple[int, DomainEvent]]) -> list[AuditRow]:
    """The rows of the item's events, given in position order from its first event."""
    generations: dict[UUID, int] = {}  # Action -> its generation so far
    runs: dict[UUID, tuple[UUID, int]] = {}  # Run -> (its Action, the generation it ran under)
    # A settlement is of the Run its reservation named: `audit --run` left out what the
    # Run was charged (found by acceptance testing, ADR-0142).
    reserved_by: dict[str, UUID] = {}  # request id -> the Run that reserved it
    rows: list[AuditRow] = []
    for position, event in events:
        action_id: UUID | None = None
        run_id: UUID | None = None
        generation: int | None = None
        if isinstance(event, wi.WorkItemEvent):
            aggregate = "work_item"
            if isinstance(event, wi.ActionAdded | wi.ActionStatusRecorded):
                action_id = event.action_id
        elif isinstance(event, act.ActionEvent):
            aggregate = "action"
            action_id = event.originator_id
            if isinstance(event, act.ActionPlanned):
                generations[action_id] = 1
            elif isinstance(event, act.ActionReset):
                generations[action_id] = event.generation
            run_id = getattr(event, "run_id", None) or getattr(event, "ended_run_id", None)
            if isinstance(event, act.RunClaimed):
                runs[event.run_id] = (action_id, generations.get(action_id, 1))
            elif isinstance(
                event,
                act.LeaseRenewed
                | act.RunFinished
                | act.RunInterrupted
                | act.RunDeferred
                | act.InputQueued
                | act.InputConsumed,
            ):
                generation = runs.get(event.run_id, (action_id, None))[1]
        elif isinstance(event, rl.LedgerEvent):
            aggregate = "ledger"
            if isinstance(event, rl.RequestReserved) and event.run_id is not None:
                run_id = reserved_by[event.request_id] = event.run_id
            elif isinstance(event, rl.RequestSettled):
                run_id = reserved_by.get(event.request_id)
            action_id = runs[run_id][0] if run_id in runs else None
        elif isinstance(event, conv.ConversationEvent):
            aggregate = "conversation"
        else:
            continue
        if generation is None and action_id is not None:
            generation = generations.get(action_id)
        actor = event.actor
        worker = actor.as_worker
        rows.append(
            AuditRow(
                position=position,
                work_item_id=work_item_id,
                at=event.timestamp,
                aggregate=aggregate,
                aggregate_id=event.originator_id,
                version=event.originator_version,
                type=type(event).__name__,
                action_id=action_id,
                run_id=run_id,
                generation=generation,
                actor=actor.kind,
                actor_id=actor.id,
                worker=worker[0] if worker else None,
                boot_id=worker[1] if worker else None,
                caused_by=str(actor.caused_by) if actor.caused_by else None,
                payload=event.model_dump(mode="json", exclude=ENVELOPE),
            )
        )
    return rows


def select(
    rows: list[AuditRow],
    *,
    limit: int | None = DEFAULT_LIMIT,
    action_id: UUID | None = None,
    run_id: UUID | None = None,
    type: str | None = None,
) -> list[AuditRow]:
    """The newest ``limit`` rows that match every filter given, in position order."""
    kept = [
        r
        for r in rows
        if (action_id is None or r.action_id == action_id)
        and (run_id is None or r.run_id == run_id)
        and (type is None or r.type == type)
    ]
    return kept[-limit:] if limit is not None else kept


def cut(
    rows: list[AuditRow], work_item_id: UUID, *, version: int | None, at: datetime | None
) -> int | None:
    """The position of the item's state at WorkItem ``version`` or at time ``at`` (the
    last before the first event stamped after it).

    None when the item had no such version or nothing had happened by then.
    """
    if version is not None:
        return next(
            (
                r.position
                for r in rows
                if r.aggregate_id == work_item_id and r.aggregate == "work_item"
                if r.version == version
            ),
            None,
        )
    assert at is not None
    # The history up to the first event after ``at``: an event stamped before ``at`` that
    # came after it (a clock stepped back) is not of the state then (found by acceptance
    # testing, ADR-0138).
    moment, position = at.timestamp(), None
    for r in sorted(rows, key=lambda r: r.position):
        if r.at.timestamp() > moment:
            break
        position = r.position
    return position


def versions_at(rows: list[AuditRow], position: int) -> dict[tuple[str, UUID], int]:
    """The version of each of the item's streams at ``position``: (kind, id) -> version."""
    versions: dict[tuple[str, UUID], int] = {}
    for r in rows:
        if r.position <= position:
            versions[(r.aggregate, r.aggregate_id)] = r.version
    return versions


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
