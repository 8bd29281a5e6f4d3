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
wait without end.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Final

from eventsourcing.persistence import InterfaceError, OperationalError

from workcenter.adapters.persistence import StoreUnavailable
from workcenter.projections import sql

log = logging.getLogger("workcenter.store")
QUIET: Final = 30.0
# A silent peer (a cut network, a frozen host) is declared dead after about 30 s.
KEEPALIVES: Final = {
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 4,
}


class StoreDisconnected(StoreUnavailable, OperationalError):
    """The database connection failed under a command or a read, or no connection of
    the pool came free in time. A write in flight may or may not have been committed:
    read before retrying. The next command reconnects."""

    code = "store_disconnected"


def disconnected(error: BaseException) -> bool:
    """Whether ``error`` (the library's wrapping of psycopg's) is a lost connection,
    not a refusal by a live server (a lock timeout, a serialisation failure, ...)."""
    if not isinstance(error, OperationalError | InterfaceError):
        return False
    return sql.disconnected_state(getattr(error.__cause__, "sqlstate", None))


def pool_exhausted(error: BaseException) -> bool:
    """Whether ``error`` is the pool's giving up on a free connection: the server is
    fine, every connection was in use (not a lost connection: nothing to reconnect)."""
    from psycopg_pool import PoolTimeout  # the PostgreSQL extra's, as is this module's use

    return isinstance(error.__cause__, PoolTimeout)


def watch_connections(datastore: Any) -> None:
    """Make a lost connection ``StoreDisconnected`` for every user of ``datastore``.

    The library's datastore hands out connections from one method, which its
    ``transaction`` and every recorder go through; the instance's method is wrapped
    (the library builds the datastore itself, so it cannot be a subclass)."""
    sql.connection_params(datastore).update(KEEPALIVES)
    original: Callable[[], AbstractContextManager[Any]] = datastore.get_connection
    # When the last outage was logged: failures within QUIET seconds of it are the same
    # outage (a connection checked out when the server went away fails later, after
    # others already worked again), so an outage is one line.
    logged = [-QUIET]

    @contextmanager
    def get_connection() -> Iterator[Any]:
        try:
            with original() as conn:
                yield conn
        except (OperationalError, InterfaceError) as error:
            if isinstance(error, StoreDisconnected):
                raise
            if pool_exhausted(error):
                raise StoreDisconnected(
                    f"no connection of the pool's {datastore.pool.max_size} came free within"
                    f" {datastore.pool.timeout:g} s: more commands ran at once than"
                    " POSTGRES_POOL_SIZE + POSTGRES_MAX_OVERFLOW connections serve"
                ) from error
            if not disconnected(error):
                raise
            # psycopg's messages run over several lines: the log line is one.
            reason = " ".join(str(error).split())
            if time.monotonic() - logged[0] > QUIET:
                log.warning("lost the connection to the database (%s); reconnecting", reason)
            logged[0] = time.monotonic()
            # An outage breaks every pooled connection: test them all now.
            datastore.pool.check()
            raise StoreDisconnected(f"lost the connection to the database: {reason}") from error

    datastore.get_connection = get_connection
