"""One Run of a worker: claim, keep the lease alive while an executor works, finish.

An executor is any callable ``executor(claim) -> report`` where the report is a
``RunReport`` or a mapping with ``outcome`` and its fields. An executor that
raises, or returns anything else, is an error: its Run is interrupted with the
reason (the auto-retry rule decides what happens next) and the loop goes on.
User input queued for the Action arrives in ``claim.inputs`` and is consumed
as the executor starts; input that arrives while it runs cannot be in its
report, so that Run is interrupted and the next one receives it.

A stop signal while an executor works interrupts it (``StopSignals``), and its Run is
given back at once instead of waiting for its lease; but a delivery (a deliver Action,
never run twice by itself) is let finish on the first signal and interrupted by a
second (ADR-0112). A finish the database did not
answer is tried again (``Reconnect``), and a second application of it is refused by
the Run's fence (ADR-0056). The loops around it are ``worker.run_worker`` and, for
several Runs at once, ``worker_slots`` (ADR-0097).
"""

from __future__ import annotations

import logging
import random
import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext, suppress
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from typing import Any, Protocol

from workcenter.adapters.persistence import StoreClosed, StoreUnavailable
from workcenter.adapters.postgres_connection import PoolBusy, StoreDisconnected
from workcenter.application import Claim, WorkCenter, WriteContention
from workcenter.domain.action import ActionState, runs_once
from workcenter.domain.errors import CommandRefused, InvalidInput, StaleRun, WorkcenterError
from workcenter.domain.outcome import RunReport
from workcenter.projections.sanitize import sanitize_personal
from workcenter.service_layer.cadence import Cadence
from workcenter.service_layer.contention import through_contention

log = logging.getLogger("workcenter.store")

Executor = Callable[[Claim], RunReport | Mapping[str, Any]]
LATE_INPUT = "input arrived while the Run was executing; the next Run receives it"
SECOND_SIGNAL_LOST = (
    "a second stop signal came while the database was away: the outcome was not recorded,"
    " and the Run ends when its lease lapses"
)
CONTENDED = (
    "other writers kept changing the item's streams: the outcome was not recorded, and the"
    " Run ends when its lease lapses"
)
# Waits between tries while the database is away: doubling from the first to the cap,
# each drawn from its upper half, so that many workers do not all return at once.
BACKOFF_FIRST = 0.1
BACKOFF_CAP = 5.0


class RefusedClaims:
    """Counts the claims that were refused (a typed error of the claim itself, which the
    loop waits out and tries again) and says why on the log: once per kind of refusal
    per ``QUIET`` seconds, so that one that every claim meets (a history cut at its
    head, ADR-0028) is one line, not silence (found by acceptance testing: a worker on
    such a store counted "errors 13" in 3 s with nothing on stderr) nor a line a claim."""

    QUIET = 30.0

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._said: dict[str, float] = {}

    def __call__(self, error: WorkcenterError, stats: WorkerStats) -> None:
        stats.errors += 1
        kind, now = type(error).__name__, time.monotonic()
        with self._lock:
            said = self._said.get(kind)
            if said is not None and now - said < self.QUIET:
                return
            self._said[kind] = now
        log.warning("a claim was refused (tried again): %s: %s", kind, error)


