"""The PostgreSQL server of the tests and a fresh schema per test.

The server is ``WORKCENTER_TEST_POSTGRES`` (``host port user dbname``), by default
``127.0.0.1 5432 postgres test``. Without a reachable server the PostgreSQL tests
skip with that reason, except in CI (``CI`` set), where they fail: CI starts the
server (``.ci/run``).
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

SETTINGS = os.environ.get("WORKCENTER_TEST_POSTGRES", "127.0.0.1 5432 postgres test").split()
HOST, PORT, USER, DBNAME = SETTINGS


def reachable() -> bool:
    try:
        socket.create_connection((HOST, int(PORT)), timeout=2).close()
    except (OSError, ValueError):
        return False
    return True


REACHABLE = reachable()
SKIP_REASON = f"no PostgreSQL reachable at {' '.join(SETTINGS)}"


def require_server() -> None:
    """Skip without a server, or fail in CI, where the server must be up."""
    if REACHABLE:
        return
    if os.environ.get("CI"):
        pytest.fail(f"CI needs PostgreSQL at {' '.join(SETTINGS)}; .ci/run starts it")
    pytest.skip(SKIP_REASON)


def url(schema: str) -> str:
    return f"postgresql://{USER}@{HOST}:{PORT}/{DBNAME}?schema={schema}"


def connect() -> Any:
    """A plain autocommit connection to the test server's database (no store's schema)."""
    import psycopg

    return psycopg.connect(host=HOST, port=PORT, user=USER, dbname=DBNAME, autocommit=True)


def drop_schema(schema: str) -> None:
    with connect() as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        # A rebuild's shadow schemas, left by a test that failed half way (named after the
        # schema's first 31 characters).
        rows = conn.execute(
            "SELECT nspname FROM pg_namespace WHERE nspname LIKE %s",
            (f"{schema[:31]}_rebuild_%",),
        ).fetchall()
        for (shadow,) in rows:
            conn.execute(f'DROP SCHEMA IF EXISTS "{shadow}" CASCADE')


@contextmanager
def fresh_schema(prefix: str = "wct") -> Iterator[str]:
    """A store URL on a schema of its own, dropped afterwards."""
    require_server()
    schema = f"{prefix}_{uuid.uuid4().hex[:12]}"
    try:
        yield url(schema)
    finally:
        drop_schema(schema)


@contextmanager
def statements() -> Iterator[list[tuple[Any, Any]]]:
    """Every statement psycopg executes or a write's batch takes for the wire
    (ADR-0104) meanwhile, with its parameters, in order."""
    import psycopg

    from workcenter.adapters import postgres_wire

    sent: list[tuple[Any, Any]] = []
    execute = psycopg.Cursor.execute
    add = postgres_wire.Batch.add

    def recording(self: psycopg.Cursor[Any], query: Any, params: Any = None, **kw: Any) -> Any:
        sent.append((query, params))
        return execute(self, query, params, **kw)

    def taken(self: postgres_wire.Batch, statement: Any, query: str, params: Any) -> None:
        sent.append((query, params))
        add(self, statement, query, params)

    psycopg.Cursor.execute = recording  # type: ignore[method-assign]
    postgres_wire.Batch.add = taken  # type: ignore[method-assign]
    try:
        yield sent
    finally:
        psycopg.Cursor.execute = execute  # type: ignore[method-assign]
        postgres_wire.Batch.add = add  # type: ignore[method-assign]
