"""The composition root: opening the store, the configuration, the registry of
read models and the parts of the service wired together.

This is the one module of the service layer that names concrete adapters (the
SQLite and PostgreSQL recorders, the mapper's snapshot classes, the merged stream
read); every other part is given what it needs through the ports of
``workcenter.service_layer.ports``.
"""

from __future__ import annotations

import os
import sqlite3
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import Any, TypeVar
from uuid import UUID

from eventsourcing.application import Application
from eventsourcing.persistence import PersistenceError

from workcenter.adapters import cipher, copy_mark, event_log
from workcenter.adapters.one_commit import OneCommitArguments
from workcenter.adapters.persistence import (
    SNAPSHOT_CLASSES,
    PydanticMapper,
    StoreUnavailable,
    foreign_url_scheme,
    is_postgres_url,
    prepare_store_file,
    refuse_when_closed,
    resolve_db_path,
    sqlite_env,
    store_env,
)
from workcenter.adapters.postgres_connection import watch_connections
from workcenter.adapters.recorders import OneCommitSQLiteRecorder
from workcenter.adapters.sqlite_locks import full_disk_said, watch_locks
from workcenter.adapters.sqlite_settings import (
    SYNCHRONOUS_ENV,
    WAL_AUTOCHECKPOINT_ENV,
    validate_synchronous,
    validate_wal_autocheckpoint,
)
from workcenter.domain.errors import InvalidInput
from workcenter.domain.model import AggregateState
from workcenter.projections import sql
from workcenter.projections.detail import Detail, DetailView
from workcenter.projections.detail_states import EventStoreStates, Kind
from workcenter.projections.mailbox import Mailbox, MailboxView
from workcenter.projections.work_queue import WorkQueue, WorkQueueView
from workcenter.service_layer.handlers.coordinator import CoordinatorCommands
from workcenter.service_layer.handlers.coordinator_rules import (
    DecisionRules,
    DomainRules,
    check_rules,
)
from workcenter.service_layer.handlers.resource_ledger import BudgetCommands
from workcenter.service_layer.handlers.run import RunCommands
from workcenter.service_layer.handlers.work_item import WorkItemCommands
from workcenter.service_layer.handlers.worker_protocol import WorkerProtocol, boot_id
from workcenter.service_layer.history import hash_chain
from workcenter.service_layer.history.proof import HistoryProof
from workcenter.service_layer.maintenance import Maintenance
from workcenter.service_layer.ports import (
    ChainReader,
    Clock,
    NotificationReader,
    StreamReader,
    SystemClock,
)
from workcenter.service_layer.queries.browser import WebReads
from workcenter.service_layer.queries.changes import ChangeFeed
from workcenter.service_layer.queries.decision_audit import DecisionAudit
from workcenter.service_layer.queries.items import Reads
from workcenter.service_layer.read_models import OnRead, ReadModel, ReadModels
from workcenter.service_layer.repository import Repository

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
    """Inline projections are on unless ``$WORKCENTER_INLINE_PROJECTIONS`` says 0/false/no/off;
    a value that says neither is InvalidInput (a typo would leave them on, unseen)."""
    given = os.environ.get(INLINE_ENV, "")
    value = given.strip().lower()
    if value in ("", "1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise InvalidInput(
        f"${INLINE_ENV} must be 1, true, yes or on, or 0, false, no or off, not {given!r}"
    )


LoadState = Callable[[Kind, UUID, int], AggregateState | None]


def read_model_registry(store: Application[UUID], load_state: LoadState) -> list[ReadModel]:
    """Every read model and its lifecycle: adding one is one entry here."""
    datastore = store.factory.datastore  # type: ignore[attr-defined]
    work_queue = WorkQueueView(datastore, titles=cipher.work_item_titles(store))
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
        blobs=cipher.detail_blobs(store),
    )
    details.create_table()
    mailbox = MailboxView(datastore)
    mailbox.create_table()
    return [
        ReadModel(WorkQueue.name, work_queue, on_read=OnRead.ALWAYS),
        # The Coordinator loop finds due wakes here, whoever writes the views.
        ReadModel(Mailbox.name, mailbox, on_read=OnRead.ALWAYS),
        # Written by every command, so a browser's read right after a write finds the DTO
        # stored (ADR-0019 measured this against catching it up on read and a fold on
        # read), or a marker to build it from when a heartbeat or a ledger write was the
        # item's last (ADR-0076); caught up on read after a crash.
        ReadModel(Detail.name, details, on_read=OnRead.WITH_INLINE),
    ]


@dataclass(frozen=True)
class Parts:
    """The service's parts, wired: the store, the repository and the registry of read
    models they share, and the handlers the facade delegates to."""

    store: EventStore
    clock: Clock
    boot_id: str
    read_models: ReadModels
    repository: Repository
    work_items: WorkItemCommands
    runs: RunCommands
    budget: BudgetCommands
    coordinator: CoordinatorCommands
    reads: Reads
    web_reads: WebReads
    changes: ChangeFeed
    maintenance: Maintenance
    worker_protocol: WorkerProtocol


