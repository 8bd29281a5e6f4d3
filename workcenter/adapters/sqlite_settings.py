"""SQLite settings of the store's connections: the ``synchronous`` pragma (ADR-0018)
and the WAL's checkpoint interval (ADR-0042, ADR-0084); and whether its recorder
writes the hash chain (ADR-0028, on unless a benchmark turns it off).

The library's SQLite datastore opens its connections in WAL mode and leaves
SQLite's default ``synchronous=FULL`` and ``wal_autocheckpoint=1000``. Workcenter
chooses ``NORMAL`` and 4,000 pages by default and lets a deployment choose
others: the factory below is the library's own SQLite factory with a connection
pool that sets both pragmas on every connection it opens, so every read model
sharing the datastore gets them too.
"""

from __future__ import annotations

import sqlite3
from typing import Any, Final, Literal

from eventsourcing.persistence import ApplicationRecorder, InterfaceError
from eventsourcing.sqlite import (
    SQLITE3_DEFAULT_LOCK_TIMEOUT,
    SQLiteConnection,
    SQLiteConnectionPool,
    SQLiteFactory,
)
from eventsourcing.utils import Environment, EnvType, get_topic

from workcenter.adapters.recorders import OneCommitSQLiteRecorder
from workcenter.adapters.wal_checkpoint import BACKSTOP, WalCheckpointer
from workcenter.domain.errors import InvalidInput
from workcenter.service_layer.history import hash_chain

Synchronous = Literal["FULL", "NORMAL"]
SYNCHRONOUS_VALUES: Final[tuple[Synchronous, ...]] = ("FULL", "NORMAL")
DEFAULT_SYNCHRONOUS: Final[Synchronous] = "NORMAL"
# The application is named "WorkCenter", so the library looks this key up first;
# a value put in the application's env under it overrides the process environment.
SYNCHRONOUS_ENV: Final = "WORKCENTER_SQLITE_SYNCHRONOUS"
SYNCHRONOUS_KEY: Final = "SQLITE_SYNCHRONOUS"
# A commit that leaves the WAL at least this many pages long copies the WAL into the
# database file and syncs it (a checkpoint). SQLite's default is 1,000: a checkpoint
# every ~57 creates; 4,000 writes ~40 % fewer pages with a fifth of the syncs
# (ADR-0042). A file store's thread now checkpoints every quarter second, off the
# writers' path, and the commits only at BACKSTOP times this (ADR-0084). Closing the
# store still checkpoints it all.
WAL_AUTOCHECKPOINT_ENV: Final = "WORKCENTER_SQLITE_WAL_AUTOCHECKPOINT"
WAL_AUTOCHECKPOINT_KEY: Final = "SQLITE_WAL_AUTOCHECKPOINT"
DEFAULT_WAL_AUTOCHECKPOINT: Final = 4000
# 0 (SQLite: never checkpoint until closed) is refused: the WAL would grow without bound.
WAL_AUTOCHECKPOINT_RANGE: Final = range(1, 1_000_001)
# Prepared statements kept per connection. The library passes ``cached_statements=True``,
# which ``sqlite3`` reads as a cache of ONE, so nearly every statement of a command was
# parsed again (ADR-0020); a command runs a few dozen distinct statements.
STATEMENT_CACHE: Final = 128


def validate_synchronous(value: object) -> Synchronous:
    """``value`` as FULL or NORMAL (any case), else InvalidInput."""
    text = value.strip().upper() if isinstance(value, str) else value
    if text not in SYNCHRONOUS_VALUES:
        raise InvalidInput(
            f"SQLite synchronous must be FULL or NORMAL, not {value!r}"
            f" (from the sqlite_synchronous option or ${SYNCHRONOUS_ENV})"
        )
    return text


def synchronous_env(synchronous: str | None) -> dict[str, str]:
    """The env entry that pins ``synchronous`` (validated now), or none to let the
    process environment or the default decide."""
    if synchronous is None:
        return {}
    return {SYNCHRONOUS_ENV: validate_synchronous(synchronous)}


def configured_synchronous(env: Environment) -> Synchronous:
    return validate_synchronous(env.get(SYNCHRONOUS_KEY) or DEFAULT_SYNCHRONOUS)


def validate_wal_autocheckpoint(value: object) -> int:
    """``value`` as a whole number of pages in ``WAL_AUTOCHECKPOINT_RANGE``, else
    InvalidInput."""
    text = value.strip() if isinstance(value, str) else None
    if text and text.isascii() and text.isdigit() and int(text) in WAL_AUTOCHECKPOINT_RANGE:
        return int(text)
    raise InvalidInput(
        "SQLite wal_autocheckpoint must be a whole number of pages from"
        f" {WAL_AUTOCHECKPOINT_RANGE.start} to {WAL_AUTOCHECKPOINT_RANGE.stop - 1:,},"
        f" not {value!r} (from ${WAL_AUTOCHECKPOINT_ENV})"
    )


