"""A Workcenter store on PostgreSQL: ``--db postgresql://user@host:port/dbname`` (ADR-0032).

The URL names the server and the database; the schema comes from its
``?schema=`` parameter, else ``$WORKCENTER_SCHEMA``, else ``workcenter``, so
several deployments can share one database. Everything else is the library's:
its PostgreSQL datastore and connection pool (``POSTGRES_POOL_SIZE``,
``POSTGRES_MAX_OVERFLOW``, ``POSTGRES_CONNECT_TIMEOUT``, ... read from the
environment as the library reads them), its recorders and its tables, made on
first use. The factory below is the library's, with two additions: the schema
is created if missing, and every connection finds the read models' unqualified
tables in it (``sql.pin_search_path``).
"""

from __future__ import annotations

import getpass
import os
import uuid
from collections.abc import Callable, Mapping
from typing import Any, Final
from urllib.parse import parse_qs, unquote, urlsplit

import psycopg
from eventsourcing.persistence import AggregateRecorder, ApplicationRecorder, PersistenceError
from eventsourcing.postgres import PostgresFactory
from eventsourcing.utils import Environment, EnvType, get_topic

from workcenter.adapters import postgres_layout, postgres_write
from workcenter.adapters.persistence import (
    NO_STORE,
    ServerNotAnswering,
    StoreUnavailable,
    public_url,
)
from workcenter.adapters.postgres_columns import name_stream_columns
from workcenter.adapters.postgres_connection import watch_connections
from workcenter.adapters.postgres_recorder import OneCommitPostgresRecorder
from workcenter.domain.errors import InvalidInput
from workcenter.projections import sql
from workcenter.service_layer.history import hash_chain

SCHEMA_ENV: Final = "WORKCENTER_SCHEMA"
# How a command's write commits (postgres_write.COMMIT_MODES): "on" (the default, durable
# at the commit's reply), "early-release" (durable at the reply, the lock released before
# the flush, ADR-0088) or "off" (ADR-0053).
SYNCHRONOUS_COMMIT_ENV: Final = "WORKCENTER_POSTGRES_SYNCHRONOUS_COMMIT"
# How long, in seconds, a claim may send nothing on the connection holding its candidates
# before the server ends that session and the holds with it (ADR-0111).
CLAIM_HOLD_TIMEOUT_ENV: Final = "WORKCENTER_POSTGRES_CLAIM_HOLD_TIMEOUT"
CLAIM_HOLD_TIMEOUT: Final = 60
# The first release with ``idle_session_timeout``, which bounds a claim's holds.
LEAST_SERVER_VERSION: Final = 140000
# The library's own settings of its pool and sessions, read by it from the environment
# (its key with the application's prefix first, then as it is), with the least value each
# takes. The library refuses a malformed one as OSError or ValueError, some (a negative
# lock timeout) only at the first write, and some (a negative idle timeout) not at all,
# its connections then failing until the pool gives up; so they are checked first.
LIBRARY_PREFIX: Final = "WORKCENTER_"
WHOLE_SETTINGS: Final = {
    "POSTGRES_POOL_SIZE": 0,
    "POSTGRES_MAX_OVERFLOW": 0,
    "POSTGRES_MAX_WAITING": 0,
    "POSTGRES_CONNECT_TIMEOUT": 1,
    "POSTGRES_LOCK_TIMEOUT": 0,
    "POSTGRES_IDLE_IN_TRANSACTION_SESSION_TIMEOUT": 0,
}
# The library's pool when its settings are unset: 5 connections kept, 10 more at need.
LIBRARY_POOL: Final = {"POSTGRES_POOL_SIZE": 5, "POSTGRES_MAX_OVERFLOW": 10}
# A claim holds its candidate on one connection while it writes on another (ADR-0095).
LEAST_CONNECTIONS: Final = 2
TRUTH_SETTINGS: Final = ("POSTGRES_PRE_PING",)
TRUTH_VALUES: Final = ("y", "yes", "t", "true", "on", "1", "n", "no", "f", "false", "off", "0")
DEFAULT_SCHEMA: Final = "workcenter"
# A setting of the opener's session, looked for by a second session (ADR-0120).
SESSION_PROBE: Final = "workcenter.session_probe"
# The library names the event tables after the application ("WorkCenter").
EVENTS_TABLE: Final = "workcenter_events"