def _one_commit_postgres(store: EventStore) -> bool:
    # Loaded only with the optional PostgreSQL extra, and only for a PostgreSQL store.
    module = sys.modules.get("workcenter.adapters.postgres_recorder")
    return module is not None and isinstance(store.recorder, module.OneCommitPostgresRecorder)


def compose(
    store: EventStore,
    *,
    clock: Clock | None = None,
    boot_id: str | None = None,
    inline_projections: bool | None = None,
    coordinator_rules: DecisionRules | None = None,
) -> Parts:
    if not isinstance(store.recorder, OneCommitSQLiteRecorder) and not _one_commit_postgres(store):
        # Any other recorder would silently drop the views and snapshots of each save.
        raise TypeError(
            "the event store must use OneCommitSQLiteRecorder or OneCommitPostgresRecorder"
            " (see sqlite_env and PostgresTarget.env)"
        )
    refuse_when_closed(store.recorder.datastore)  # type: ignore[attr-defined]  # both recorders have one
    if isinstance(store.recorder, OneCommitSQLiteRecorder):
        watch_locks(store.recorder.datastore)
    pool = getattr(store.recorder.datastore, "pool", None)  # type: ignore[attr-defined]
    if isinstance(store.mapper, PydanticMapper) and not getattr(
        pool, "is_sqlite_memory_mode", False
    ):
        # An event that cannot be decoded is named by its position (ADR-0099). Not in
        # memory: there a read waits for the write lock, which its own decoding may hold.
        store.mapper.locate = partial(event_log.position_of, store)
    if store.snapshots is not None:
        # A stream loaded from nothing starts at its newest snapshot (ADR-0069).
        store.recorder.snapshots_table_name = store.snapshots.recorder.events_table_name  # type: ignore[attr-defined]
    # Off (scale-out): saves leave the views to `workcenter projections run`.
    inline = inline_projections if inline_projections is not None else inline_from_env()
    # The detail view loads states through the repository, which saves through the
    # views: the loader is bound once both exist.
    repository: list[Repository] = []

    def load_state(kind: Kind, aggregate_id: UUID, version: int) -> AggregateState | None:
        return repository[0].state_at(kind, aggregate_id, version)

    read_models = ReadModels(
        store, read_model_registry(store, load_state), inline=inline, watch=watch_connections
    )
    repository.append(Repository(store, read_models, OneCommitArguments(store), SNAPSHOT_CLASSES))
    repo = repository[0]
    clock = clock or default_clock(store)
    boot_id = boot_id or uuid.uuid4().hex
    run_commands = RunCommands(repo, read_models, clock, boot_id)
    budget = BudgetCommands(repo, clock)
    chain: ChainReader = store.recorder.chain  # type: ignore[attr-defined]  # both recorders have one
    read_streams: StreamReader = partial(event_log.streams_in_order, store)
    read_events_after: NotificationReader = partial(event_log.events_after, store)
    rules = coordinator_rules or decision_rules()
    return Parts(
        store=store,
        clock=clock,
        boot_id=boot_id,
        read_models=read_models,
        repository=repo,
        work_items=WorkItemCommands(repo, clock),
        runs=run_commands,
        budget=budget,
        coordinator=CoordinatorCommands(repo, read_models, clock, boot_id, rules),
        reads=Reads(repo, read_models, read_streams),
        web_reads=WebReads(repo, read_models, clock),
        changes=ChangeFeed(repo, read_events_after),
        maintenance=Maintenance(
            HistoryProof(repo, chain, partial(event_log.stored_snapshots, store)),
            read_models,
            DecisionAudit(
                repo,
                read_models,
                read_streams,
                chain,
                rules,
                sealed=store.mapper.cipher is not None,
            ),
            run_commands,
        ),
        worker_protocol=WorkerProtocol(run_commands, budget),
    )


def default_clock(store: EventStore) -> Clock:
    """The clock of a store opened without one: on PostgreSQL its server's, so that the
    processes of many machines agree on when a lease ends (ADR-0136); on a SQLite file,
    which the processes of one machine share, that machine's."""
    datastore = store.recorder.datastore  # type: ignore[attr-defined]
    if sql.is_postgres(datastore):
        from workcenter.adapters.server_clock import ServerClock, read_on

        return ServerClock(partial(read_on, datastore.pool))
    return SystemClock()


def decision_rules() -> DecisionRules:
    """The Coordinator's decision rules (coordinator.md 4, 5.3, 9.1)."""
    return DomainRules()


