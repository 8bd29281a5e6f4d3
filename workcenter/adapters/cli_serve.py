"""``workcenter serve``: the HTTP API and the dashboard (the optional ``web`` extra)."""

from __future__ import annotations

import click

from workcenter.adapters.cli_common import console, db_option, open_center

INSTALL_HINT = "pip install 'workcenter[web]'"


class MissingExtra(click.ClickException):
    exit_code = 2

    def __init__(self, module: str) -> None:
        super().__init__(f"serve needs the web extra ({module} is not installed): {INSTALL_HINT}")


@click.command()
@db_option
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(min=1, max=65_535), default=8765, show_default=True)
@click.option("--create", is_flag=True, help="Create the store if there is none.")
@click.option(
    "--log-level",
    type=click.Choice(["critical", "error", "warning", "info", "debug"]),
    default="info",
    show_default=True,
)
@click.pass_context
def serve(ctx: click.Context, host: str, port: int, create: bool, log_level: str) -> None:
    """Serve the HTTP API and the live dashboard at http://HOST:PORT/.

    Bound to a loopback address (the default) it serves this machine only. Any other
    --host needs WORKCENTER_API_TOKEN (16 characters or more): every request must then
    carry it as `Authorization: Bearer <token>`.
    """
    try:
        from workcenter.adapters.http.guard import Policy
        from workcenter.adapters.http.server import serve as run_server
    except ImportError as missing:
        raise MissingExtra(missing.name or str(missing)) from None
    policy = Policy.for_host(host)  # UnsafeServer: one line and exit 2, like any refusal
    with open_center(ctx, create=create) as wc:
        shown = f"[{host}]" if ":" in host else host
        console.print(f"Workcenter dashboard on http://{shown}:{port}/ (Ctrl-C stops)")
        try:
            run_server(wc, policy, port, log_level=log_level)
        except KeyboardInterrupt:  # uvicorn stopped gracefully, then re-raised Ctrl-C
            ctx.exit(130)
