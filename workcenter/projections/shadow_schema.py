"""A rebuild's shadow schema on PostgreSQL, and the ones rebuilds cut short left behind.

While its rebuild runs, a shadow is held by a session advisory lock on a connection
the rebuild keeps out of its pool. The lock is taken before the schema exists and let
go when the rebuild ends; a rebuild cut short by a lost connection or a killed process
lets it go with its session. So a shadow whose lock can be taken is one no rebuild is
building, and the next rebuild of a store of that name drops it (ADR-0092).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from workcenter.projections import sql

# The live schema's name cut to 31 characters, so that the shadow's is one a store may
# have (sql.SCHEMA_NAME: at most 48); the random part keeps it apart from others.
PREFIX_LENGTH = 31
SUFFIX = re.compile(r"_rebuild_[0-9a-f]{8}")
LOCK = "SELECT pg_advisory_lock(hashtextextended(%s, 0))"
TRY_LOCK = "SELECT pg_try_advisory_lock(hashtextextended(%s, 0)) AS taken"
UNLOCK = "SELECT pg_advisory_unlock(hashtextextended(%s, 0))"


@dataclass(frozen=True)
class Shadow:
    datastore: Any
    # The shadows of earlier rebuilds, cut short, that making this one dropped.
    removed: tuple[str, ...]


@contextmanager
def held(live: Any, watch: Callable[[Any], None]) -> Iterator[Shadow]:
    """A new schema of the live store's database, held for the ``with`` block, then
    dropped. ``watch`` makes its lost connections the store's typed error; one lost
    before the drop says which schema it leaves and how to remove it."""
    prefix = live.schema[:PREFIX_LENGTH]
    schema = f"{prefix}_rebuild_{uuid.uuid4().hex[:8]}"
    datastore = _datastore(live, schema)
    watch(datastore)
    key = (_lock_key(schema),)
    created = dropped = False
    try:
        # Every statement of the lock's connection runs inside this block, so the
        # datastore's own handling (and ``watch``'s) sees its errors.
        with datastore.get_connection() as conn:
            conn.execute(LOCK, key)
            removed = _drop_left_behind(conn, prefix)
            conn.execute(f'CREATE SCHEMA "{schema}"')
            created = True
            try:
                yield Shadow(datastore, removed)
            finally:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
                dropped = True
                conn.execute(UNLOCK, key)  # the pooled connection keeps none
    except Exception as error:
        if not created or dropped or not sql.connection_lost(error):
            raise
        left = (
            f"the rebuild's schema {schema} is left in the database: the next rebuild"
            f' removes it, or DROP SCHEMA "{schema}" CASCADE once the database is back'
        )
        raise type(error)(f"{str(error).rstrip('.')}; {left}") from error
    finally:
        datastore.close()


def _datastore(live: Any, schema: str) -> Any:
    from eventsourcing.postgres import PostgresDatastore  # an optional extra

    params = sql.connection_params(live)
    datastore = PostgresDatastore(
        dbname=params["dbname"],
        host=params["host"],
        port=params["port"],
        user=params["user"],
        password=params["password"],
        schema=schema,
        pool_size=2,  # one connection holds the lock, the other builds the view
    )
    sql.pin_search_path(datastore)
    return datastore


def _lock_key(schema: str) -> str:
    return f"workcenter:rebuild:{schema}"


def _drop_left_behind(conn: Any, prefix: str) -> tuple[str, ...]:
    """Drop the shadows of a store of this name whose rebuild no longer holds them.

    Only the store's user's own: another role's schema is not this store's to drop, and
    a refused drop would fail the rebuild."""
    rows = conn.execute(
        "SELECT nspname FROM pg_namespace WHERE starts_with(nspname, %s)"
        " AND pg_get_userbyid(nspowner) = current_user ORDER BY nspname",
        (prefix + "_rebuild_",),
    ).fetchall()
    removed = []
    for row in rows:
        name = row["nspname"]
        if not SUFFIX.fullmatch(name[len(prefix) :]):
            continue
        key = (_lock_key(name),)
        if not conn.execute(TRY_LOCK, key).fetchone()["taken"]:
            continue  # another rebuild is building it
        try:
            conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
        finally:
            conn.execute(UNLOCK, key)
        removed.append(name)
    return tuple(removed)