def open_store(
    db: str | os.PathLike[str] | None,
    sqlite_synchronous: str | None,
    create: bool,
    build: Callable[[EventStore], T],
) -> T:
    """``build`` on the store at ``db``, ``$WORKCENTER_DB`` or ./workcenter.db: a SQLite
    file, or a ``postgresql://`` URL (creating it unless ``create`` is false);
    ``StoreUnavailable`` if it cannot be opened, or is another application's file; a
    refused file is left as it was."""
    db_path = resolve_db_path(db)
    # A malformed cipher key or views setting is InvalidInput before anything is opened or
    # made.
    cipher.configured_key()
    inline_from_env()
    if is_postgres_url(db_path):
        return _open_postgres(db_path, sqlite_synchronous, create, build)
    if (scheme := foreign_url_scheme(db_path)) is not None:
        # Else it would be taken as a file's relative path, and refused, if at all, as a
        # missing directory.
        raise InvalidInput(
            f"{scheme}:// is not a store Workcenter opens: give a SQLite file's path or a"
            " postgresql:// URL"
        )
    # A bad synchronous or checkpoint setting is InvalidInput before any file exists.
    validate_synchronous(sqlite_synchronous or os.environ.get(SYNCHRONOUS_ENV, "NORMAL"))
    if os.environ.get(WAL_AUTOCHECKPOINT_ENV):
        validate_wal_autocheckpoint(os.environ[WAL_AUTOCHECKPOINT_ENV])
    hash_chain.enabled(os.environ.get(hash_chain.HASH_CHAIN_ENV))
    env = sqlite_env(db_path, sqlite_synchronous)
    with full_disk_said(db_path):
        prepare_store_file(db_path, create=create)
    return _open(env, db_path, build)


def _open_postgres(
    url: str, sqlite_synchronous: str | None, create: bool, build: Callable[[EventStore], T]
) -> T:
    if sqlite_synchronous is not None:
        raise InvalidInput("sqlite_synchronous applies to SQLite stores, not PostgreSQL")
    try:
        from workcenter.adapters.postgres_settings import PostgresTarget, check_settings
    except ImportError:
        raise StoreUnavailable(
            "PostgreSQL needs the postgres extra: pip install 'workcenter[postgres]'"
        ) from None
    target = PostgresTarget(url)
    check_settings(os.environ)  # before the schema or any table is made
    if create:
        target.require_server()
    else:
        target.require_store()
    return _open(target.env(), target.where, build)


def _open(env: dict[str, str], where: str, build: Callable[[EventStore], T]) -> T:
    for attempt in range(OPEN_ATTEMPTS):
        try:
            store = EventStore(env=env)
            try:
                cipher.check_key(store, where)
                copy_mark.refuse_unfinished(store.factory.datastore, where)  # type: ignore[attr-defined]
            except StoreUnavailable:
                store.close()
                raise
            return build(store)
        except (PersistenceError, sqlite3.Error) as error:
            # Processes that open a new store at once race to create its tables (a
            # lock, or the library's migration row written twice); the loser's next
            # try finds them made. A store that cannot be opened fails every try.
            failure = error
            time.sleep(0.05 * (attempt + 1))
    raise StoreUnavailable(f"cannot open the store at {where}: {failure}") from None


def _aware(clock: Any) -> None:
    """``InvalidInput`` unless ``clock.now()`` is a datetime with its zone: a naive one was
    stored as a local time without offset, which another process's recovery could not
    compare with its own times (a TypeError; found by acceptance testing, ADR-0138)."""
    try:
        now = clock.now()
        zoned = isinstance(now, datetime) and now.utcoffset() is not None
    except Exception as error:
        raise InvalidInput(f"clock.now() failed: {type(error).__name__}: {error}") from None
    if not zoned:
        raise InvalidInput(
            "clock.now() must return a datetime with its time zone (datetime.now(UTC)),"
            f" not {now!r}"
        )


def check_open(
    db: object,
    clock: object,
    given_boot_id: object,
    inline_projections: object,
    create: object,
    coordinator_rules: object = None,
) -> None:
    """``InvalidInput`` for arguments of ``WorkCenter.open`` that are not what it takes,
    before anything is opened: else they fail later, as another error, in the first
    command that uses them."""
    if db is not None and not isinstance(db, str | os.PathLike):
        raise InvalidInput(f"db must be a path or a postgresql:// URL, not {type(db).__name__}")
    if isinstance(db, os.PathLike) and not isinstance(os.fspath(db), str):
        raise InvalidInput("db must be a path given as text, not bytes")
    if clock is not None and not callable(getattr(clock, "now", None)):
        raise InvalidInput(f"clock must have now(), not {type(clock).__name__}")
    if clock is not None:
        _aware(clock)
    if given_boot_id is not None:
        boot_id(given_boot_id)
    if coordinator_rules is not None:
        check_rules(coordinator_rules, "coordinator_rules")
    for name, flag in (("inline_projections", inline_projections), ("create", create)):
        if flag is not None and not isinstance(flag, bool):
            raise InvalidInput(f"{name} must be True or False, not {flag!r}")
