"""How events are stored: orjson bytes of frozen pydantic models, with upcasting.

Adapted from the ``eventsourcing`` project's pydantic/orjson example
(examples/aggregate7), which the 9.5.6 wheel does not ship.
"""

from __future__ import annotations

import os
from typing import Any
from uuid import UUID

import orjson
from eventsourcing.persistence import Mapper, StoredEvent, Transcoder
from eventsourcing.utils import get_topic, resolve_topic

from workcenter.adapters.recorders import OneCommitSQLiteRecorder
from workcenter.adapters.sqlite_settings import FACTORY_TOPIC, synchronous_env
from workcenter.domain.action import ActionState
from workcenter.domain.actor import LEGACY, Actor
from workcenter.domain.model import AggregateState, DomainEvent
from workcenter.domain.resource_ledger import LedgerState
from workcenter.domain.work_item import WorkItemState

DEFAULT_DB = "workcenter.db"


class OrjsonTranscoder(Transcoder):
    def encode(self, obj: Any) -> bytes:
        return orjson.dumps(obj)

    def decode(self, data: bytes) -> Any:
        return orjson.loads(data)


class PydanticMapper(Mapper[UUID]):
    """Maps frozen pydantic events to stored events and back, upcasting old shapes."""

    def to_stored_event(self, domain_event: Any) -> StoredEvent:
        state = domain_event.model_dump(mode="json")
        version = getattr(type(domain_event), "class_version", 1)
        if version > 1:
            state["class_version"] = version
        return StoredEvent(
            originator_id=domain_event.originator_id,
            originator_version=domain_event.originator_version,
            topic=get_topic(type(domain_event)),
            state=self.transcoder.encode(state),
        )

    def to_domain_event(self, stored_event: StoredEvent) -> Any:
        state = self.transcoder.decode(stored_event.state)
        cls = resolve_topic(stored_event.topic)
        version = state.pop("class_version", 1)
        if "actor" not in state:
            # A base-field upcast for every class at once (ADR-0017): events stored
            # before actors were recorded say so; who it was is never guessed.
            state["actor"] = dict(LEGACY_ACTOR)
        while version < getattr(cls, "class_version", 1):
            getattr(cls, f"upcast_v{version}_v{version + 1}")(state)
            version += 1
        return cls(**state)


LEGACY_ACTOR = LEGACY.model_dump(mode="json")
# Snapshots are a cache the store writes, not a decision of anyone's.
SNAPSHOT_ACTOR = Actor(kind="system", id="snapshot")


class ActionSnapshot(DomainEvent):
    """The whole state of an Action at one version, so loading skips its history."""

    actor: Actor = SNAPSHOT_ACTOR
    state: ActionState


class WorkItemSnapshot(DomainEvent):
    actor: Actor = SNAPSHOT_ACTOR
    state: WorkItemState


class LedgerSnapshot(DomainEvent):
    actor: Actor = SNAPSHOT_ACTOR
    state: LedgerState


SNAPSHOT_CLASSES: dict[
    type[AggregateState], type[ActionSnapshot | WorkItemSnapshot | LedgerSnapshot]
] = {
    ActionState: ActionSnapshot,
    WorkItemState: WorkItemSnapshot,
    LedgerState: LedgerSnapshot,
}


def sqlite_env(db_path: str, synchronous: str | None = None) -> dict[str, str]:
    """The library env of a SQLite store at ``db_path``; ``synchronous`` (FULL or NORMAL)
    overrides ``$WORKCENTER_SQLITE_SYNCHRONOUS`` and the default (ADR-0018)."""
    return {
        "PERSISTENCE_MODULE": FACTORY_TOPIC,
        "SQLITE_DBNAME": db_path,
        # Snapshots and inline read models commit with the events (ADR-0016).
        "APPLICATION_RECORDER_TOPIC": get_topic(OneCommitSQLiteRecorder),
        **synchronous_env(synchronous),
    }


def resolve_db_path(db: str | os.PathLike[str] | None) -> str:
    """``db`` if given, else ``$WORKCENTER_DB``, else ./workcenter.db."""
    return os.fspath(db) if db is not None else os.environ.get("WORKCENTER_DB") or DEFAULT_DB


def store_env() -> dict[str, str]:
    return {
        "TRANSCODER_TOPIC": get_topic(OrjsonTranscoder),
        "MAPPER_TOPIC": get_topic(PydanticMapper),
        # States are frozen, so the cache can hand them out without copying.
        "AGGREGATE_CACHE_MAXSIZE": "5000",
        "DEEPCOPY_FROM_AGGREGATE_CACHE": "n",
    }
