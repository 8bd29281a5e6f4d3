"""Several Runs at once in one worker process: ``run_worker(runs_at_once=N)`` (ADR-0097).

Each slot is a thread that claims, executes and finishes one Run at a time as the
single-Run loop does (``run_one``), all sharing the process's store and its pool; on
PostgreSQL claims take turns for the connection they hold (ADR-0095). The main thread
runs the due Coordinator steps and watches for the end: a stop, ``max_runs`` Runs
taken, or, with ``exit_when_idle``, every slot finding nothing to claim since the
Coordinator's last step.

A stop signal reaches the main thread only, and an executor at work in another thread
cannot be interrupted. So the main thread gives back every Run whose executor is at
work (interrupted, retryable, as a single-Run worker's stop does); those executors are
left to end with the process, and what they report is not recorded. A slot claiming or
finishing completes that write first. A delivery is the exception: on the first signal
the main thread waits for each slot delivering to finish and record it, and a second
signal gives those Runs back too (ADR-0112). Stopped without a signal (the API's
``stop`` event), each Run in hand finishes, as in the single-Run loop.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from workcenter.adapters.postgres_connection import StoreDisconnected
from workcenter.adapters.worker_run import (
    BusyRecovery,
    Draining,
    Executor,
    Reconnect,
    RefusedClaims,
    StopSignals,
    WorkerStats,
    WorkerStopped,
    drains,
    give_back,
    run_one,
)
from workcenter.application import Claim, WorkCenter
from workcenter.domain.actor import Actor
from workcenter.domain.errors import WorkcenterError

# How often the main thread looks at the slots (no database work: a few flags).
WATCH_SECONDS = 0.05


class _Hand:
    """The Run a slot's executor works on, which a stop may give back from the main
    thread. The lock decides which wins: the executor's report or the stop."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._claim: Claim | None = None
        self._draining: Draining | None = None
        self._stopped_by: int | None = None
        # Signals received when the stop last looked: one lets a delivery finish (any
        # Run, when the worker drains).
        self._signals = 0
        self._drain = False
        self.given_back = False
        self.again = threading.Event()  # a second signal: a drained finish stops waiting

    @contextmanager
    def executing(self, claim: Claim, draining: Draining) -> Iterator[None]:
        with self._lock:
            stopped_by = self._stopped_by
            if stopped_by is not None and not drains(claim, self._signals, self._drain):
                raise WorkerStopped(stopped_by)  # claimed as the stop came: run_one gives it back
            self._claim, self._draining = claim, draining
        try:
            if stopped_by is not None:  # a delivery claimed as the stop came: given back, it fails
                draining(stopped_by)
            yield
        finally:
            with self._lock:
                self._claim = None
                stopped_by = self._stopped_by if self.given_back else None
            if stopped_by is not None:
                raise WorkerStopped(stopped_by, given_back=True)

    def take_back(self, signum: int, signals: int, drain: bool) -> Claim | None:
        """The Run whose executor is at work, now the stop's to give back; None when
        none is (the slot's own write, if any, completes, and it executes no more) or
        when the stop lets it finish (a delivery, or any Run when ``drain``; ``signals``:
        those received, 1 for the first; its drain is said once)."""
        with self._lock:
            first_look = self._stopped_by is None
            self._stopped_by, self._signals, self._drain = signum, signals, drain
            claim, draining = self._claim, self._draining
            if claim is None:
                return None
            if not drains(claim, signals, drain):
                self.given_back = True
                return claim
        if first_look and draining is not None:
            draining(signum)
        return None


@dataclass
class _Slot:
    thread: threading.Thread | None = None
    hand: _Hand = field(default_factory=_Hand)
    stats: WorkerStats = field(default_factory=WorkerStats)
    # The Coordinator round in which this slot last found nothing to claim; -1 while
    # it has a Run or has not looked since.
    idle_in: int = -1
    # Runs this slot claimed and handled to their end (finished, given back or lost).
    handled: int = 0
    failure: BaseException | None = None


class _Tickets:
    """``max_runs`` shared by the slots: a claim takes one, and gives it back when it
    found nothing or failed."""

    def __init__(self, limit: int | None) -> None:
        self._lock = threading.Lock()
        self._left = limit

    def take(self) -> bool:
        with self._lock:
            if self._left is None:
                return True
            if self._left <= 0:
                return False
            self._left -= 1
            return True

    def give_back(self) -> None:
        with self._lock:
            if self._left is not None:
                self._left += 1