@dataclass
class WorkerStats:
    claimed: int = 0
    finished: int = 0
    interrupted: int = 0
    lost: int = 0
    errors: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    coordinator_steps: dict[str, int] = field(default_factory=dict)
    # PostgreSQL: this worker's writes the server sent back to the two-exchange way
    # (ADR-0070); more than a few per hundred commands means writers with and without
    # inline views share the store (docs/deployment.md).
    writes_sent_back: int = 0

    def json(self) -> dict[str, Any]:
        return asdict(self)

    def add(self, other: WorkerStats) -> None:
        """Count ``other``'s Runs and steps in too (a slot's, ADR-0097)."""
        self.claimed += other.claimed
        self.finished += other.finished
        self.interrupted += other.interrupted
        self.lost += other.lost
        self.errors += other.errors
        for mine, theirs in (
            (self.outcomes, other.outcomes),
            (self.coordinator_steps, other.coordinator_steps),
        ):
            for key, n in theirs.items():
                mine[key] = mine.get(key, 0) + n

    def summary(self) -> str:
        line = (
            f"claimed {self.claimed}, finished {self.finished}, interrupted {self.interrupted}, "
            f"lost {self.lost}, errors {self.errors}"
        )
        if self.coordinator_steps:
            steps = ", ".join(
                f"{n} {status}" for status, n in sorted(self.coordinator_steps.items())
            )
            line += f"; coordinator turns: {steps}"
        if self.writes_sent_back:
            line += f"; writes sent back to two exchanges: {self.writes_sent_back}"
        return line


class WorkerStopped(BaseException):
    """A stop signal arrived while an executor was working (not an ``Exception``, so an
    executor's own ``except Exception`` cannot swallow it). ``given_back``: the Run was
    given back already, by the thread the signal reached (ADR-0097)."""

    def __init__(self, signum: int, *, given_back: bool = False) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.given_back = given_back


# Called once, with the first signal's number, when a stop lets a delivery finish.
Draining = Callable[[int], None]


def draining_line(signum: int, claim: Claim) -> str:
    stopped_by = signal.Signals(signum).name
    if runs_once(claim.action_type):
        return (
            f"worker stopped by {stopped_by}: finishing the delivery in hand;"
            " a second stop signal interrupts it, and its deliver Action fails"
        )
    return (
        f"worker stopped by {stopped_by}: finishing the Run in hand (--drain);"
        " a second stop signal interrupts it, and it is given back"
    )


class Executing(Protocol):
    """Where a Run's executor works: ``executing(claim, draining)`` surrounds the call,
    and raises ``WorkerStopped`` when a stop ends the Run instead (``StopSignals`` in the
    main thread, a slot's hand in another, ADR-0097), or calls ``draining`` when the
    stop lets the Run's delivery finish (ADR-0112). ``again`` is set by a second stop
    signal: a finish waits out the database until then at most (ADR-0119)."""

    again: threading.Event

    def executing(self, claim: Claim, draining: Draining) -> AbstractContextManager[None]: ...


def drains(claim: Claim, signals_received: int, every_run: bool = False) -> bool:
    """Whether a stop lets this Run's executor finish: a delivery, on the first signal.
    Interrupted, a deliver Action fails and its item waits for a person's ``retry``, so
    a rolling restart would stop every item whose delivery was in hand (ADR-0112).
    ``every_run`` (a worker that drains, ADR-0141): any Run, on the first signal."""
    return signals_received == 1 and (every_run or runs_once(claim.action_type))