# What a server says while it cannot take connections yet or any more (SQLSTATE 57P03,
# 57P01): it may take them soon. libpq gives a failed connection no SQLSTATE, only words.
NOT_NOW: Final = (
    "the database system is starting up",
    "the database system is shutting down",
    "the database system is in recovery mode",
    "the database system is not yet accepting connections",
    "the database system is not accepting connections",
    "terminating connection due to administrator command",
)


def may_answer_soon(error: psycopg.OperationalError) -> bool:
    """Whether a failed connection may succeed on a later try: no server answered
    (refused, unreachable, timed out), or it is starting, recovering or stopping. A
    server's refusal (a login refused, no such database) is final."""
    words = str(error)
    return "FATAL:" not in words or any(phrase in words for phrase in NOT_NOW)


class PostgresTarget:
    """Where a PostgreSQL store is: the server, the database and the schema."""

    def __init__(self, db: str) -> None:
        try:
            parts = urlsplit(db)
        except ValueError as error:
            raise InvalidInput(f"not a valid PostgreSQL URL ({error})") from None
        try:
            port = parts.port or 5432
        except ValueError:
            raise InvalidInput(f"not a valid port in {public_url(db)}") from None
        self.url = public_url(db)
        self.host = unquote(parts.hostname or "") or "localhost"
        self.port = str(port)
        self.user = unquote(parts.username or "") or getpass.getuser()
        self.password = unquote(parts.password or "")
        self.dbname = unquote(parts.path.lstrip("/")) or self.user
        # Blank values kept: ``?schema=`` (an unset variable in a script) is refused, not
        # read as no schema, which would open the default one, perhaps another's.
        query = parse_qs(parts.query, keep_blank_values=True)
        unknown = sorted(set(query) - {"schema"})
        if unknown:
            raise InvalidInput(f"unknown parameter {unknown[0]!r} in {self.url} (only schema)")
        given = query.get("schema", [])
        if len(given) > 1:
            raise InvalidInput(f"{self.url} names the schema {len(given)} times: name it once")
        schema = given[0] if given else os.environ.get(SCHEMA_ENV) or DEFAULT_SCHEMA
        if not sql.SCHEMA_NAME.match(schema):
            raise InvalidInput(
                f"schema {schema!r} is not a plain lower-case name of 1 to 48 letters,"
                " digits or _ (not starting with a digit)"
            )
        self.schema = schema
        self.where = f"{self.url} (schema {schema})"

    def env(self) -> dict[str, str]:
        """The library env of the store (the app's own keys, so they win over a global
        ``POSTGRES_*``; pool settings stay the library's to read from the environment)."""
        return {
            "PERSISTENCE_MODULE": FACTORY_TOPIC,
            "WORKCENTER_POSTGRES_HOST": self.host,
            "WORKCENTER_POSTGRES_PORT": self.port,
            "WORKCENTER_POSTGRES_USER": self.user,
            "WORKCENTER_POSTGRES_PASSWORD": self.password,
            "WORKCENTER_POSTGRES_DBNAME": self.dbname,
            "WORKCENTER_POSTGRES_SCHEMA": self.schema,
            # Snapshots and inline read models commit with the events (ADR-0016).
            "APPLICATION_RECORDER_TOPIC": get_topic(OneCommitPostgresRecorder),
        }

    def require_server(self) -> None:
        """``StoreUnavailable`` in the server's own words unless it answers: a store about
        to be made would otherwise wait out its pool's timeout at each try to open it
        (two minutes in all), and name a lost connection that never was. Also unless the
        server is recent enough (ADR-0111) and a store already there has a layout this
        Workcenter knows (ADR-0113)."""
        self._has_store()

    def require_store(self) -> None:
        """``StoreUnavailable`` unless the server answers and the schema holds a store
        whose layout this Workcenter knows: reading never makes one."""
        if not self._has_store():
            raise StoreUnavailable(f"{NO_STORE} {self.where}")

    def _has_store(self) -> bool:
        try:
            connected = self._connect()
        except psycopg.OperationalError as error:
            failed = ServerNotAnswering if may_answer_soon(error) else StoreUnavailable
            raise failed(f"cannot open the store at {self.where}: {error}") from None
        except psycopg.Error as error:
            raise StoreUnavailable(f"cannot open the store at {self.where}: {error}") from None
        try:
            with connected as conn:
                check_version(conn.info.server_version)  # before anything is made
                check_sessions_kept(conn, self._connect, self.where)
                row = conn.execute(
                    "SELECT to_regclass(%s), to_regclass(%s)",
                    (f"{self.schema}.{EVENTS_TABLE}", f"{self.schema}.{postgres_layout.TABLE}"),
                ).fetchone()
                events, layout = row if row is not None else (None, None)
                found = events is not None
                if found and layout is not None:
                    postgres_layout.check(postgres_layout.read(conn, self.schema), self.where)
        except psycopg.Error as error:
            raise StoreUnavailable(f"cannot open the store at {self.where}: {error}") from None
        return found

    def _connect(self) -> psycopg.Connection[Any]:
        # Autocommit: each read its own transaction, as a pooler by transaction would
        # send it anywhere (check_sessions_kept).
        return psycopg.connect(
            host=self.host,
            port=self.port,
            user=self.user,
            password=self.password,
            dbname=self.dbname,
            connect_timeout=5,
            autocommit=True,
        )


