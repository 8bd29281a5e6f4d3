"""SQLite settings of the store's connections: the ``synchronous`` pragma (ADR-0018).

The library's SQLite datastore opens its connections in WAL mode and leaves
SQLite's default ``synchronous=FULL``. Workcenter chooses ``NORMAL`` by default
and lets a deployment choose ``FULL``: the factory below is the library's own
SQLite factory with a connection pool that sets the pragma on every connection
it opens, so every read model sharing the datastore gets it too.
"""

from __future__ import annotations

from typing import Any, Final, Literal

from eventsourcing.sqlite import SQLiteConnection, SQLiteConnectionPool, SQLiteFactory
from eventsourcing.utils import Environment, EnvType, get_topic

from workcenter.domain.errors import InvalidInput

Synchronous = Literal["FULL", "NORMAL"]
SYNCHRONOUS_VALUES: Final[tuple[Synchronous, ...]] = ("FULL", "NORMAL")
DEFAULT_SYNCHRONOUS: Final[Synchronous] = "NORMAL"
# The application is named "WorkCenter", so the library looks this key up first;
# a value put in the application's env under it overrides the process environment.
SYNCHRONOUS_ENV: Final = "WORKCENTER_SQLITE_SYNCHRONOUS"
SYNCHRONOUS_KEY: Final = "SQLITE_SYNCHRONOUS"


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


class SynchronousConnectionPool(SQLiteConnectionPool):
    """The library's pool; each new connection also gets ``PRAGMA synchronous``."""

    def __init__(self, *, synchronous: Synchronous, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.synchronous = synchronous

    def _create_connection(self) -> SQLiteConnection:
        connection = super()._create_connection()
        # The value is one of SYNCHRONOUS_VALUES; a pragma takes no bound parameters.
        connection._sqlite_conn.execute(f"PRAGMA synchronous={self.synchronous}")
        return connection


class WorkcenterSQLiteFactory(SQLiteFactory):
    """The library's SQLite factory, with the pool above."""

    def __init__(self, env: Environment | EnvType | None) -> None:
        super().__init__(env)
        synchronous = configured_synchronous(self.env)
        old = self.datastore.pool  # built by the library, no connection opened yet
        self.datastore.pool = SynchronousConnectionPool(
            synchronous=synchronous,
            db_name=old.db_name,
            lock_timeout=old.lock_timeout,
        )
        old.close()


FACTORY_TOPIC: Final = get_topic(WorkcenterSQLiteFactory)


__all__ = [
    "DEFAULT_SYNCHRONOUS",
    "FACTORY_TOPIC",
    "SYNCHRONOUS_ENV",
    "SYNCHRONOUS_VALUES",
    "Synchronous",
    "WorkcenterSQLiteFactory",
    "synchronous_env",
    "validate_synchronous",
]
