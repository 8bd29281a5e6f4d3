"""A PostgreSQL store whose server went away: a typed error, never a hang (ADR-0056).

When the server restarts, fails over or drops a connection, every command and read
in flight gets ``StoreDisconnected`` (a ``StoreUnavailable``, so a ``WorkcenterError``,
and also the library's ``OperationalError``, so the library's own handling of it is
unchanged). A command that was committing when its connection dropped may or may
not have committed: the caller reads before it retries, and the domain's fences
(lease epochs, expected versions) refuse a second application of the same command.

The pool then drops every connection the outage broke, not one per failed command,
and opens new ones as commands ask for them (the library's recorders also retry a
few times, 0.2 s apart, so a short outage often never reaches the caller). The
process logs one line per outage, at its first lost connection. A server that stops
answering without closing its connections is found by TCP keepalives instead of a
wait without end. While the server is away, commands fail at once instead of each
waiting out the pool (``Outage``, ADR-0121).

A pool with no connection free is ``PoolBusy`` in its own words (the server is fine,
nothing is reconnected), and work that holds a connection while it takes others (a
claim) takes turns, so that it never holds every connection at once (ADR-0095).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any, Final

from eventsourcing.persistence import InterfaceError, OperationalError

from workcenter.adapters.persistence import StoreUnavailable
from workcenter.projections import sql
from workcenter.service_layer.ports import StoreUnreachable

log = logging.getLogger("workcenter.store")
QUIET: Final = 30.0
# After "the database answers again", the seconds within which a loss is still the
# outage's (a connection checked out before it failing late).
AFTER_BACK: Final = 2.0
# While the server is away: how often one connection is tried, and for how long.
PROBE_EVERY: Final = 0.5
PROBE_TIMEOUT: Final = 5
# How long the pool keeps trying to replace a connection before it gives the slot up
# (psycopg_pool's default is 5 minutes, its tries ever further apart): a slot given up
# is made again at the next command's need, so a server back after a long outage is
# used at once, not after the pool's next try (ADR-0121).
RECONNECT_TIMEOUT: Final = 10.0
# A silent peer (a cut network, a frozen host) is declared dead after about 30 s.
KEEPALIVES: Final = {
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 4,
}


class StoreDisconnected(StoreUnavailable, StoreUnreachable, OperationalError):
    """The database connection failed under a command or a read, or no connection of
    the pool came free in time. A write in flight may or may not have been committed:
    send again the commands that may be (a create with its request id, a finish with its
    report, a message with its client id), read before sending others again. The next
    command reconnects."""

    code = "store_disconnected"


def disconnected(error: BaseException) -> bool:
    """Whether ``error`` (the library's wrapping of psycopg's) is a lost connection,
    not a refusal by a live server (a lock timeout, a serialisation failure, ...)."""
    if not isinstance(error, OperationalError | InterfaceError):
        return False
    return sql.disconnected_state(getattr(error.__cause__, "sqlstate", None))


class PoolBusy(StoreDisconnected):
    """No connection of the pool (or no turn to hold one) came free in time: more
    commands ran at once than the pool serves, or commands were held up in the database
    (a lock). Nothing was sent by the command that got it; like a lost connection it
    passes, and workers wait it out the same way. Also a write that waited out
    ``POSTGRES_LOCK_TIMEOUT``: sent, refused and rolled back (``held_up``)."""

    code = "store_busy"


def busy(pool: Any, cause: BaseException | None = None) -> StoreDisconnected:
    """The failure of a command that found no connection free (the pool's own
    ``PoolTimeout``, its ``TooManyRequests``, or no claim's turn within the same wait):
    ``PoolBusy``, or ``StoreDisconnected`` when no connection can be made at all (the
    server, or a pooler in front of it, is away or refuses)."""
    from psycopg_pool import TooManyRequests  # the PostgreSQL extra's, as the pool is

    size = pool.max_size
    refusal = _refusal(pool)
    if refusal is not None:
        away = _said(
            f"no connection to the database could be made within {pool.timeout:g} s", refusal
        )
        away.__cause__ = refusal
        return away
    if isinstance(cause, TooManyRequests):
        return PoolBusy(
            f"the pool's {size} connections were all in use and {pool.max_waiting} commands"
            " already waited for one (POSTGRES_MAX_WAITING)"
        )
    return PoolBusy(
        f"no connection of the pool's {size} came free within {pool.timeout:g} s: every one"
        " was in use, by more commands at once than POSTGRES_POOL_SIZE +"
        " POSTGRES_MAX_OVERFLOW serve, or by commands held up in the database (a lock)"
    )


def _refusal(pool: Any) -> Exception | None:
    """Why no connection can be made with the pool's arguments (the driver's error, in
    the refusing side's words: the server's, or a pooler's between), by making one: the
    pool tries again until its timeout and keeps the reason to its log, and counts as
    its own connections those it is still trying to make (a pool whose server went away
    looked busy). None when a connection can be made now (the pool's are busy)."""
    import psycopg

    try:
        connect_apart(pool, connect_timeout=PROBE_TIMEOUT).close()
    except psycopg.Error as error:
        return error
    return None


def connect_apart(pool: Any, **options: Any) -> Any:
    """A connection of its own, made with the pool's arguments, never one of the pool's
    (its rows tuples, not the pool's dicts). A password the pool asks for at each
    connection (the library's POSTGRES_GET_PASSWORD_TOPIC, a token that expires) is
    asked for here too: one kept from the pool's last connection could be refused for
    good."""
    import psycopg

    kwargs = dict(pool.kwargs)
    kwargs.pop("row_factory", None)
    get_password = getattr(pool, "get_password_func", None)
    if get_password is not None:
        kwargs["password"] = get_password()
    return psycopg.connect(**kwargs, **options)


def _words(error: BaseException) -> str:
    """psycopg's message, which runs over several lines, as one."""
    return " ".join(str(error).split())


def _said(said: str, driver: BaseException) -> StoreDisconnected:
    """``said``, then the driver's words. Those name the server's host and port: the
    operator's (the log, the command line), not a remote client's (``public``; found by
    acceptance testing: a worker token's holder read the database's address)."""
    error = StoreDisconnected(f"{said}: {_words(driver)}")
    error.public = said
    return error


class Outage:
    """Whether the server is away, as the last attempt to reach it found, so that while
    it is, a command fails at once (``StoreDisconnected``) instead of waiting out the
    pool's timeout at every try of the recorders' retries: ten tries of 30 s held a
    worker's stop, or an HTTP read, for five minutes (ADR-0121). One connection is
    tried at most every ``PROBE_EVERY`` seconds for the whole process; the first that
    is made ends the outage, and the pool is asked for connections again."""

    def __init__(self, pool: Any) -> None:
        self._pool = pool
        self._lock = threading.Lock()
        self._refusal: Exception | None = None
        self._tried = 0.0

    def began(self, refusal: Exception) -> None:
        """A connection was refused just now (``refusal``, the driver's error)."""
        with self._lock:
            self._refusal, self._tried = refusal, time.monotonic()

    def lost(self) -> None:
        """A connection was lost: whether the server is away is found by trying one now
        (one session ended alone, as a claim's frozen past its timeout is, is no outage),
        unless one was tried within ``PROBE_EVERY`` seconds."""
        with self._lock:
            if time.monotonic() - self._tried < PROBE_EVERY:
                return
            self._refusal, self._tried = _refusal(self._pool), time.monotonic()

    def check(self) -> None:
        """``StoreDisconnected`` while the server is away; returns once it answers."""
        if self._refusal is None:
            return
        with self._lock:
            if self._refusal is None:
                return
            if time.monotonic() - self._tried >= PROBE_EVERY:
                self._refusal = _refusal(self._pool)
                self._tried = time.monotonic()
                if self._refusal is None:
                    return
            refusal = self._refusal
        # From the driver's error, so that it reads as a lost connection everywhere
        # (``sql.connection_lost``: a runner waits it out).
        raise _said("the database cannot be reached", refusal) from refusal


def held_up_state(error: BaseException) -> str | None:
    """The SQLSTATE of ``error`` (the library's wrapping of psycopg's) if it is a statement
    the server gave up, its transaction rolled back: a lock waited out, or a statement
    cancelled."""
    state = getattr(error.__cause__, "sqlstate", None)
    if isinstance(error, OperationalError) and state in sql.HELD_UP_STATES:
        return str(state)
    return None


def held_up(state: str) -> PoolBusy:
    """The failure of a statement the server gave up: held up in the database (an
    operator's maintenance holding a table, a DBA cancelling a query, a role's timeout).
    Like a busy pool it passes, and workers and the projection runner wait it out; a lock
    waited out ended workers before ADR-0107, a cancelled statement every long-running
    process, untyped in the Python API (found by acceptance testing, ADR-0138). The
    server's own text, whose PL/pgSQL context spans lines, is left to the cause."""
    if state == sql.QUERY_CANCELED:
        return PoolBusy(
            "the database cancelled a statement (a pg_cancel_backend, or a"
            " statement_timeout); nothing was written: try again"
        )
    return PoolBusy(
        "a statement waited longer than its lock timeout (POSTGRES_LOCK_TIMEOUT, or the"
        " role's lock_timeout) for a lock on the store's tables (maintenance holding one?);"
        " nothing was written: try again"
    )


def is_busy(error: BaseException) -> bool:
    """Whether ``error`` (the library's wrapping of psycopg's) is the pool's giving up:
    every connection in use, or too many commands waiting for one."""
    from psycopg_pool import PoolTimeout, TooManyRequests

    return isinstance(error.__cause__, PoolTimeout | TooManyRequests)


class ConnectionTurns:
    """Turns for work that holds a pooled connection while it takes others (claims),
    beside the connections held for listening (a projection runner's)."""

    def __init__(self, pool: Any) -> None:
        self._pool = pool
        self._changed = threading.Condition()
        self._holding = 0
        self._listening = 0

    def _turns(self) -> int:
        return self._pool.max_size - 1 - self._listening

    @contextmanager
    def holding(self) -> Iterator[None]:
        """A turn to hold a connection while taking others; ``PoolBusy`` when none comes
        free within the pool's own wait, ``StoreUnavailable`` when the pool has no room
        for one at all beside its listening connections."""
        with self._changed:
            if self._turns() < 1:
                size, listening = self._pool.max_size, self._listening
                raise StoreUnavailable(
                    f"no claim can be made here: {listening} of the pool's {size} connections"
                    f" listen for new events (a projection runner), and a claim holds one"
                    f" while it writes on another; give the pool at least {listening + 2}"
                    " (POSTGRES_POOL_SIZE + POSTGRES_MAX_OVERFLOW)"
                )
            if not self._changed.wait_for(
                lambda: self._holding < self._turns(), timeout=self._pool.timeout
            ):
                raise busy(self._pool)
            self._holding += 1
        try:
            yield
        finally:
            with self._changed:
                self._holding -= 1
                self._changed.notify_all()

    @contextmanager
    def listening(self) -> Iterator[None]:
        """While a connection is held to listen: one turn fewer for claims."""
        with self._changed:
            self._listening += 1
        try:
            yield
        finally:
            with self._changed:
                self._listening -= 1
                self._changed.notify_all()


def watch_connections(datastore: Any) -> None:
    """Make a lost connection ``StoreDisconnected`` and a busy pool ``PoolBusy`` for
    every user of ``datastore``, and give it turns for held connections.

    The library's datastore hands out connections from one method, which its
    ``transaction`` and every recorder go through; the instance's method is wrapped
    (the library builds the datastore itself, so it cannot be a subclass). The wrapper
    takes ``held=True`` from work that holds its connection while it takes others (a
    claim), and ``datastore.listening()`` surrounds a connection held to listen (a
    projection runner's): ``ConnectionTurns``, ADR-0095."""
    sql.connection_params(datastore).update(KEEPALIVES)
    original: Callable[[], AbstractContextManager[Any]] = datastore.get_connection
    # When the last outage was logged: failures within QUIET seconds of it are the same
    # outage (a connection checked out when the server went away fails later, after
    # others already worked again), so an outage is one line.
    logged = [-QUIET]
    # Whether the line of a lost connection was the last said: the next use of a
    # connection that goes through says the database is back (found by acceptance
    # testing: nothing said so, ADR-0137).
    lost_said = [False]

    turns = ConnectionTurns(datastore.pool)
    outage = Outage(datastore.pool)
    datastore.pool.reconnect_timeout = RECONNECT_TIMEOUT

    @contextmanager
    def get_connection(held: bool = False) -> Iterator[Any]:
        with turns.holding() if held else nullcontext(), watched() as conn:
            yield conn

    @contextmanager
    def watched() -> Iterator[Any]:
        outage.check()
        try:
            with original() as conn:
                try:
                    yield conn
                except BaseException as error:
                    if not isinstance(error, Exception):
                        # An interrupt (Ctrl-C, SystemExit) mid-exchange leaves psycopg's
                        # pipeline and prepared statements out of step with the server's:
                        # closed, the pool makes another (later commands failed "prepared
                        # statement ... does not exist"; found by an embedder, ADR-0137).
                        conn.close()
                    raise
            if lost_said[0]:  # a use that went through: the server answers
                lost_said[0] = False
                log.warning("the database answers again")
                # A loss past the first seconds of it is a new outage, said as one (one 18
                # s later went unsaid for its 70 s; found by acceptance testing, ADR-0138).
                logged[0] = min(logged[0], time.monotonic() - QUIET + AFTER_BACK)
        except (OperationalError, InterfaceError) as error:
            if isinstance(error, StoreDisconnected):
                raise
            if is_busy(error):
                failure = busy(datastore.pool, error.__cause__)
                if isinstance(failure, PoolBusy):
                    raise failure from error
                refusal = failure.__cause__
                if isinstance(refusal, Exception):
                    outage.began(refusal)
                raise failure from refusal
            if (state := held_up_state(error)) is not None:
                raise held_up(state) from error
            if not disconnected(error):
                raise
            # psycopg's messages run over several lines: the log line is one.
            reason = _words(error)
            if time.monotonic() - logged[0] > QUIET:
                log.warning("lost the connection to the database (%s); reconnecting", reason)
                lost_said[0] = True
            logged[0] = time.monotonic()
            outage.lost()
            # An outage breaks every pooled connection: test them all now.
            datastore.pool.check()
            raise _said("lost the connection to the database", error) from error

    datastore.get_connection = get_connection
    datastore.listening = turns.listening