class StopSignals:
    """SIGINT and SIGTERM stop the worker: the loop ends, and an executor at work is
    interrupted so its Run is given back at once instead of waiting for its lease.
    A delivery is not: on the first signal its executor is let finish and its report
    recorded, and a second signal interrupts it (ADR-0112).

    Outside the executor a signal only sets ``event``: a claim or a finish being
    written is completed first, never cut in half.

    ``drain``: the first signal lets every Run in hand finish, not only a delivery, and
    a second interrupts them (ADR-0141): for a stop that must not spend attempts, as
    before a store is copied, at the cost of waiting for the longest Run in hand.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, *, drain: bool = False) -> None:
        self.drain = drain
        self.event = threading.Event()
        self.again = threading.Event()
        self.signum: int | None = None  # the first
        self.last: int | None = None
        self.count = 0
        self._executing: Claim | None = None
        self._draining: Draining | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopSignals:
        for signum in self.SIGNALS:
            self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *_: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)

    def _handle(self, signum: int, _frame: object) -> None:
        self.count += 1
        self.last = signum
        first = self.signum is None
        self.signum = self.signum or signum
        claim = self._executing
        draining = (
            self._draining if claim is not None and drains(claim, self.count, self.drain) else None
        )
        if first:
            # Set (and the drain said) from another thread: the handler runs in the main
            # thread between two of its bytecodes, perhaps while it holds the event's own
            # lock (waiting on it, or setting it for an earlier signal), and setting it
            # here would wait for that lock for ever (found by acceptance testing,
            # ADR-0097); a line written here could cut into one the thread is writing.
            threading.Thread(
                target=self._stopped, args=(signum, draining), name="workcenter-stop"
            ).start()
        elif self.count == 2:
            threading.Thread(target=self.again.set, name="workcenter-stop-again").start()
        if claim is not None and draining is None:
            self._executing = None
            raise WorkerStopped(signum)

    def _stopped(self, signum: int, draining: Draining | None) -> None:
        self.event.set()
        if draining is not None:
            try:
                draining(signum)
            except Exception:  # a callback's failure must not hide the stop
                log.exception("the worker's drain callback failed")

    @contextmanager
    def executing(self, claim: Claim, draining: Draining) -> Iterator[None]:
        if self.signum is not None:  # the event may be set a moment later
            if not drains(claim, self.count, self.drain):
                raise WorkerStopped(self.signum)
            # Claimed as the stop came: given back, the delivery would fail unrun.
            draining(self.signum)
        self._draining = draining
        self._executing = claim
        try:
            yield
        finally:
            self._executing = None
            self._draining = None


class Reconnect:
    """Waits out an unreachable database with backoff."""

    def __init__(self, stop: threading.Event) -> None:
        self.stop = stop
        self.delay = 0.0

    def wait(self, error: StoreDisconnected) -> bool:
        """Back off after ``error``; False when the worker was stopped meanwhile. A busy
        store (its pool, or a write that waited out the lock timeout) is logged in one
        line as the wait begins; the store logs a lost connection itself."""
        if isinstance(error, PoolBusy) and not self.delay:
            log.warning("%s; waiting", error)
        self.delay = min(BACKOFF_CAP, self.delay * 2 or BACKOFF_FIRST)
        return not self.stop.wait(random.uniform(self.delay / 2, self.delay))

    def answered(self) -> None:
        self.delay = 0.0

    def call(self, command: Callable[[], Any], *, worth: Callable[[], bool] | None = None) -> Any:
        """``command`` once the database answers; ``StoreDisconnected`` if stopped first,
        or once ``worth`` says another try is not worth it."""
        while True:
            try:
                result = command()
            except StoreDisconnected as error:
                if (worth is not None and not worth()) or not self.wait(error):
                    raise
                continue
            self.answered()
            return result


class BusyRecovery:
    """Ends the Runs whose lease lapsed while this worker is busy, at most once per
    ``every`` seconds of the store's clock (the worker's own lease), before a claim.

    A worker that finds nothing to claim recovers at once; one that always finds work
    never would, and a Run whose worker died (or whose renewals waited out an operator's
    lock longer than the lease) stayed running, its linear item blocked, for as long
    as the backlog lasted (ADR-0107). One read of the live Runs, sorted by expiry, when
    none lapsed. Shared by the threads of a worker running several Runs at once."""

    def __init__(self, wc: WorkCenter, by: Any, every: float) -> None:
        self.wc, self.by, self.every = wc, by, timedelta(seconds=every)
        # The loop recovered as it started.
        self._cadence = Cadence(wc.clock, not_before=wc.clock.now() + self.every)

    def __call__(self) -> None:
        if not self._cadence.due(self.every):
            return
        # The database away, or recoveries racing: the claim that follows meets the
        # first as it would have anyway, and the next recovery tries again.
        with suppress(WorkcenterError):
            self.wc.recover(actor=self.by)


class _LeaseKeeper(threading.Thread):
    """Renews a lease every third of its length until stopped or refused."""

    def __init__(self, wc: WorkCenter, claim: Claim, lease_seconds: float) -> None:
        super().__init__(daemon=True)
        self.wc, self.claim, self.lease_seconds = wc, claim, lease_seconds
        self.stopped = threading.Event()
        self.lost = False
        # When the lease ends at the latest, on the store's clock: a renewal extends it
        # from its own moment, after the one read before it.
        self.expires_at = claim.expires_at

    def run(self) -> None:
        interval = max(1.0, self.lease_seconds / 3)
        while not self.stopped.wait(interval):
            at = self.wc.clock.now()
            try:
                renewed = self.wc.renew_lease(self.claim, lease_seconds=self.lease_seconds)
            except StoreDisconnected:
                continue  # the next renewal tries again; a lease that ran out is refused
            except StoreClosed:
                return  # the worker left, its Run given back (ADR-0097): nothing to keep
            if not renewed:
                self.lost = True
                return
            self.expires_at = max(self.expires_at, at + timedelta(seconds=self.lease_seconds))


def give_back(
    wc: WorkCenter,
    claim: Claim,
    reason: str,
    stats: WorkerStats,
    on_event: Callable[[str, Claim, str], None] | None,
) -> None:
    """Interrupt the Run (retryable) with ``reason``; a Run already lost stays lost."""
    try:
        through_contention(lambda: wc.interrupt(claim, reason=reason))
    except WorkcenterError:  # stale, or the item ended meanwhile: the Run is not ours now
        stats.lost += 1
        if on_event:
            on_event("lost", claim, "the lease was lost before the interruption was recorded")
        return
    stats.interrupted += 1
    if on_event:
        on_event("interrupted", claim, reason)


def _executor_error(
    wc: WorkCenter,
    claim: Claim,
    reason: str,
    stats: WorkerStats,
    on_event: Callable[[str, Claim, str], None] | None,
) -> None:
    # An exception's text often quotes credentials or local paths: neither is
    # recorded nor printed.
    reason = sanitize_personal(reason)
    stats.errors += 1
    if on_event:
        on_event("error", claim, reason)
    give_back(wc, claim, reason, stats, on_event)


def run_one(
    wc: WorkCenter,
    executor: Executor,
    *,
    worker: str,
    lease_seconds: float = 60.0,
    stats: WorkerStats | None = None,
    on_event: Callable[[str, Claim, str], None] | None = None,
    signals: Executing | None = None,
    reconnect: Reconnect | None = None,
) -> Claim | None:
    """Claim and execute one Action; None when nothing is claimable.

    An executor that raises, or reports something that is not a valid report, is an
    error: its Run is interrupted with the reason (so it can be retried) and counted.
    With ``reconnect``, a finish the database did not answer is tried again until it
    does, even after a stop, while the Run's lease can still take it (past it, the Run
    is counted lost) and no second stop signal came (else ``StoreDisconnected`` is
    raised, ADR-0119).
    """
    stats = stats or WorkerStats()
    claim = wc.claim_next(worker, lease_seconds=lease_seconds)
    if claim is None:
        return None
    stats.claimed += 1
    if on_event:
        on_event("claimed", claim, "")
    if claim.inputs:
        wc.consume_input(claim, [queued.id for queued in claim.inputs])
    keeper = _LeaseKeeper(wc, claim, lease_seconds)
    keeper.start()

    def draining(signum: int) -> None:
        if on_event:
            on_event("draining", claim, draining_line(signum, claim))

    try:
        with signals.executing(claim, draining) if signals else nullcontext():
            report = executor(claim)
    except WorkerStopped as stopped:
        keeper.stopped.set()
        keeper.join()
        if not stopped.given_back:
            give_back(wc, claim, f"worker stopped by {stopped}", stats, on_event)
        return claim
    except Exception as error:  # an executor's failure must not kill the worker
        keeper.stopped.set()
        keeper.join()
        _executor_error(
            wc, claim, f"executor raised {type(error).__name__}: {error}", stats, on_event
        )
        return claim
    except BaseException as interrupt:
        # A service's task cancelled, Ctrl-C without the worker's signals: the worker
        # ends with it, its Run given back, not held by a renewer that outlived it
        # (found by an embedder, ADR-0138).
        keeper.stopped.set()
        keeper.join()
        give_back(wc, claim, f"worker interrupted by {type(interrupt).__name__}", stats, on_event)
        raise
    keeper.stopped.set()
    keeper.join()
    if reconnect is not None:
        # The worker's own waits end with its stop, but a report in hand is recorded
        # through an outage, stopped or not, while the Run's lease can still take it
        # (past it the finish is refused); with stop signals, until a second one too
        # (ADR-0112, ADR-0119).
        reconnect = Reconnect(signals.again if signals is not None else threading.Event())
    try:
        checked = _checked(report)

        def finish() -> ActionState:
            # Sibling Runs of one item finishing at once take the item's stream from each
            # other: an outcome in hand is worth the wait (found by acceptance testing:
            # it was given up as a malformed report and its Run interrupted).
            return through_contention(lambda: wc.finish_run(claim, checked))

        if reconnect is None:
            action = finish()
        else:
            action = reconnect.call(finish, worth=lambda: wc.clock.now() < keeper.expires_at)
    except StoreDisconnected:
        if reconnect is not None and signals is not None and signals.again.is_set():
            # A second stop signal ended the tries (found by acceptance testing: the Run
            # was then neither counted nor said).
            stats.lost += 1
            if on_event:
                on_event("lost", claim, SECOND_SIGNAL_LOST)
            return claim
        if reconnect is None or wc.clock.now() < keeper.expires_at:
            raise
        # The lease ran out while the database was away: the finish would be refused.
        stats.lost += 1
        if on_event:
            on_event("lost", claim, "the lease ran out before the outcome could be recorded")
        return claim
    except StaleRun as stale:
        # Not its own finish sent again (that answers what the first recorded).
        stats.lost += 1
        if on_event:
            on_event("lost", claim, f"the outcome was not recorded: {stale}")
        return claim
    except WriteContention:
        # Not the report's fault: the Run stays the worker's until its lease lapses, and
        # the watcher (or a claim) gives the Action back then.
        stats.lost += 1
        if on_event:
            on_event("lost", claim, CONTENDED)
        return claim
    except StoreUnavailable as unavailable:
        # Nor is a store that cannot take it (a full disk): it was said a malformed
        # report, and its interruption failed the same way (found by acceptance testing,
        # ADR-0138). The Run stays the worker's until its lease lapses.
        stats.lost += 1
        if on_event:
            on_event("lost", claim, f"the outcome was not recorded: {unavailable}")
        return claim
    except WorkcenterError as error:
        if isinstance(error, CommandRefused) and wc.pending_input(claim):
            wc.interrupt(claim, reason=LATE_INPUT)
            stats.interrupted += 1
            if on_event:
                on_event("interrupted", claim, LATE_INPUT)
        else:
            _executor_error(wc, claim, f"malformed executor report: {error}", stats, on_event)
        return claim
    run = action.run(claim.run_id)
    _finished(stats, claim, run.status if run else "unknown", on_event)
    return claim


def _finished(
    stats: WorkerStats,
    claim: Claim,
    outcome: str,
    on_event: Callable[[str, Claim, str], None] | None,
) -> None:
    """A Run's outcome recorded: counted and said."""
    stats.finished += 1
    stats.outcomes[outcome] = stats.outcomes.get(outcome, 0) + 1
    if on_event:
        on_event("finished", claim, outcome)


def _checked(report: object) -> RunReport | Mapping[str, Any]:
    if isinstance(report, RunReport | Mapping):
        return report
    raise InvalidInput(
        f"the executor returned {type(report).__name__}, not a RunReport or a mapping"
    )
