"""The server's watcher of leases (ADR-0126): the Runs whose lease lapsed are ended
while nobody claims.

Claims end lapsed Runs on their way (ADR-0107), and so does every ``workcenter worker``.
A server whose remote workers all died takes no claim, so their Runs stayed ``running``
on every page, their items blocked, until a worker came back: the spec's recovery runs
at each tick of a watcher, whoever claims. Here it is a task of the server's event loop
that asks the worker protocol's recovery (shared with the claims' cadence, so a busy
server reads the live Runs no more often than before) every few seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Final

from starlette.concurrency import run_in_threadpool

from workcenter.application import WorkCenter

# A lapsed Run is ended within this long of its lease's end: leases are tens of seconds
# (60 by default), and each look is one read of the live Runs.
EVERY_SECONDS: Final = 5.0

log = logging.getLogger("workcenter.http")


async def _watch(wc: WorkCenter, every: float) -> None:
    failing = False
    while True:
        await asyncio.sleep(every)
        try:
            await run_in_threadpool(wc.worker_protocol.recover_when_due, every)
        except Exception as error:  # the store away, or a bug: said once, tried again
            if not failing:
                log.warning("lapsed leases not recovered, trying again: %s", error)
            failing = True
        else:
            if failing:
                log.warning("lapsed leases recovered again")
            failing = False


@contextlib.asynccontextmanager
async def watching(wc: WorkCenter, every: float | None) -> AsyncIterator[None]:
    """Lapsed leases recovered every ``every`` seconds while the app serves (None: not)."""
    if every is None:
        yield
        return
    task = asyncio.create_task(_watch(wc, every), name="workcenter-lease-watch")
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
