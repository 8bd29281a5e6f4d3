"""``serve --coordinate``: the Coordinator's due steps, run in the server's process.

The loop runs in the main thread, the HTTP server beside it in a thread (see
``server.serve``): Ctrl-C and SIGTERM then reach a turn in hand exactly as they do
under ``workcenter coordinate``, which records it as interrupted by shutdown and
leaves its wake for the next Coordinator. The loop shares the server's facade, so
the process has one boot id owning its claims and one connection pool writing.

A message posted through the API nudges the loop, which answers it at once; other
wakes (messages from another process, automatic ones) wait at most one poll.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from workcenter.application import WorkCenter
from workcenter.projections.sanitize import sanitize_personal
from workcenter.service_layer.handlers.coordinator_step import StepResult
from workcenter.service_layer.ports import CoordinatorProvider

ERROR_LIMIT = 500


class CoordinatorLoop:
    """Runs due Coordinator steps through one provider until stopped; an error in a
    pass is reported and the next pass runs, so the server keeps serving."""

    def __init__(
        self,
        wc: WorkCenter,
        provider: CoordinatorProvider,
        *,
        poll_seconds: float = 1.0,
        lease_seconds: float = 60.0,
        on_step: Callable[[StepResult], None] = lambda _: None,
        on_error: Callable[[str], None] = lambda _: None,
    ) -> None:
        self.wc = wc
        self.provider = provider
        self.poll_seconds = poll_seconds
        self.lease_seconds = lease_seconds
        self.on_step = on_step
        self.on_error = on_error
        self._due = threading.Event()
        self._stopped = threading.Event()

    def nudge(self) -> None:
        """A wake is due now (a message was posted): run a pass without waiting."""
        self._due.set()

    def stop(self) -> None:
        """End the loop after the step in hand (callable from any thread)."""
        self._stopped.set()
        self._due.set()

    @property
    def stopping(self) -> bool:
        return self._stopped.is_set()

    def run(self, serving: Callable[[], bool]) -> None:
        """Passes until stopped or ``serving()`` says the server has gone."""
        while serving() and not self._stopped.is_set():
            # Cleared before the pass: a nudge during it leaves the next pass due at once.
            self._due.clear()
            self.run_pass()
            self._due.wait(self.poll_seconds)

    def run_pass(self) -> list[StepResult]:
        """One step per due wake. A provider's failure already ends its turn as failed
        (the Coordinator records it); anything else is reported, not raised."""
        try:
            results = self.wc.coordinate_once(self.provider, lease_seconds=self.lease_seconds)
        except Exception as error:  # the store busy or gone, a bug of ours: try again later
            detail = sanitize_personal(str(error), ERROR_LIMIT)
            self.on_error(f"{type(error).__name__}: {detail}")
            return []
        for result in results:
            self.on_step(result)
        return results
