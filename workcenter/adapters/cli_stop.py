"""Ctrl-C and SIGTERM on the operator's long verbs (`audit verify`, `audit decisions
--replay`, `projections rebuild`, `projections run`, `rekey`; ADR-0100).

Their exit statuses 1 mean "broken" or "differs", so an interruption must not end as
click's "Aborted!" with status 1, nor a SIGTERM kill a rebuild before it removes its
temporary copy. Like the worker, they exit 130 on SIGINT and 143 on SIGTERM, after one
line on stderr that says what was left undone. The worker's ``StopSignals`` records the
signal; the verb takes it between two pages of its work (``Stop.check``), never in the
middle of a write such as a rebuild's swap, and the handlers stay until the verb has
said its last line, so a second signal only confirms the stop (ADR-0097).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, NoReturn, TypeVar

import click

from workcenter.adapters.persistence import ServerNotAnswering
from workcenter.adapters.sqlite_locks import StoreFull
from workcenter.adapters.terminal import safe
from workcenter.adapters.worker_run import StopSignals

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

T = TypeVar("T")


class Interrupted(BaseException):
    """A stop signal, taken by a long verb between two pages (not an ``Exception``, so
    that no ``except Exception`` on the way mistakes it for a failure)."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        self.name = signal.Signals(signum).name
        super().__init__(self.name)


class Stop:
    def __init__(self, signals: StopSignals) -> None:
        self._signals = signals

    @property
    def signum(self) -> int | None:
        return self._signals.signum

    @property
    def event(self) -> threading.Event:
        return self._signals.event

    def check(self) -> None:
        """``Interrupted`` once a stop signal has come."""
        if self._signals.signum is not None:
            raise Interrupted(self._signals.signum)

    def exit_if_stopped(self, ctx: click.Context) -> None:
        """A signal that came while the verb said its result still ends it as stopped."""
        if self._signals.signum is not None:
            ctx.exit(status(self._signals.signum))


class Steps:
    """A long verb's progress callback: how far it got, shown on its bar (on a terminal),
    and a stop taken at every step."""

    def __init__(self, stop: Stop) -> None:
        self.stop = stop
        self.bar: Progress | None = None
        self.task: TaskID | None = None
        self.done = self.total = 0
        self.phase: str | None = None

    def shown_on(self, bar: Progress | None, description: str) -> Steps:
        if bar is not None:
            self.bar, self.task = bar, bar.add_task(description, total=None)
        return self

    def by_phase(self, descriptions: Mapping[str, str]) -> Callable[[str, int, int], None]:
        """The callback of a verb whose work comes in phases (``audit verify``: the walk,
        then the snapshot check), each counted from zero: the stop's line names the
        phase it cut, and the bar shows it."""

        def step(phase: str, done: int, total: int) -> None:
            if phase != self.phase:
                self.phase = phase
                if self.bar is not None and self.task is not None:
                    self.bar.update(self.task, description=descriptions.get(phase, phase))
            self(done, total)

        return step

    def __call__(self, done: int, total: int) -> None:
        self.done, self.total = done, max(done, total)
        if self.bar is not None and self.task is not None:
            self.bar.update(self.task, completed=done, total=self.total)
        self.stop.check()


def status(signum: int) -> int:
    return 128 + signum


@contextmanager
def stop_signals() -> Iterator[Stop]:
    with StopSignals() as signals:
        yield Stop(signals)


def open_when_reachable(ctx: click.Context, open_store: Callable[[], T], stop: Stop) -> T:
    """The daemons' open (`worker`, `projections run`, `serve`): while the store's
    database server does not answer (a failover; a host where the workers start before
    the database), or a SQLite store's disk is full, wait as a running one does, trying
    again after 0.1 s doubling to 5 s, saying so once on stderr (found by acceptance
    testing: they exited at once, status 2, ADR-0136; `serve` 75 and a full disk 2,
    ADR-0142). A stop signal meanwhile ends the command as a stop, saying nothing was
    done. Any other failure to open (no store there, a refused login) fails at once."""
    delay, said = 0.1, False
    while True:
        try:
            stop.check()
        except Interrupted as stopped:
            interrupted(ctx, stopped, "stopped while waiting for the database; nothing was done")
        try:
            return open_store()
        except (ServerNotAnswering, StoreFull) as error:
            if not said:
                said_once = " ".join(str(error).split())  # the driver's words span lines
                click.echo(f"waiting for the database (Ctrl-C stops): {said_once}", err=True)
                said = True
        stop.event.wait(delay)
        delay = min(delay * 2, 5.0)


def interrupted(ctx: click.Context, stopped: Interrupted, what: str) -> NoReturn:
    """Say what the stop left undone, on stderr, and exit 130 or 143."""
    click.echo(safe(f"interrupted by {stopped.name}: {what}"), err=True)
    ctx.exit(status(stopped.signum))
