"""How a verb ends when it does not succeed: one line on stderr and an exit status that
says what kind of failure it was, so a script can tell "refused" from "try again"
(ADR-0140)."""

from __future__ import annotations

import errno
import os
import sqlite3
import sys

import click
from eventsourcing.persistence import PersistenceError

from workcenter.adapters.persistence import NO_STORE, ServerNotAnswering, StoreUnavailable
from workcenter.adapters.postgres_connection import PoolBusy, StoreDisconnected
from workcenter.adapters.terminal import safe
from workcenter.adapters.wording import plain
from workcenter.domain.errors import InvalidInput, WorkcenterError
from workcenter.service_layer.repository import WriteContention

# The exit statuses beside 0 (README, "The CLI"); a verb's own "no" is 1 (a broken
# history, a copy that missed writes), a stop by a signal 128 + its number.
REFUSED = 2  # refused, misused, or the store cannot be used: as it is, it is refused again
OUTPUT_FAILED = 74  # sysexits' EX_IOERR: what the verb had to say could not be written
TRY_AGAIN = 75  # sysexits' EX_TEMPFAIL: the store was held up or out of reach for now
BROKEN_PIPE = 141  # 128 + SIGPIPE, as for a program the signal ends: its reader left


def refusal_line(error: WorkcenterError) -> str:
    # A message may quote the refused input: its control characters print visibly.
    return safe(f"{type(error).__name__}: {plain(str(error), links=True)}")


def status_of(error: WorkcenterError) -> int:
    """A store held up (its lock or pool), a connection lost, a server that does not
    answer, a write that kept losing its race: the same command may succeed later. Any
    other error is the command's or the store's own, and stays until someone acts."""
    transient = PoolBusy | StoreDisconnected | ServerNotAnswering | WriteContention
    return TRY_AGAIN if isinstance(error, transient) else REFUSED


def failed(error: WorkcenterError) -> int:
    """Say ``error`` on stderr; its exit status."""
    click.echo(refusal_line(error) + _locale_hint(error) + _init_hint(error), err=True)
    return status_of(error)


def _init_hint(error: WorkcenterError) -> str:
    """What makes a store, where there is none: `create` no longer makes one (ADR-0145),
    and a new user's first command may be it."""
    said = str(error)
    if not isinstance(error, StoreUnavailable) or not said.startswith(NO_STORE):
        return ""
    return "" if "init" in said else " (`workcenter init` makes one)"


def _locale_hint(error: WorkcenterError) -> str:
    """Why an argument typed as text holds a lone surrogate: Python read bytes that are
    not text in the terminal's locale (``LANG=C`` without Python's UTF-8 mode), so a
    title typed in Japanese was said to hold one (found by acceptance testing, ADR-0144)."""
    if not isinstance(error, InvalidInput) or "lone surrogate" not in str(error):
        return ""
    held = any("\udc80" <= c <= "\udcff" for argument in sys.argv[1:] for c in argument)
    if not held:
        return ""
    encoding = sys.getfilesystemencoding()
    if encoding.lower().replace("-", "") == "utf8":
        return " (the command line held bytes that are not UTF-8)"
    return (
        f" (the command line held bytes that are not text in this locale's encoding,"
        f" {encoding}: use a UTF-8 locale, or PYTHONUTF8=1)"
    )


def store_failed(error: PersistenceError | sqlite3.Error) -> int:
    """The store failed under a verb in a way no typed error names."""
    return failed(StoreUnavailable(str(error)))


def output_failed(error: OSError) -> int:
    """A write the verb could not make: its output's (a full disk, a closed pipe) or a
    file's it was told to write. A reader that left (a closed pipe) is not told anything:
    as for a program SIGPIPE ends, its status says it. An ``OSError`` without an error
    number is no failed write: the event store library's word for a setting it cannot
    take (its ``EnvironmentError``), refused as input."""
    if error.errno is None:
        return failed(InvalidInput(str(error)))
    _discard_stdout()
    if error.errno == errno.EPIPE:
        return BROKEN_PIPE
    where = error.filename if error.filename is not None else "its output"
    click.echo(
        safe(
            f"OutputFailed: could not write {where} ({error.strerror or error}); any change"
            " the command made to the store is recorded"
        ),
        err=True,
    )
    return OUTPUT_FAILED


def unencodable(error: UnicodeEncodeError) -> int:
    """Text the output's encoding cannot write (``PYTHONIOENCODING=ascii``, a title in
    another script): it was a traceback and 1, a broken history's status for ``audit
    verify`` (found by acceptance testing, ADR-0140)."""
    _discard_stdout()
    click.echo(
        f"OutputFailed: the output's encoding ({error.encoding}) cannot write what the"
        " command has to say: set PYTHONIOENCODING=utf-8, or use --json (always UTF-8);"
        " any change the command made to the store is recorded",
        err=True,
    )
    return OUTPUT_FAILED


def _discard_stdout() -> None:
    """What is still buffered for stdout goes nowhere: else Python's flush at exit fails
    again, saying so on stderr with a traceback."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass  # not a file of the process (a test's capture): nothing to flush at exit


def stdout_closed() -> bool:
    """Whether the process was started with its stdout closed (``>&-``): a verb would do
    its work and then fail to say what it did."""
    return sys.stdout is None