class WorkcenterPostgresFactory(PostgresFactory):
    """The library's PostgreSQL factory; the schema is made on first use, and found by
    the read models' unqualified names."""

    def __init__(self, env: Environment | EnvType | None) -> None:
        super().__init__(env)
        sql.pin_search_path(self.datastore)
        watch_connections(self.datastore)
        self.datastore.claim_hold_timeout = claim_hold_timeout(  # type: ignore[attr-defined]
            os.environ.get(CLAIM_HOLD_TIMEOUT_ENV)
        )
        if self.env_create_table():
            with sql.transaction(self.datastore, commit=True) as c:
                c.execute(f'CREATE SCHEMA IF NOT EXISTS "{self.datastore.schema}"')

    def aggregate_recorder(self, purpose: str = "events") -> AggregateRecorder:
        """The snapshots' recorder, whose reads name their columns (ADR-0107)."""
        recorder = super().aggregate_recorder(purpose)
        name_stream_columns(recorder)
        return recorder

    def application_recorder(self) -> ApplicationRecorder:
        recorder = super().application_recorder()
        if isinstance(recorder, OneCommitPostgresRecorder):
            recorder.synchronous_commit = synchronous_commit(os.environ.get(SYNCHRONOUS_COMMIT_ENV))
            if recorder.synchronous_commit == "early-release":
                flush_once(self.datastore)
            # A claim's reads on the wire too (ADR-0104).
            self.datastore.read_exchange = recorder.read_exchange  # type: ignore[attr-defined]
            if self.env_create_table():
                # Its tables and functions are made.
                postgres_layout.record(self.datastore, f"schema {self.datastore.schema}")
            recorder.chained = hash_chain.enabled(self.env.get(hash_chain.HASH_CHAIN_KEY))
            if recorder.chained:
                # A store written before the chain (or with it off) is chained on open;
                # the store records it, and every `audit verify` says so (ADR-0134, 0137).
                recorder.chain_unchained()
        return recorder


def check_settings(environ: Mapping[str, str]) -> None:
    """``InvalidInput`` naming the first PostgreSQL setting in ``environ`` that is not one
    a store opens with, before anything is opened or written."""
    synchronous_commit(environ.get(SYNCHRONOUS_COMMIT_ENV))
    claim_hold_timeout(environ.get(CLAIM_HOLD_TIMEOUT_ENV))
    for name, least in WHOLE_SETTINGS.items():
        key, value = _library_setting(environ, name)
        if not value:
            continue  # unset or empty: the library's default
        try:
            number: int | None = int(value)
        except ValueError:
            number = None
        if number is None or number < least:
            raise InvalidInput(f"${key} must be a whole number of at least {least}, not {value!r}")
    _check_pool(environ)
    for name in TRUTH_SETTINGS:
        key, value = _library_setting(environ, name)
        if value and value.lower() not in TRUTH_VALUES:
            raise InvalidInput(
                f"${key} must be yes or no (or true/false, on/off, 1/0), not {value!r}"
            )


def _check_pool(environ: Mapping[str, str]) -> None:
    """A pool of fewer than two connections is refused: every claim would wait for a
    second connection, which its first holds, until the pool gives up (ADR-0095)."""
    keys = []
    capacity = 0
    for name, default in LIBRARY_POOL.items():
        key, value = _library_setting(environ, name)
        keys.append(f"${key}")
        capacity += int(value) if value else default  # whole numbers: checked above
    if capacity < LEAST_CONNECTIONS:
        raise InvalidInput(
            f"{' + '.join(keys)} is {capacity}: a PostgreSQL store needs at least"
            f" {LEAST_CONNECTIONS} connections (a claim holds its Action on one while it"
            " writes on another)"
        )


