"""The worker loop: claim, keep the lease alive while an executor works, finish.

Each Run is ``worker_run.run_one``'s (what an executor is, how input, errors and stop
signals reach it); this module is the loop around it: names, recovery of lapsed
leases, the idle rules, and the Coordinator's due steps. With ``runs_at_once`` above
one, ``worker_slots`` runs several Runs at once (ADR-0097).

Given a Coordinator provider, each pass of the loop also runs the due
Coordinator steps (user messages and automatic wakes) before it claims a Run.

When the database goes away (``StoreDisconnected``; the store logs one line per
outage) the loop tries again with backoff until it answers, then goes on; a finish
in flight is retried, and a second application of it is refused by the Run's fence
(ADR-0056).
"""

from __future__ import annotations

import importlib
import os
import socket
import threading
from collections.abc import Callable
from typing import Any

from workcenter.adapters.postgres_connection import StoreDisconnected
from workcenter.adapters.worker_run import (
    BusyRecovery,
    Executor,
    Reconnect,
    RefusedClaims,
    StopSignals,
    WorkerStats,
    run_one,
)
from workcenter.adapters.worker_slots import Slots
from workcenter.application import Claim, WorkCenter
from workcenter.domain import actor as actors
from workcenter.domain import bounds, inputs
from workcenter.domain.errors import InvalidInput, WorkcenterError
from workcenter.service_layer.handlers.coordinator_step import StepResult, check_provider
from workcenter.service_layer.ports import CoordinatorProvider


def default_name() -> str:
    """A worker name no other live process has (ADR-0048): the host and the process id.
    The Runs record the boot id beside it, which tells restarts on one host apart."""
    return f"worker-{socket.gethostname()[:100]}-{os.getpid()}"


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
    signals: StopSignals | None = None,
    on_event: Callable[[str, Claim, str], None] | None = None,
    coordinator: CoordinatorProvider | None = None,
    runs: bool = True,
    on_step: Callable[[StepResult], None] | None = None,
    runs_at_once: int = 1,
    stats: WorkerStats | None = None,
) -> WorkerStats:
    """Loop until stopped, idle (if asked) or ``max_runs`` Runs were handled; with a
    ``coordinator`` provider, run the due Coordinator steps too (``runs=False``: only
    them, and ``executor`` is not called). Every argument is checked before anything is
    claimed or recovered (``InvalidInput`` naming it). ``runs_at_once`` Runs are
    executed at once, each by a thread of its own (ADR-0097): the executor is then
    called from that many threads. ``stats`` (a ``WorkerStats`` of the caller's) is
    counted into as the loop goes, so that a caller that catches the loop's error (a
    store that failed) still has what it did; the loop returns it.

    ``stop`` (an event) ends the loop and lets every Run in hand finish. ``signals``
    (``StopSignals``, entered by the caller, which installs the SIGINT and SIGTERM
    handlers) ends it on the first signal and gives back each Run in hand, its executor
    interrupted (or, in a thread of its own, abandoned), but a delivery (a deliver
    Action, never run twice by itself) is let finish and its report recorded: its
    drain is said once to ``on_event`` as ``("draining", claim, line)``, and a second
    signal interrupts it, failing the deliver Action (ADR-0112); ``StopSignals(drain=True)``
    lets every Run in hand finish so (ADR-0141). A Ctrl-C raised as
    ``KeyboardInterrupt`` without ``signals`` drains nothing."""
    # Refused here, not at each claim: there a refusal counts as contention, silently.
    worker = inputs.text(worker, "worker", bounds.WORKER, required=True)
    inputs.lease_seconds(lease_seconds)
    if isinstance(poll_seconds, bool) or not (
        isinstance(poll_seconds, int | float) and 0 < poll_seconds <= bounds.POLL_MAX_SECONDS
    ):
        raise InvalidInput(
            f"poll_seconds must be a number above 0, at most {bounds.POLL_MAX_SECONDS}, not"
            f" {poll_seconds!r}"
        )
    if isinstance(runs_at_once, bool) or not (
        isinstance(runs_at_once, int) and 1 <= runs_at_once <= bounds.RUNS_AT_ONCE
    ):
        raise InvalidInput(
            f"runs_at_once must be a whole number from 1 to {bounds.RUNS_AT_ONCE}, not"
            f" {runs_at_once!r}"
        )
    _check_the_rest(executor, runs, max_runs, stop, signals, on_event, on_step, coordinator)
    if stats is not None and not isinstance(stats, WorkerStats):
        raise InvalidInput(f"stats must be a WorkerStats or None, not {type(stats).__name__}")
    stats = WorkerStats() if stats is None else stats
    sent_back = _writes_sent_back(wc)
    stop = signals.event if signals else (stop or threading.Event())
    reconnect = Reconnect(stop)
    # The loop recovers dead Runs (expired leases only, ADR-0048) itself, so the
    # recovery is recorded as this worker's.
    by = actors.worker(worker, wc.boot_id)
    if runs:
        reconnect.call(lambda: wc.recover(actor=by))
    recover_when_busy = BusyRecovery(wc, by, lease_seconds)
    refused = RefusedClaims()
    if coordinator is not None:
        wc.recover_coordinator(at_open=True)
    if runs and runs_at_once > 1:
        Slots(
            wc,
            executor,
            worker=worker,
            lease_seconds=lease_seconds,
            poll_seconds=poll_seconds,
            max_runs=max_runs,
            exit_when_idle=exit_when_idle,
            on_event=on_event,
            by=by,
            recover_when_busy=recover_when_busy,
        ).run(
            runs_at_once,
            stats,
            stop,
            signals,
            lambda: _coordinate(wc, coordinator, stats, on_step) if coordinator else False,
        )
        stats.writes_sent_back = _writes_sent_back(wc) - sent_back
        return stats
    while not stop.is_set() and (max_runs is None or stats.claimed < max_runs):
        stepped = _coordinate(wc, coordinator, stats, on_step) if coordinator else False
        claim = None
        if runs:
            recover_when_busy()
            try:
                claim = run_one(
                    wc,
                    executor,
                    worker=worker,
                    lease_seconds=lease_seconds,
                    stats=stats,
                    on_event=on_event,
                    signals=signals,
                    reconnect=reconnect,
                )
            except StoreDisconnected as error:
                if not reconnect.wait(error):
                    break
                continue
            except WorkcenterError as error:  # the claim itself was refused: try later
                refused(error, stats)
            reconnect.answered()
        if claim is None and not stepped:
            if exit_when_idle:
                # A Run whose lease lapsed while this worker ran is ended (and its Action
                # claimed again) before the worker leaves, not left running after every
                # worker has exited; live leases of others are not waited for.
                try:
                    if runs and wc.recover(actor=by):
                        continue
                except StoreDisconnected as error:
                    if reconnect.wait(error):
                        continue
                break
            stop.wait(poll_seconds)
            if runs:
                try:
                    wc.recover(actor=by)
                except StoreDisconnected as error:
                    reconnect.wait(error)
    stats.writes_sent_back = _writes_sent_back(wc) - sent_back
    return stats


