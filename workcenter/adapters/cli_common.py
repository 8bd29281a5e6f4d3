"""What every ``workcenter`` verb shares: the console, JSON output, opening the store, ids."""

from __future__ import annotations

import errno
import math
import os
import re
import shlex
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar
from uuid import UUID

import click
import orjson
from rich.console import Console, ConsoleDimensions

from workcenter.adapters.persistence import is_in_memory
from workcenter.adapters.terminal import escape_json
from workcenter.application import WorkCenter
from workcenter.domain import bounds
from workcenter.domain.errors import InvalidInput, NotFound

if TYPE_CHECKING:
    from rich.progress import Progress

# Output that is not a terminal is read by programs: lines are never wrapped or cut there.
PIPE_WIDTH = 100_000
MIN_PREFIX = 4
ID_SHOWN = 60  # characters of a refused id said back


class _Console(Console):
    @property
    def on_a_terminal(self) -> bool:
        """Whether the output is a terminal, whatever ``FORCE_COLOR`` (set by many CI
        systems) makes rich's ``is_terminal`` say of a pipe: there lines must be whole and
        no bar drawn (found by acceptance testing, ADR-0140); colours it may force."""
        isatty = getattr(self.file, "isatty", None)
        try:
            return bool(isatty is not None and isatty())
        except ValueError:  # a closed file
            return False

    def on_broken_pipe(self) -> None:
        """The reader left: said by the verb's exit status as for any write that failed
        (``cli_outcome``), where rich exited 1, a broken history's status for ``audit
        verify`` (found by acceptance testing, ADR-0140)."""
        self.quiet = True
        raise BrokenPipeError(errno.EPIPE, os.strerror(errno.EPIPE))

    @property
    def size(self) -> ConsoleDimensions:
        size = super().size
        return size if self.on_a_terminal else ConsoleDimensions(PIPE_WIDTH, size.height)

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        self._width, self._height = new_size


console = _Console(soft_wrap=True)


def progress_bar(*, transient: bool = True) -> Progress:
    """The bar of a long verb on a terminal: its task, the bar, done of total, the time
    taken (imported when asked: most verbs never draw one)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    return Progress(
        "[bold]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=transient,
    )


@contextmanager
def bar_on_terminal(as_json: bool, *, transient: bool = True) -> Iterator[Progress | None]:
    """A progress bar on a terminal, else None: JSON and pipes are read by programs."""
    if as_json or not console.on_a_terminal:
        yield None
        return
    with progress_bar(transient=transient) as bar:
        yield bar


MAX_POLL = float(bounds.POLL_MAX_SECONDS)


class Count(click.IntRange):
    """A whole number within the range, named so in refusals (click's own says "'abc' is
    not a valid integer range", as if a range were asked for)."""

    name = "integer"


class Seconds(click.FloatRange):
    """A length of time in seconds within the range, and finite: NaN passes click's own
    range check (it compares as nothing), and a wait of 1e308 overflows the sleep."""

    name = "number of seconds"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        seconds = super().convert(value, param, ctx)
        if not math.isfinite(seconds):
            self.fail(f"{value!r} is not a finite number of seconds", param, ctx)
        return seconds


@contextmanager
def options_named(names: Mapping[str, str]) -> Iterator[None]:
    """A refusal of the Python API names its arguments (``limits.max_tokens``); the
    command line's user gave options, so the refusal names those (``--max-tokens``)."""
    try:
        yield
    except InvalidInput as error:
        alternatives = "|".join(map(re.escape, sorted(names, key=len, reverse=True)))
        said = re.sub(rf"(?<![\w.])({alternatives})(?!\w)", lambda m: names[m[1]], str(error))
        raise InvalidInput(said) from None


def clip(value: str, limit: int) -> str:
    """``value`` shortened for a text view, marked where it was cut (``--json`` has it
    whole)."""
    return value if len(value) <= limit else value[: limit - 1] + "…"


# The option of every verb that prints data; a verb whose JSON says something particular
# names it in its own help.
json_option = click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print the result as JSON on stdout (UTF-8; messages go to stderr).",
)


