"""The detail read model: per WorkItem, its detail DTO (read-models.md 2.4) as orjson bytes.

It is an inline view: the DTO of an item is stored when a command on the item
or its Actions is saved, so a read right after such a write is one query; the
ledger's own writes are folded by the next save or read (ADR-0019).

The view folds the states of every WorkItem, Action and ResourceLedger from
their events (``dv_states``), and whenever events of an item arrive it rebuilds
that item's DTO from the states after them (``dv_details``). The DTO's ``now``
is the timestamp of the item's latest event, never the clock, so live and
rebuilt views are byte-for-byte equal: an item's DTO depends only on its events.
Within one batch an item's DTO is built once, after its last event there, which
gives the same bytes however the log is paged.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any, ClassVar, Literal
from uuid import UUID

import orjson
from eventsourcing.dispatch import singledispatchmethod
from eventsourcing.persistence import Tracking
from eventsourcing.projection import Projection
from eventsourcing.sqlite import SQLiteCursor

from workcenter.adapters.compression import deflate, inflate
from workcenter.domain import action as act
from workcenter.domain import resource_ledger as rl
from workcenter.domain import work_item as wi
from workcenter.domain.model import AggregateState, DomainEvent
from workcenter.projections.dto import detail_dto
from workcenter.projections.tracked import Batch, TrackedView

Kind = Literal["item", "action", "ledger"]
STATE_CLASSES: dict[Kind, type[AggregateState]] = {
    "item": wi.WorkItemState,
    "action": act.ActionState,
    "ledger": rl.LedgerState,
}
EVOLVE: dict[Kind, Callable[[Any, Any], AggregateState]] = {
    "item": wi.evolve,
    "action": act.evolve,
    "ledger": rl.evolve,
}
CACHE_LIMIT = 20_000


def kind_of(event: DomainEvent) -> Kind | None:
    if isinstance(event, wi.WorkItemEvent):
        return "item"
    if isinstance(event, act.ActionEvent):
        return "action"
    if isinstance(event, rl.LedgerEvent):
        return "ledger"
    return None


def refreshes_detail(events: Iterable[DomainEvent]) -> bool:
    """Whether a save of ``events`` brings the view up to date at once: one that changes
    a WorkItem or an Action does. A ledger-only save (an LLM request reserved or
    settled, many per Run) leaves it behind; the next such save or read catches up,
    building the item's DTO once for all those ledger events instead of once each."""
    return any(kind_of(event) in ("item", "action") for event in events)


def _as_bytes(blob: str | bytes) -> bytes:
    # Rows written before compression held the state as TEXT.
    return blob.encode() if isinstance(blob, str) else bytes(blob)


def build_detail(
    item: wi.WorkItemState,
    actions: dict[UUID, act.ActionState],
    ledger: rl.LedgerState | None,
    at: datetime,
) -> bytes:
    """The serialised detail DTO of folded states, as of the item's event at ``at``."""
    return orjson.dumps(detail_dto(item, actions, ledger, now=at))


