"""The worker loop: claim, keep the lease alive while an executor works, finish.

An executor is any callable ``executor(claim) -> report`` where the report is a
``RunReport`` or a mapping with ``outcome`` and its fields. An executor that
raises interrupts its Run (the auto-retry rule decides what happens next).
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from workcenter.application import Claim, WorkCenter
from workcenter.domain.errors import StaleRun, WorkcenterError
from workcenter.domain.outcome import RunReport
from workcenter.projections.sanitize import sanitize_personal

Executor = Callable[[Claim], RunReport | Mapping[str, Any]]


def load_executor(spec: str) -> Executor:
    """Resolve ``module:callable`` to the executor it names."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise ValueError(f"executor must be given as module:callable, not {spec!r}")
    target: Any = importlib.import_module(module_name)
    for part in attribute.split("."):
        target = getattr(target, part)
    if not callable(target):
        raise ValueError(f"{spec} is not callable")
    return target  # type: ignore[no-any-return,unused-ignore]


@dataclass
class WorkerStats:
    claimed: int = 0
    finished: int = 0
    interrupted: int = 0
    lost: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)


class _LeaseKeeper(threading.Thread):
    """Renews a lease every third of its length until stopped or refused."""

    def __init__(self, wc: WorkCenter, claim: Claim, lease_seconds: float) -> None:
        super().__init__(daemon=True)
        self.wc, self.claim, self.lease_seconds = wc, claim, lease_seconds
        self.stopped = threading.Event()
        self.lost = False

    def run(self) -> None:
        interval = max(1.0, self.lease_seconds / 3)
        while not self.stopped.wait(interval):
            if not self.wc.renew_lease(self.claim, lease_seconds=self.lease_seconds):
                self.lost = True
                return


def run_one(
    wc: WorkCenter,
    executor: Executor,
    *,
    worker: str,
    lease_seconds: float = 60.0,
    stats: WorkerStats | None = None,
    on_event: Callable[[str, Claim, str], None] | None = None,
) -> Claim | None:
    """Claim and execute one Action; None when nothing is claimable."""
    stats = stats or WorkerStats()
    claim = wc.claim_next(worker, lease_seconds=lease_seconds)
    if claim is None:
        return None
    stats.claimed += 1
    if on_event:
        on_event("claimed", claim, "")
    keeper = _LeaseKeeper(wc, claim, lease_seconds)
    keeper.start()
    try:
        report = executor(claim)
    except Exception as error:  # an executor's failure must not kill the worker
        keeper.stopped.set()
        keeper.join()
        # An exception's text often quotes credentials or local paths: neither is
        # recorded nor printed.
        message = sanitize_personal(f"{type(error).__name__}: {error}")
        try:
            wc.interrupt(claim, reason=f"executor raised {message}")
            stats.interrupted += 1
        except StaleRun:
            stats.lost += 1
        if on_event:
            on_event("interrupted", claim, message)
        return claim
    keeper.stopped.set()
    keeper.join()
    try:
        action = wc.finish_run(claim, report)
    except StaleRun:
        stats.lost += 1
        if on_event:
            on_event("lost", claim, "the lease was lost before the outcome was recorded")
        return claim
    run = action.run(claim.run_id)
    outcome = run.status if run else "unknown"
    stats.finished += 1
    stats.outcomes[outcome] = stats.outcomes.get(outcome, 0) + 1
    if on_event:
        on_event("finished", claim, outcome)
    return claim


def run_worker(
    wc: WorkCenter,
    executor: Executor,
    *,
    worker: str,
    lease_seconds: float = 60.0,
    poll_seconds: float = 2.0,
    max_runs: int | None = None,
    exit_when_idle: bool = False,
    stop: threading.Event | None = None,
    on_event: Callable[[str, Claim, str], None] | None = None,
) -> WorkerStats:
    """Loop until stopped, idle (if asked) or ``max_runs`` Runs were handled."""
    stats = WorkerStats()
    stop = stop or threading.Event()
    wc.recover(worker=worker)
    while not stop.is_set() and (max_runs is None or stats.claimed < max_runs):
        try:
            claim = run_one(
                wc,
                executor,
                worker=worker,
                lease_seconds=lease_seconds,
                stats=stats,
                on_event=on_event,
            )
        except WorkcenterError:
            claim = None
        if claim is None:
            if exit_when_idle:
                break
            stop.wait(poll_seconds)
            wc.recover(worker=worker)
    return stats
