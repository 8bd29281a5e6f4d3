"""The composition root: opening the store, the configuration, the registry of
read models and the parts of the service wired together.

This is the one module of the service layer that names concrete adapters (the
SQLite recorder, the mapper's snapshot classes, the merged stream read); every
other part is given what it needs through the ports of ``workcenter.ports``.
"""

from __future__ import annotations

import os
import sqlite3
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TypeVar
from uuid import UUID

from eventsourcing.application import Application
from eventsourcing.persistence import PersistenceError

from workcenter.adapters import compression, event_log
from workcenter.adapters.one_commit import OneCommitArguments
from workcenter.adapters.persistence import (
    SNAPSHOT_CLASSES,
    StoreUnavailable,
    prepare_store_file,
    resolve_db_path,
    sqlite_env,
    store_env,
)
from workcenter.adapters.recorders import OneCommitSQLiteRecorder
from workcenter.adapters.sqlite_settings import SYNCHRONOUS_ENV, validate_synchronous
from workcenter.coordinator_rules import DecisionRules, DomainRules
from workcenter.domain.model import AggregateState
from workcenter.ports import Clock, StreamReader, SystemClock
from workcenter.projections.detail import (
    Blobs,
    Detail,
    DetailView,
    EventStoreStates,
    Kind,
    refreshes_detail,
)
from workcenter.projections.mailbox import Mailbox, MailboxView
from workcenter.projections.work_queue import WorkQueue, WorkQueueView
from workcenter.read_models import OnRead, ReadModel, ReadModels
from workcenter.repository import Repository

__all__ = ["EAGER_VIEWS", "EventStore", "Parts", "StoreUnavailable", "compose", "open_store"]

T = TypeVar("T")
OPEN_ATTEMPTS = 4
INLINE_ENV = "WORKCENTER_INLINE_PROJECTIONS"
# Read models written in every command's own transaction (ADR-0016).
EAGER_VIEWS: list[str] = [WorkQueue.name, Mailbox.name]


class EventStore(Application[UUID]):
    """The library application holding every WorkItem and Action stream."""

    name = "WorkCenter"
    env = store_env()
    is_snapshotting_enabled = True


def inline_from_env() -> bool:
    """Inline projections are on unless ``$WORKCENTER_INLINE_PROJECTIONS`` says 0/false/no/off."""
    return os.environ.get(INLINE_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


LoadState = Callable[[Kind, UUID, int], AggregateState | None]


def read_model_registry(store: Application[UUID], load_state: LoadState) -> list[ReadModel]:
    """Every read model and its lifecycle: adding one is one entry here."""
    datastore = store.factory.datastore  # type: ignore[attr-defined]
    work_queue = WorkQueueView(datastore)
    work_queue.create_table()
    details = DetailView(
        datastore,
        source=EventStoreStates(
            store.recorder,
            load_state,
            mapper=store.mapper,
            snapshots_table=(
                store.snapshots.recorder.events_table_name  # type: ignore[attr-defined]
                if store.snapshots is not None
                else None
            ),
        ),
        blobs=Blobs(deflate=compression.deflate, inflate=compression.inflate),
    )
    details.create_table()
    mailbox = MailboxView(datastore)
    mailbox.create_table()
    return [
        ReadModel(WorkQueue.name, work_queue, on_read=OnRead.ALWAYS),
        # The Coordinator loop finds due wakes here, whoever writes the views.
        ReadModel(Mailbox.name, mailbox, on_read=OnRead.ALWAYS),
        # Written by every command that changes a WorkItem or an Action, so a browser's
        # read right after a write finds the DTO stored (ADR-0019 measured this against
        # catching it up on read and a fold on read); caught up on read after a crash.
        ReadModel(Detail.name, details, inline_for=refreshes_detail, on_read=OnRead.WITH_INLINE),
    ]


@dataclass(frozen=True)
class Parts:
    """The service's parts, wired: what the facade and the command handlers share."""

    store: EventStore
    clock: Clock
    boot_id: str
    read_models: ReadModels
    repository: Repository
    read_streams: StreamReader


def compose(
    store: EventStore,
    *,
    clock: Clock | None = None,
    boot_id: str | None = None,
    inline_projections: bool | None = None,
) -> Parts:
    if not isinstance(store.recorder, OneCommitSQLiteRecorder):
        # Any other recorder would silently drop the views and snapshots of each save.
        raise TypeError("the event store must use OneCommitSQLiteRecorder (see sqlite_env)")
    # Off (scale-out): saves leave the views to `workcenter projections run`.
    inline = inline_projections if inline_projections is not None else inline_from_env()
    # The detail view loads states through the repository, which saves through the
    # views: the loader is bound once both exist.
    repository: list[Repository] = []

    def load_state(kind: Kind, aggregate_id: UUID, version: int) -> AggregateState | None:
        return repository[0].state_at(kind, aggregate_id, version)

    read_models = ReadModels(store, read_model_registry(store, load_state), inline=inline)
    repository.append(Repository(store, read_models, OneCommitArguments(store), SNAPSHOT_CLASSES))
    return Parts(
        store=store,
        clock=clock or SystemClock(),
        boot_id=boot_id or uuid.uuid4().hex,
        read_models=read_models,
        repository=repository[0],
        read_streams=partial(event_log.streams_in_order, store),
    )


def decision_rules() -> DecisionRules:
    """The Coordinator's decision rules (coordinator.md 4, 5.3, 9.1)."""
    return DomainRules()


def open_store(
    db: str | os.PathLike[str] | None,
    sqlite_synchronous: str | None,
    create: bool,
    build: Callable[[EventStore], T],
) -> T:
    """``build`` on the SQLite store at ``db``, ``$WORKCENTER_DB`` or ./workcenter.db
    (creating it unless ``create`` is false); ``StoreUnavailable`` if it cannot be
    opened, or is another application's file; a refused file is left as it was."""
    db_path = resolve_db_path(db)
    # A bad synchronous setting is InvalidInput before any file exists.
    validate_synchronous(sqlite_synchronous or os.environ.get(SYNCHRONOUS_ENV, "NORMAL"))
    env = sqlite_env(db_path, sqlite_synchronous)
    prepare_store_file(db_path, create=create)
    for attempt in range(OPEN_ATTEMPTS):
        try:
            return build(EventStore(env=env))
        except (PersistenceError, sqlite3.Error) as error:
            # Processes that open a new file at once race to create its tables (a
            # lock, or the library's migration row written twice); the loser's next
            # try finds them made. A store that cannot be opened fails every try.
            failure = error
            time.sleep(0.05 * (attempt + 1))
    raise StoreUnavailable(f"cannot open the store at {db_path}: {failure}") from None