class DetailView(TrackedView):
    TABLES: ClassVar[tuple[str, ...]] = ("dv_states", "dv_details")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # (aggregate id, version) -> state: a state at a version is a pure fold, so an
        # entry is never stale; a version mismatch with the row just reloads it.
        self._cache: dict[UUID, AggregateState] = {}

    def construct_create_table_statements(self) -> list[str]:
        return [
            *super().construct_create_table_statements(),
            "CREATE TABLE IF NOT EXISTS dv_states ("
            " aggregate_id TEXT PRIMARY KEY, work_item_id TEXT NOT NULL, kind TEXT NOT NULL,"
            " version INTEGER NOT NULL, state BLOB NOT NULL)",
            "CREATE INDEX IF NOT EXISTS dv_states_by_item ON dv_states (work_item_id)",
            "CREATE TABLE IF NOT EXISTS dv_details ("
            " work_item_id TEXT PRIMARY KEY, position INTEGER NOT NULL, dto BLOB NOT NULL)",
        ]

    # --- writing --------------------------------------------------------------

    def _apply_batch(self, c: SQLiteCursor, batch: Batch) -> None:
        working: dict[UUID, tuple[Kind, UUID, AggregateState]] = {}
        touched: dict[UUID, tuple[int, datetime]] = {}
        for position, event in batch:
            kind = kind_of(event)
            if kind is None:
                continue
            aggregate_id = event.originator_id
            before = working.get(aggregate_id) or self._load(c, aggregate_id)
            state = before[2] if before else None
            if state is not None and state.version >= event.originator_version:
                continue  # already folded (a redelivery): nothing changes
            after = EVOLVE[kind](state, event)
            item_id = after.id if kind == "item" else after.work_item_id  # type: ignore[attr-defined]
            working[aggregate_id] = (kind, item_id, after)
            touched[item_id] = (position, event.timestamp)
        for aggregate_id, (kind, item_id, state) in working.items():
            c.execute(
                "INSERT OR REPLACE INTO dv_states VALUES (?, ?, ?, ?, ?)",
                (
                    aggregate_id.hex,
                    item_id.hex,
                    kind,
                    state.version,
                    deflate(state.model_dump_json().encode()),
                ),
            )
            self._remember(state)
        for item_id, (position, at) in touched.items():
            dto = self._build(c, item_id, at)
            if dto is not None:
                c.execute(
                    "INSERT OR REPLACE INTO dv_details VALUES (?, ?, ?)",
                    (item_id.hex, position, deflate(dto)),
                )

    def _remember(self, state: AggregateState) -> None:
        if len(self._cache) >= CACHE_LIMIT:
            self._cache.clear()
        self._cache[state.id] = state

    def _state(self, aggregate_id: UUID, kind: Kind, version: int, blob: Any) -> AggregateState:
        cached = self._cache.get(aggregate_id)
        if cached is not None and cached.version == version:
            return cached
        state = STATE_CLASSES[kind].model_validate_json(inflate(_as_bytes(blob)))
        self._remember(state)
        return state

    def _load(
        self, c: SQLiteCursor, aggregate_id: UUID
    ) -> tuple[Kind, UUID, AggregateState] | None:
        c.execute(
            "SELECT kind, work_item_id, version, state FROM dv_states WHERE aggregate_id = ?",
            (aggregate_id.hex,),
        )
        row = c.fetchone()
        if row is None:
            return None
        return row[0], UUID(row[1]), self._state(aggregate_id, row[0], row[2], row[3])

    def _build(self, c: SQLiteCursor, item_id: UUID, at: datetime) -> bytes | None:
        # Versions first: cached states skip reading and validating their blobs.
        c.execute(
            "SELECT aggregate_id, kind, version FROM dv_states WHERE work_item_id = ?",
            (item_id.hex,),
        )
        rows = [(UUID(r[0]), r[1], r[2]) for r in c.fetchall()]
        states: dict[UUID, AggregateState] = {}
        for aggregate_id, kind, version in rows:
            cached = self._cache.get(aggregate_id)
            if cached is not None and cached.version == version:
                states[aggregate_id] = cached
                continue
            c.execute("SELECT state FROM dv_states WHERE aggregate_id = ?", (aggregate_id.hex,))
            states[aggregate_id] = self._state(aggregate_id, kind, version, c.fetchone()[0])
        item = states.get(item_id)
        if not isinstance(item, wi.WorkItemState):
            return None
        actions = {k: s for k, s in states.items() if isinstance(s, act.ActionState)}
        ledger = next((s for s in states.values() if isinstance(s, rl.LedgerState)), None)
        return build_detail(item, actions, ledger, at)

    def reset(self, application_name: str) -> None:
        self._cache.clear()
        super().reset(application_name)

    # --- reading --------------------------------------------------------------

    def detail(self, work_item_id: UUID) -> dict[str, Any] | None:
        """The item's detail DTO as of its latest event, or None if the view has not seen it."""
        raw = self.detail_bytes(work_item_id)
        return None if raw is None else dict(orjson.loads(raw))

    def current_detail_bytes(
        self, work_item_id: UUID, application_name: str, head: Callable[[SQLiteCursor], int]
    ) -> tuple[bytes | None, bool]:
        """The item's stored DTO and whether the view had every event up to ``head``,
        both read in one transaction: the fast path of a read right after a write."""
        with self.datastore.transaction(commit=False) as c:
            current = (self._max_tracking_id(application_name, c) or 0) >= head(c)
            c.execute("SELECT dto FROM dv_details WHERE work_item_id = ?", (work_item_id.hex,))
            row = c.fetchone()
        return (inflate(bytes(row[0])) if row else None), current

    def detail_bytes(self, work_item_id: UUID) -> bytes | None:
        rows = self._rows("SELECT dto FROM dv_details WHERE work_item_id = ?", (work_item_id.hex,))
        return inflate(bytes(rows[0][0])) if rows else None


class Detail(Projection[DetailView]):
    """The same view code serves the inline lifecycle, the runner and rebuilds."""

    name = "detail"

    @singledispatchmethod
    def process_event(self, domain_event: Any, tracking: Tracking) -> None:
        self.view.apply(self.name, [(tracking.notification_id, domain_event)])