def _library_setting(environ: Mapping[str, str], name: str) -> tuple[str, str | None]:
    """The key the library reads ``name`` by, and its value: the prefixed key wins."""
    for key in (LIBRARY_PREFIX + name, name):
        if key in environ:
            return key, environ[key]
    return name, None


def synchronous_commit(value: str | None) -> postgres_write.CommitMode:
    """The commit mode: "on" unless set (ADR-0053, ADR-0088); a value not among
    ``postgres_write.COMMIT_MODES`` is InvalidInput."""
    text = (value or "on").strip().lower()
    for mode in postgres_write.COMMIT_MODES:
        if text == mode:
            return mode
    raise InvalidInput(f"${SYNCHRONOUS_COMMIT_ENV} must be on, early-release or off, not {value!r}")


def claim_hold_timeout(value: str | None) -> int:
    """The seconds a claim may send nothing while holding candidates (ADR-0111):
    ``CLAIM_HOLD_TIMEOUT`` unless set; a value not a whole number of at least 1 is
    InvalidInput."""
    if not value:
        return CLAIM_HOLD_TIMEOUT
    try:
        seconds = int(value)
    except ValueError:
        seconds = 0
    if seconds < 1:
        raise InvalidInput(
            f"${CLAIM_HOLD_TIMEOUT_ENV} must be a whole number of seconds of at least 1,"
            f" not {value!r}"
        )
    return seconds


def check_version(version: int) -> None:
    """``StoreUnavailable`` for a server older than ``LEAST_SERVER_VERSION``, whose claims
    could not bound their holds (``idle_session_timeout``, ADR-0111). ``version`` is a
    connection's, known without a round trip."""
    if version < LEAST_SERVER_VERSION:
        raise StoreUnavailable(
            f"PostgreSQL {version // 10000} is too old: Workcenter needs PostgreSQL"
            f" {LEAST_SERVER_VERSION // 10000} or newer"
        )


def check_sessions_kept(
    conn: psycopg.Connection[Any], connect: Callable[[], psycopg.Connection[Any]], where: str
) -> None:
    """``StoreUnavailable`` unless ``conn`` (autocommit) keeps one server session of its
    own from one transaction to the next, as a direct connection or a pooler by session
    does (ADR-0120). A store's connections set their schema once, and its claims hold
    session locks on them (ADR-0105, ADR-0118): through a pooler by transaction or by
    statement, those would be another client's, and the writes could land in another
    schema. Seen by a setting of this session: lost by the next transaction (a pooler
    that resets its server sessions), or seen by a new client's (one that hands them on,
    most recently used first, as PgBouncer does)."""
    mark = uuid.uuid4().hex
    conn.execute("SELECT set_config(%s, %s, false)", (SESSION_PROBE, mark))
    kept = conn.execute("SELECT current_setting(%s, true)", (SESSION_PROBE,)).fetchone()
    with connect() as other:
        seen = other.execute("SELECT current_setting(%s, true)", (SESSION_PROBE,)).fetchone()
    if kept != (mark,) or seen == (mark,):
        raise StoreUnavailable(
            f"cannot open the store at {where}: its connections go through a pooler that"
            " shares server sessions between clients (by transaction or by statement, as"
            " PgBouncer's pool_mode = transaction); a store needs a session per connection"
            " (its connections set their schema once and its claims hold session locks):"
            " pool by session (pool_mode = session) or connect to the server directly"
        )


def flush_once(datastore: Any) -> None:
    """Run the flush that ends each early-released write once, when the store is opened:
    a server that refuses it (a role without the right to write a WAL message) is
    ``StoreUnavailable`` now, not a command that committed and then failed."""
    try:
        with datastore.get_connection() as conn, conn.cursor() as c:
            for statement in postgres_write.FLUSH:
                c.execute(statement)
    except PersistenceError as error:
        raise StoreUnavailable(
            f"${SYNCHRONOUS_COMMIT_ENV}=early-release: the server refused its flush: {error}"
        ) from None


FACTORY_TOPIC: Final = get_topic(WorkcenterPostgresFactory)