def emit_json(data: Any, *, line: bool = False) -> None:
    """``data`` as JSON on stdout: indented, or as one line of JSON Lines (the stream of a
    running verb, flushed at once) when ``line``."""
    option = 0 if line else orjson.OPT_INDENT_2
    try:
        serialised = orjson.dumps(data, option=option).decode()
    except TypeError:
        # A path the file system gave as bytes that are not UTF-8 (Python carries them as
        # lone surrogates, which JSON cannot hold): written as the escapes of its bytes,
        # where the verb had done its work and then failed with a traceback (found by
        # acceptance testing, ADR-0138).
        serialised = orjson.dumps(_utf8(data), option=option).decode()
    # JSON is UTF-8 (RFC 8259) whatever the locale's encoding says: an ASCII one made a
    # traceback of every non-ASCII title (found by acceptance testing, ADR-0140).
    text = escape_json(serialised) + "\n"
    binary = getattr(sys.stdout, "buffer", None)  # none where a caller put a text stream
    if binary is None:
        sys.stdout.write(text)
        out: Any = sys.stdout
    else:
        sys.stdout.flush()
        binary.write(text.encode())
        out = binary
    if line:
        out.flush()


def _utf8(data: Any) -> Any:
    if isinstance(data, str):
        return data.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    if isinstance(data, dict):
        return {_utf8(key): _utf8(value) for key, value in data.items()}
    if isinstance(data, list | tuple):
        return [_utf8(value) for value in data]
    return data


F = TypeVar("F", bound=Callable[..., Any])


def _remember_db(ctx: click.Context, _: click.Parameter, value: str | None) -> None:
    if value is not None:
        ctx.ensure_object(dict)["db"] = value


def db_option(command: F) -> F:
    """``--db`` on a verb as well as before it (the one given last wins)."""
    return click.option(
        "--db",
        default=None,
        expose_value=False,
        callback=_remember_db,
        help="SQLite file or postgresql://user@host:port/dbname[?schema=S] URL"
        " (default: $WORKCENTER_DB or ./workcenter.db).",
    )(command)


def actor_option(command: F) -> F:
    """``--actor KIND:ID`` on a verb that writes: who the audit records as its cause."""
    return click.option(
        "--actor",
        default=None,
        metavar="KIND:ID",
        help="Record the command as this actor, e.g. user:alice or operator:ops"
        " (default: the verb's own; `audit` shows it).",
    )(command)


def open_center(
    ctx: click.Context,
    *,
    create: bool = False,
    inline_projections: bool | None = None,
    in_memory: bool = False,
) -> WorkCenter:
    """The store the user named; only `init` and `demo` make one (``create``). Not a
    store in memory, unless ``in_memory`` (a verb whose work ends with it, the demo): it
    ends with the verb's process, which said "created" and named a next command that
    found nothing (found by acceptance testing, ADR-0145)."""
    db = ctx.ensure_object(dict).get("db")
    named = db if db is not None else os.environ.get("WORKCENTER_DB")
    if not in_memory and named is not None and is_in_memory(named):
        raise InvalidInput(
            "a store in memory ends with this command: name a file or a URL (the Python API"
            " keeps one for as long as its WorkCenter is open)"
        )
    return WorkCenter.open(db, create=create, inline_projections=inline_projections)


def command_hint(ctx: click.Context, *words: str) -> str:
    """A ``workcenter`` command line to run next, naming the same store the user named."""
    db = ctx.ensure_object(dict).get("db")
    prefix = ["workcenter", "--db", db] if db is not None else ["workcenter"]
    return shlex.join([*prefix, *words])


def resolve_id(value: str, kind: str, candidates: Callable[[], Iterable[UUID]]) -> UUID:
    """A full id, or a unique prefix of one of ``candidates`` (as audit and progress print)."""
    try:
        return UUID(value)
    except ValueError:
        pass
    prefix = value.strip().lower()
    # Said back clipped: an id is 36 characters, and a line need not hold a pasted page.
    shown = clip(value, ID_SHOWN)
    if len(prefix) < MIN_PREFIX or any(c not in "0123456789abcdef-" for c in prefix):
        raise InvalidInput(
            f"{shown!r} is not a valid {kind} id (give the id or at least {MIN_PREFIX} of its "
            "first characters)"
        )
    matches = sorted({c for c in candidates() if str(c).startswith(prefix)}, key=str)
    if not matches:
        raise NotFound(f"{kind} with an id starting", shown)
    if len(matches) > 1:
        some = ", ".join(str(m) for m in matches[:3]) + (", ..." if len(matches) > 3 else "")
        raise InvalidInput(
            f"{kind} id prefix {shown!r} is ambiguous: {len(matches)} ids start with it ({some})"
        )
    return matches[0]


def work_item_id(wc: WorkCenter, value: str) -> UUID:
    return resolve_id(value, "WorkItem", lambda: (row["id"] for row in wc.list_work_items()))