def _check_the_rest(
    executor: object,
    runs: object,
    max_runs: object,
    stop: object,
    signals: object,
    on_event: object,
    on_step: object,
    coordinator: object,
) -> None:
    """The loop's other arguments, refused before anything is claimed or recovered:
    each would otherwise fail only once a Run is in hand (an executor or a callback that
    cannot be called: the Run spent, or left running) or never say so (a coordinator
    that is no provider counts each pass as a refused step; max_runs=-1 runs none)."""
    if runs and not callable(executor):
        # A "module:callable" string is the CLI's form; load_executor resolves it.
        raise InvalidInput(
            f"executor must be a callable taking a Claim, not {type(executor).__name__}"
        )
    # 0 claims no Run (only the start-up recovery); the CLI's --max-runs starts at 1.
    if max_runs is not None and (
        isinstance(max_runs, bool) or not isinstance(max_runs, int) or max_runs < 0
    ):
        raise InvalidInput(f"max_runs must be None or a whole number from 0, not {max_runs!r}")
    if stop is not None and not all(
        callable(getattr(stop, method, None)) for method in ("is_set", "wait")
    ):
        raise InvalidInput(f"stop must be a threading.Event, not {type(stop).__name__}")
    if signals is not None and not isinstance(signals, StopSignals):
        raise InvalidInput(f"signals must be StopSignals, not {type(signals).__name__}")
    for name, callback in (("on_event", on_event), ("on_step", on_step)):
        if callback is not None and not callable(callback):
            raise InvalidInput(f"{name} must be callable, not {type(callback).__name__}")
    if coordinator is not None:
        check_provider(coordinator, "coordinator")


def _writes_sent_back(wc: WorkCenter) -> int:
    """The store's count of writes sent back to two exchanges (none on SQLite)."""
    return int(getattr(wc.store.recorder, "fallbacks", 0))


def _coordinate(
    wc: WorkCenter,
    provider: CoordinatorProvider,
    stats: WorkerStats,
    on_step: Callable[[StepResult], None] | None,
) -> bool:
    """A due Coordinator step, the oldest that may run; True when one ran. One a pass, so
    that Runs and steps take turns: every due step a pass (up to 100) kept the Runs
    waiting behind a backlog of wakes, minutes with a model's seconds a step (found by
    acceptance testing, ADR-0138)."""
    try:
        results = wc.coordinate_once(provider, steps=1)
    except StoreDisconnected:
        # An outage or a busy pool refuses nothing: the claim's pass waits it out (it
        # was counted as a refused turn that never happened; found by acceptance testing).
        return False
    except WorkcenterError:  # contention on a Conversation: the next pass tries again
        stats.coordinator_steps["refused"] = stats.coordinator_steps.get("refused", 0) + 1
        return False
    for result in results:
        stats.coordinator_steps[result.status] = stats.coordinator_steps.get(result.status, 0) + 1
        if on_step:
            on_step(result)
    return bool(results)