def configured_wal_autocheckpoint(env: Environment) -> int:
    value = env.get(WAL_AUTOCHECKPOINT_KEY)
    return DEFAULT_WAL_AUTOCHECKPOINT if not value else validate_wal_autocheckpoint(value)


class ConfiguredConnectionPool(SQLiteConnectionPool):
    """The library's pool; each new connection also gets ``PRAGMA synchronous``,
    ``PRAGMA wal_autocheckpoint`` and a statement cache of ``STATEMENT_CACHE``."""

    def __init__(self, *, synchronous: Synchronous, wal_autocheckpoint: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.synchronous = synchronous
        self.wal_autocheckpoint = wal_autocheckpoint
        # A file's WAL is checkpointed by a thread, its commits' own checkpoint only at
        # BACKSTOP intervals (ADR-0084); a database in memory has no WAL.
        self.checkpointer: WalCheckpointer | None = None
        self.commit_checkpoint = wal_autocheckpoint
        if not self.is_sqlite_memory_mode:
            self.checkpointer = WalCheckpointer(self.db_name)
            self.commit_checkpoint = wal_autocheckpoint * BACKSTOP
            self.checkpointer.start()

    def close(self) -> None:
        # First the thread, so that the last connection to close checkpoints everything.
        if self.checkpointer is not None:
            self.checkpointer.close()
        super().close()

    def _create_connection(self) -> SQLiteConnection:
        # The library's own connection setup (eventsourcing 9.5.6), but for the cache size,
        # which can only be given to ``sqlite3.connect``.
        try:
            c = sqlite3.connect(
                database=self.db_name,
                uri=True,
                check_same_thread=False,
                isolation_level=None,
                cached_statements=STATEMENT_CACHE,
                timeout=self.lock_timeout or SQLITE3_DEFAULT_LOCK_TIMEOUT,
            )
        except (sqlite3.Error, TypeError) as e:
            raise InterfaceError(e) from e
        if not self.is_sqlite_memory_mode and not self.is_journal_mode_wal:
            if c.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                c.execute("PRAGMA journal_mode=WAL")
                self.journal_mode_was_changed_to_wal = True
            self.is_journal_mode_wal = True
        c.row_factory = sqlite3.Row
        # The value is one of SYNCHRONOUS_VALUES; a pragma takes no bound parameters.
        c.execute(f"PRAGMA synchronous={self.synchronous}")
        # Per connection: SQLite checkpoints after a commit of the connection that made
        # the WAL long enough, with that connection's setting.
        c.execute(f"PRAGMA wal_autocheckpoint={self.commit_checkpoint:d}")
        return SQLiteConnection(sqlite_conn=c, max_age=self.max_age)


class WorkcenterSQLiteFactory(SQLiteFactory):
    """The library's SQLite factory, with the pool above."""

    def __init__(self, env: Environment | EnvType | None) -> None:
        super().__init__(env)
        synchronous = configured_synchronous(self.env)
        wal_autocheckpoint = configured_wal_autocheckpoint(self.env)
        old = self.datastore.pool  # built by the library, no connection opened yet
        if old.lock_timeout is not None and old.lock_timeout < 0:
            # The library took it, and SQLite then waited for no lock at all (found by
            # acceptance testing, ADR-0145).
            old.close()
            raise InvalidInput(
                f"SQLITE_LOCK_TIMEOUT must be a whole number of seconds, 0 or more, not"
                f" {old.lock_timeout}"
            )
        self.datastore.pool = ConfiguredConnectionPool(
            synchronous=synchronous,
            wal_autocheckpoint=wal_autocheckpoint,
            db_name=old.db_name,
            lock_timeout=old.lock_timeout,
        )
        old.close()

    def application_recorder(self) -> ApplicationRecorder:
        recorder = super().application_recorder()
        if isinstance(recorder, OneCommitSQLiteRecorder):
            recorder.chained = hash_chain.enabled(self.env.get(hash_chain.HASH_CHAIN_KEY))
            if recorder.chained:
                # A store written before the chain (or with it off) is chained on open;
                # the store records it, and every `audit verify` says so (ADR-0134, 0137).
                recorder.chain_unchained()
        return recorder


FACTORY_TOPIC: Final = get_topic(WorkcenterSQLiteFactory)


__all__ = [
    "DEFAULT_SYNCHRONOUS",
    "DEFAULT_WAL_AUTOCHECKPOINT",
    "FACTORY_TOPIC",
    "SYNCHRONOUS_ENV",
    "SYNCHRONOUS_VALUES",
    "WAL_AUTOCHECKPOINT_ENV",
    "Synchronous",
    "WorkcenterSQLiteFactory",
    "synchronous_env",
    "validate_synchronous",
    "validate_wal_autocheckpoint",
]