class Slots:
    """``runs_at_once`` slots of one worker process and the main thread's watch."""

    def __init__(
        self,
        wc: WorkCenter,
        executor: Executor,
        *,
        worker: str,
        lease_seconds: float,
        poll_seconds: float,
        max_runs: int | None,
        exit_when_idle: bool,
        on_event: Callable[[str, Claim, str], None] | None,
        by: Actor,
        recover_when_busy: BusyRecovery,
    ) -> None:
        self.wc, self.executor, self.worker, self.by = wc, executor, worker, by
        self.recover_when_busy = recover_when_busy
        self.lease_seconds, self.poll_seconds = lease_seconds, poll_seconds
        self.exit_when_idle, self.on_event = exit_when_idle, on_event
        self.tickets = _Tickets(max_runs)
        self.refused = RefusedClaims()
        self.ending = threading.Event()
        # The Coordinator's rounds: a step may make work claimable, so a slot waiting
        # for work is woken, and the worker is idle only once every slot has looked
        # again since.
        self.changed = threading.Condition()
        self.round = 0

    def run(
        self,
        runs_at_once: int,
        stats: WorkerStats,
        stop: threading.Event,
        signals: StopSignals | None,
        coordinate: Callable[[], bool],
    ) -> None:
        """Run the slots until the end; their counts are added to ``stats``."""
        slots = [_Slot() for _ in range(runs_at_once)]
        for k, slot in enumerate(slots):
            slot.thread = threading.Thread(
                target=self._loop, args=(slot,), name=f"{self.worker} run {k + 1}", daemon=True
            )
            slot.thread.start()
        interrupted: int | None = None
        try:
            self._watch(slots, stop, coordinate)
        except KeyboardInterrupt:  # Ctrl-C without StopSignals: as SIGINT would
            interrupted = signal.SIGINT
            raise
        finally:
            self.ending.set()
            with self.changed:
                self.changed.notify_all()
            signum = signals.signum if signals and signals.signum else interrupted
            if signum is not None:
                self._give_back_runs_in_hand(slots, signum, stats, signals)
            for slot in slots:
                if not slot.hand.given_back and slot.thread is not None:
                    slot.thread.join()
        for slot in slots:
            stats.add(slot.stats)
        failure = next((slot.failure for slot in slots if slot.failure), None)
        if failure is not None:
            raise failure

    def _watch(
        self, slots: list[_Slot], stop: threading.Event, coordinate: Callable[[], bool]
    ) -> None:
        """The Coordinator's due steps, at each poll and after each Run a slot handled
        (as the single-Run loop steps before each claim), until the end."""
        due = 0.0
        handled = -1
        while not stop.is_set():
            if any(slot.failure for slot in slots) or not any(
                slot.thread and slot.thread.is_alive() for slot in slots
            ):
                return  # a slot failed, or max_runs were taken
            idle = self.exit_when_idle and all(slot.idle_in == self.round for slot in slots)
            runs = sum(slot.handled for slot in slots)
            if due <= 0 or runs != handled or idle:
                handled, due = runs, self.poll_seconds
                if coordinate():
                    with self.changed:
                        self.round += 1
                        self.changed.notify_all()
                    continue
                if idle:  # every slot looked since the last step, and none is due
                    return
            stop.wait(WATCH_SECONDS)
            due -= WATCH_SECONDS

    def _give_back_runs_in_hand(
        self, slots: list[_Slot], signum: int, stats: WorkerStats, signals: StopSignals | None
    ) -> None:
        """Every Run in hand but those the stop lets finish until a second signal: the
        deliveries (ADR-0112), or every Run when the worker drains (ADR-0141). Without
        ``StopSignals`` (Ctrl-C raised through the loop) a second Ctrl-C would end the
        wait with an exception: nothing drains."""
        received = signals.count if signals else 2
        drain = signals.drain if signals else False
        reason = f"worker stopped by {signal.Signals(signum).name}"
        for slot in slots:
            claim = slot.hand.take_back(signum, received, drain)
            if claim is not None:
                give_back(self.wc, claim, reason, stats, self.on_event)
        if signals is None or received > 1:
            return
        # The slots given back are left to end with the process; the others are
        # delivering, or ending a write they had begun.
        while signals.count == 1 and any(
            slot.thread is not None and slot.thread.is_alive() and not slot.hand.given_back
            for slot in slots
        ):
            time.sleep(WATCH_SECONDS)
        if signals.count > 1:
            second = signals.last or signum
            reason = f"worker stopped by {signal.Signals(second).name}"
            for slot in slots:
                slot.hand.again.set()
                claim = slot.hand.take_back(second, signals.count, drain)
                if claim is not None:
                    give_back(self.wc, claim, reason, stats, self.on_event)

    def _loop(self, slot: _Slot) -> None:
        try:
            self._claim_until_the_end(slot)
        except BaseException as error:  # a defect: the main thread raises it at the end
            slot.failure = error

    def _claim_until_the_end(self, slot: _Slot) -> None:
        reconnect = Reconnect(self.ending)
        while not self.ending.is_set() and self.tickets.take():
            seen = self.round
            self.recover_when_busy()
            try:
                claim = run_one(
                    self.wc,
                    self.executor,
                    worker=self.worker,
                    lease_seconds=self.lease_seconds,
                    stats=slot.stats,
                    on_event=self.on_event,
                    signals=slot.hand,
                    reconnect=reconnect,
                )
            except StoreDisconnected as error:
                self.tickets.give_back()
                if not reconnect.wait(error):
                    return
                continue
            except WorkcenterError as error:  # the claim itself was refused: try later
                self.refused(error, slot.stats)
                claim = None
            reconnect.answered()
            if claim is not None:
                slot.idle_in = -1
                slot.handled += 1
                continue
            self.tickets.give_back()
            try:
                if self.wc.recover(actor=self.by):
                    continue  # a lapsed lease ended: its Action may be claimable now
            except StoreDisconnected as error:
                reconnect.wait(error)
                continue
            except WorkcenterError:
                continue
            slot.idle_in = seen
            self._wait_for_work(seen)

    def _wait_for_work(self, seen: int) -> None:
        """Until the Coordinator steps again, the end, or the next poll."""
        with self.changed:
            self.changed.wait_for(
                lambda: self.round != seen or self.ending.is_set(), timeout=self.poll_seconds
            )
