"""``workcenter serve``: the HTTP API and the dashboard (the optional ``web`` extra),
with ``--coordinate`` the Coordinator answering in the same process."""

from __future__ import annotations

import resource

import click

from workcenter.adapters.cli_common import (
    MAX_POLL,
    Count,
    Seconds,
    console,
    db_option,
    open_center,
)
from workcenter.adapters.cli_coordinator import (
    lease_option,
    make_provider,
    provider_option,
    step_line,
)
from workcenter.adapters.cli_stop import (
    open_when_reachable,
    stop_signals,
)
from workcenter.adapters.terminal import text
from workcenter.domain.errors import WorkcenterError
from workcenter.service_layer.handlers.coordinator_step import StepResult

INSTALL_HINT = "pip install 'workcenter[web]'"


class MissingExtra(click.ClickException):
    exit_code = 2

    def __init__(self, module: str) -> None:
        super().__init__(f"serve needs the web extra ({module} is not installed): {INSTALL_HINT}")


# Open files a server needs at the least (the store's pool, the listening socket, a few
# connections), and what it raises its soft limit to where the hard one lets it.
FEWEST_OPEN_FILES = 64
OPEN_FILES_WANTED = 1024


class TooFewOpenFiles(WorkcenterError):
    """The process may open too few files to serve (its ``ulimit -n``)."""

    code = "too_few_open_files"


def enough_open_files() -> None:
    """Raise the process's soft limit of open files towards ``OPEN_FILES_WANTED``, as far
    as its hard limit lets; refuse to serve under ``FEWEST_OPEN_FILES``. Under a dozen it
    said it served and answered nothing, its log filling with accept()'s tracebacks at
    thousands a second (found by acceptance testing, ADR-0138)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= OPEN_FILES_WANTED or soft == resource.RLIM_INFINITY:
        return
    wanted = OPEN_FILES_WANTED if hard == resource.RLIM_INFINITY else min(hard, OPEN_FILES_WANTED)
    if wanted > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
        soft = wanted
    if soft < FEWEST_OPEN_FILES:
        raise TooFewOpenFiles(
            f"serve needs at least {FEWEST_OPEN_FILES} open files and may open {soft}"
            " (ulimit -n): raise the limit"
        )


def _print_step(result: StepResult) -> None:
    console.print(text(f"coordinator: {step_line(result)}"), highlight=False)


def _print_error(error: str) -> None:
    console.print(text(f"coordinator: {error} (still serving; trying again)"), highlight=False)


@click.command()
@db_option
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=Count(min=1, max=65_535), default=8765, show_default=True)
@click.option("--create", is_flag=True, help="Create the store if there is none.")
@click.option(
    "--log-level",
    type=click.Choice(["critical", "error", "warning", "info", "debug"]),
    default="info",
    show_default=True,
)
@click.option(
    "--coordinate",
    is_flag=True,
    help="Run due Coordinator steps in this process too: a posted message is answered.",
)
@provider_option
@click.option(
    "--poll",
    "poll_seconds",
    type=Seconds(min=0.01, max=MAX_POLL),
    default=1.0,
    show_default=True,
    help="With --coordinate: seconds between looks for due wakes (a message posted "
    "here is answered at once).",
)
@lease_option("With --coordinate: the mailbox lease in seconds.")
@click.pass_context
def serve(
    ctx: click.Context,
    host: str,
    port: int,
    create: bool,
    log_level: str,
    coordinate: bool,
    provider_name: str | None,
    poll_seconds: float,
    lease_seconds: float,
) -> None:
    """Serve the HTTP API and the live dashboard at http://HOST:PORT/.

    Bound to a loopback address (the default) it serves this machine only. Any other
    --host needs WORKCENTER_API_TOKEN (16 characters or more), or scoped tokens
    (WORKCENTER_WORKER_TOKEN, WORKCENTER_USER_TOKEN, WORKCENTER_OPERATOR_TOKEN,
    WORKCENTER_TOKEN_FILE): every request must then carry one as
    `Authorization: Bearer <token>`. Workers in any language use /api/worker/.

    With --coordinate the Coordinator runs beside the server, as `workcenter coordinate`
    would: a message posted in the dashboard is answered without another process.
    """
    if provider_name is not None and not coordinate:
        raise click.UsageError("--provider needs --coordinate")
    try:
        from workcenter.adapters.http.coordinator_loop import CoordinatorLoop
        from workcenter.adapters.http.guard import Policy
        from workcenter.adapters.http.server import Terminated, bind
        from workcenter.adapters.http.server import serve as run_server
    except ImportError as missing:
        raise MissingExtra(missing.name or str(missing)) from None
    policy = Policy.for_host(host)  # UnsafeServer: one line and exit 2, like any refusal
    enough_open_files()
    provider = make_provider(provider_name) if coordinate else None
    # Started while its database server does not answer (a failover, a host whose
    # services start before the database), it waits as the worker does: it exited 75 at
    # once, to be restarted in a loop (found by acceptance testing, ADR-0142).
    with stop_signals() as stop:
        opened = open_when_reachable(ctx, lambda: open_center(ctx, create=create), stop)
    with opened as wc:
        loop = None
        if provider is not None:
            loop = CoordinatorLoop(
                wc,
                provider,
                poll_seconds=poll_seconds,
                lease_seconds=lease_seconds,
                on_step=_print_step,
                on_error=_print_error,
            )
        sock = bind(policy.host, port)  # PortUnavailable: one line, before any address is shown
        shown = f"[{host}]" if ":" in host else host
        with_coordinator = " with the Coordinator" if loop else ""
        console.print(
            f"Workcenter dashboard on http://{shown}:{port}/{with_coordinator} (Ctrl-C stops)"
        )
        try:
            run_server(wc, policy, port, log_level=log_level, coordinator=loop, sock=sock)
        except Terminated:  # SIGTERM with the Coordinator: its turn in hand was released
            ctx.exit(143)
        except KeyboardInterrupt:  # uvicorn stopped gracefully, then re-raised Ctrl-C
            ctx.exit(130)
