"""The asynchronous lifecycle: follow the event sequence in a thread and keep views current.

The runner applies the *same* view classes and the same code as the inline
lifecycle (``InlineProjections``), from each view's own position in the
``tracking`` table. How it learns of new events depends on the database
(ADR-0011, ADR-0034):

- **PostgreSQL**: the library's subscription (``recorder.subscribe``, LISTEN/NOTIFY:
  every insert notifies the channel, and the subscription pulls what follows the
  last notification it delivered). A reader thread moves its notifications into
  a queue; the runner applies whatever has arrived, up to a page, in one
  transaction per page, so a burst costs one commit, not one per event.
- **SQLite** has no subscription in eventsourcing 9.5.6, so it polls: one cheap
  ``select_notifications`` after the lowest position every ``poll`` seconds, and
  straight on without sleeping while there is a backlog.

Run it with the Store's inline projections off (``inline_projections=False`` or
``WORKCENTER_INLINE_PROJECTIONS=0``) to make it the views' only writer; running
it beside inline writers is also safe, because every view skips, under its write
lock, whatever is already at or below its position.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Collection
from typing import Any, Protocol, Self

from eventsourcing.persistence import Notification

from workcenter.projections import lifecycle, sql
from workcenter.projections.inline import PAGE, InlineProjections
from workcenter.projections.lifecycle import ProjectionStatus


class Store(Protocol):
    """What the runner needs of a service: its event store and its registered views."""

    @property
    def store(self) -> Any: ...

    @property
    def projections(self) -> InlineProjections: ...


DEFAULT_POLL = 0.5
# While nothing arrives, the views are caught up this often all the same: a notification
# can be missed (a write that commits after the subscription's first read and before its
# LISTEN, as when it is made again after a lost database), and only the next one would
# bring it. The views skip what they already have.
CATCH_UP_EVERY = 5.0
# Once a notification arrives, the ones after it are gathered this long (or to a page)
# before the views are written: a page's reads, locks and commit are paid once for the
# writes of that time, not once per write, which halved the runner's CPU per run cycle
# behind one busy worker (ADR-0116). The views lag by as much more.
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
            raise KeyError(f"no read model named {unknown[0]!r}")
        self.recorder = store.store.recorder
        self.engine = InlineProjections(
            self.recorder, store.store.mapper, {n: registry[n] for n in chosen}
        )
        self.poll = poll
        self.applied = 0
        self.error: Exception | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._subscription: Any = None

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
        """Follow until ``stop()``. A lost database (restarted, failed over) is waited out
        with backoff, then the views catch up and the following goes on; any other error
        stops the loop and is kept in ``error``."""
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
                # A subscription that ended unasked is followed again, as after a lost
                # database.
                if not sql.connection_lost(error) and not isinstance(error, SubscriptionEnded):
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
        self.run_once()  # the backlog, in pages
        start = min(self.positions().values(), default=0)
        arrived: queue.Queue[Notification | BaseException] = queue.Queue(maxsize=4 * PAGE)
        with (
            sql.listening(self.recorder.datastore),
            self.recorder.subscribe(gt=start) as subscription,
        ):
            self._subscription = subscription
            reader = threading.Thread(
                target=_read, args=(subscription, arrived), name="workcenter-subscription"
            )
            reader.start()
            try:
                checked = time.monotonic()
                while not self._stop.is_set():
                    try:
                        first = arrived.get(timeout=self.poll)
                    except queue.Empty:
                        if time.monotonic() - checked >= CATCH_UP_EVERY:
                            checked = time.monotonic()
                            self.run_once()
                        continue
                    page = [first]
                    until = time.monotonic() + GATHER
                    while len(page) < PAGE:
                        try:
                            page.append(arrived.get(timeout=max(0.0, until - time.monotonic())))
                        except queue.Empty:
                            break
                    failures = [n for n in page if isinstance(n, BaseException)]
                    if failures:
                        # Its own error, as the catch-up's would be: a lost connection is
                        # waited out, a store's refusal is one line to the CLI's user (a
                        # wrapper of another type reached them as a traceback, ADR-0107).
                        raise failures[0]
                    self.applied += self.engine.apply_notifications(page)  # type: ignore[arg-type]
            finally:
                subscription.stop()
                _drain(arrived)
                reader.join()
                self._subscription = None

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
        subscription = self._subscription
        if subscription is not None:
            subscription.stop()
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


class SubscriptionEnded(Exception):
    """The subscription ended without an error (a stop): the follower wakes at once, not
    at its next ``poll``, which with a long one outlasted ``stop``'s wait (ADR-0115)."""


def _read(subscription: Any, arrived: queue.Queue[Notification | BaseException]) -> None:
    """The subscription's notifications, in order, into ``arrived`` (its error last, or
    ``SubscriptionEnded``)."""
    try:
        for notification in subscription:
            arrived.put(notification)
    except BaseException as error:
        arrived.put(error)
    else:
        arrived.put(SubscriptionEnded("the subscription ended"))


def _drain(arrived: queue.Queue[Notification | BaseException]) -> None:
    """Empty the queue, so a reader blocked on a full one can see the stop and end."""
    try:
        while True:
            arrived.get_nowait()
    except queue.Empty:
        return
