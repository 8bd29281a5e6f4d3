"""The asynchronous lifecycle: follow the event sequence in a thread and keep views current.

The runner applies the *same* view classes and the same code as the inline
lifecycle (``InlineProjections``), from each view's own position in the
``tracking`` table. How it learns of new events depends on the database
(ADR-0011, ADR-0034):

- **PostgreSQL**: LISTEN/NOTIFY (every write notifies the store's channel, as the
  library's inserts do). One thread listens; a notification wakes it, it gathers the
  writes of ``GATHER`` seconds, then catches every view up from its position in
  pages, one transaction a page, so a burst costs one read of the log and one
  commit, not one per write (ADR-0117: the library's subscription read the log
  once per notification, in threads of its own).
- **SQLite** has no subscription in eventsourcing 9.5.6, so it polls: one cheap
  ``select_notifications`` after the lowest position every ``poll`` seconds, and
  straight on without sleeping while there is a backlog.

Run it with the Store's inline projections off (``inline_projections=False`` or
``WORKCENTER_INLINE_PROJECTIONS=0``) to make it the views' only writer; running
it beside inline writers is also safe, because every view skips, under its write
lock, whatever is already at or below its position.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Collection
from typing import Any, Protocol, Self

from workcenter.domain.errors import InvalidInput
from workcenter.projections import lifecycle, sql
from workcenter.projections.inline import InlineProjections
from workcenter.projections.lifecycle import ProjectionStatus


class Store(Protocol):
    """What the runner needs of a service: its event store and its registered views."""

    @property
    def store(self) -> Any: ...

    @property
    def projections(self) -> InlineProjections: ...


DEFAULT_POLL = 0.5
# How long a PostgreSQL runner waits for a notification before it looks at its stop.
WAKE = 0.1
# Once a notification arrives, the writes of this long are gathered before the views are
# caught up: a page's reads, locks and commit are paid once for the writes of that time,
# not once per write, which halved the runner's CPU per run cycle behind one busy worker
# (ADR-0116). The views lag by as much more.
GATHER = 0.05
# The wait before following again after a lost database: doubling, at most the cap.
RECONNECT_FIRST = 0.1
RECONNECT_CAP = 5.0


class ProjectionRunner:
    """Keeps the Store's registered read models (or ``names`` of them) up to the head."""

    def __init__(
        self, store: Store, names: Collection[str] | None = None, *, poll: float = DEFAULT_POLL
    ) -> None:
        registry = store.projections.views
        chosen = list(registry) if names is None else list(names)
        unknown = [n for n in chosen if n not in registry]
        if unknown:
            known = ", ".join(registry)
            raise InvalidInput(f"no read model named {unknown[0]!r} (known: {known})")
        self.recorder = store.store.recorder
        self.engine = InlineProjections(
            self.recorder, store.store.mapper, {n: registry[n] for n in chosen}
        )
        self.poll = poll
        self.applied = 0
        self.error: Exception | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # Whether a PostgreSQL runner is listening for new events now.
        self.listening = False

    @property
    def subscribes(self) -> bool:
        """Whether new events are pushed (PostgreSQL's LISTEN/NOTIFY) rather than polled."""
        return sql.is_postgres(self.recorder.datastore)

    # --- one pass / the loop --------------------------------------------------

    def run_once(self) -> int:
        """Catch every view up to the head as it is now; returns the events applied."""
        applied = self.engine.catch_up()
        self.applied += applied
        return applied

    def run_forever(self) -> None:
        """Follow until ``stop()``. A lost database (restarted, failed over), or a statement
        it gave up (a lock waited out, a statement cancelled: ADR-0138), is waited out with
        backoff, then the views catch up and the following goes on; any other error stops
        the loop and is kept in ``error``."""
        delay = 0.0
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                if self.subscribes:
                    self._follow()
                else:
                    self._poll()
                return
            except Exception as error:
                if self._stop.is_set():
                    return
                if not (sql.connection_lost(error) or sql.held_up(error)):
                    self.error = error  # kept for wait() and the caller
                    return
            # The store's connections log the outage (one line); a runner that had
            # followed for a while starts its backoff again.
            if time.monotonic() - started > RECONNECT_CAP:
                delay = 0.0
            delay = min(RECONNECT_CAP, delay * 2 or RECONNECT_FIRST)
            self._stop.wait(delay)

    def _poll(self) -> None:
        while not self._stop.is_set():
            if not self.run_once():
                self._stop.wait(self.poll)

    def _follow(self) -> None:
        # One thread listens and catches up: each wake reads the log once from the
        # views' positions, the notifications of the time gathered (ADR-0117).
        with sql.notified(self.recorder) as notified:
            self.listening = True
            try:
                self.run_once()  # the backlog, in pages
                while not self._stop.is_set():
                    if not notified(WAKE):
                        continue
                    self._stop.wait(GATHER)
                    notified(0.0)
                    self.run_once()
            finally:
                self.listening = False

    # --- the thread -----------------------------------------------------------

    def start(self) -> Self:
        self._stop.clear()
        self._thread = threading.Thread(
            target=self.run_forever, name="workcenter-projections", daemon=True
        )
        self._thread.start()
        return self

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def stop(self, timeout: float | None = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    # --- observing ------------------------------------------------------------

    def positions(self) -> dict[str, int]:
        return {name: self.engine.position(name) for name in self.engine.views}

    def status(self) -> list[ProjectionStatus]:
        """Each view's position, the head and the lag (events after the position)."""
        return lifecycle.status(self.engine, self.recorder)

    def wait(self, position: int, timeout: float = 10.0) -> None:
        """Block until every view reached ``position``; re-raise the runner's error, or
        ``TimeoutError``. Polls the positions every few milliseconds (not library back-off)."""
        deadline = time.monotonic() + timeout
        while True:
            if self.error is not None:
                raise self.error
            if min(self.positions().values(), default=position) >= position:
                return
            if time.monotonic() >= deadline:
                raise TimeoutError(f"views at {self.positions()}, waiting for {position}")
            time.sleep(0.005)
