"""The asynchronous lifecycle: follow the event sequence in a thread and keep views current.

The runner applies the *same* view classes and the same catch-up code as the
inline lifecycle (``InlineProjections``), from each view's own position in the
``tracking`` table. SQLite has no subscription in eventsourcing 9.5.6, so it
polls: one cheap ``select_notifications`` after the lowest position every
``poll`` seconds, and straight on without sleeping while there is a backlog.
See ADR-0011.

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

from workcenter.projections.inline import InlineProjections


class Store(Protocol):
    """What the runner needs of a service: its event store and its registered views."""

    @property
    def store(self) -> Any: ...

    @property
    def projections(self) -> InlineProjections: ...


DEFAULT_POLL = 0.5


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
        self.engine = InlineProjections(
            store.store.recorder, store.store.mapper, {n: registry[n] for n in chosen}
        )
        self.poll = poll
        self.applied = 0
        self.error: Exception | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # --- one pass / the loop --------------------------------------------------

    def run_once(self) -> int:
        """Catch every view up to the head as it is now; returns the events applied."""
        applied = self.engine.catch_up()
        self.applied += applied
        return applied

    def run_forever(self) -> None:
        """Poll until ``stop()``; an error in a view stops the loop and is kept in ``error``."""
        while not self._stop.is_set():
            try:
                applied = self.run_once()
            except Exception as error:  # kept for wait() and the caller
                self.error = error
                return
            if not applied:
                self._stop.wait(self.poll)

    # --- the thread -----------------------------------------------------------

    def start(self) -> Self:
        self._stop.clear()
        self._thread = threading.Thread(
            target=self.run_forever, name="workcenter-projections", daemon=True
        )
        self._thread.start()
        return self

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
