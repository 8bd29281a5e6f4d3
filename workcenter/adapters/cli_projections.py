"""The verbs that watch and keep the store's derived state: `projections status`,
`rebuild` and `run` (issue 4, ADR-0011; their stops, ADR-0100), and `leases`."""

from __future__ import annotations

import signal
import time
from typing import Any

import click
from rich.table import Table

from workcenter.adapters.cli_common import (
    MAX_POLL,
    Seconds,
    bar_on_terminal,
    console,
    db_option,
    emit_json,
    json_option,
    open_center,
)
from workcenter.adapters.cli_stop import (
    Interrupted,
    Stop,
    interrupted,
    open_when_reachable,
    stop_signals,
)
from workcenter.adapters.cli_tables import utc
from workcenter.adapters.persistence import StoreUnavailable
from workcenter.projections.lifecycle import RebuildReport


@click.group()
def projections() -> None:
    """Operate the read models: their lag, a rebuild from zero, the asynchronous runner."""


@projections.command(name="status")
@db_option
@json_option
@click.pass_context
def projections_status(ctx: click.Context, as_json: bool) -> None:
    """Each read model's position, the head of the event sequence, and the lag (as they
    are: this only observes, it catches nothing up)."""
    # Opened without inline projections, or opening would catch the eager views up.
    with open_center(ctx, inline_projections=False) as wc:
        report = [row.json() for row in wc.maintenance.projection_status()]
    if as_json:
        emit_json(report)
        return
    table = Table()
    for column in ("read model", "position", "head", "lag"):
        table.add_column(column, justify="left" if column == "read model" else "right")
    for row in report:
        lag = str(row["lag"]) if not row["lag"] else f"[yellow]{row['lag']}[/]"
        table.add_row(row["name"], str(row["position"]), str(row["head"]), lag)
    console.print(table)


@click.command()
@db_option
@json_option
@click.pass_context
def leases(ctx: click.Context, as_json: bool) -> None:
    """The Runs held under live and lapsed leases, store-wide (ADR-0142). A lapsed one
    that stays means no worker, claim or server's watch recovers it: its worker is gone
    and nothing ends its Run."""
    with open_center(ctx, inline_projections=False) as wc:
        held = wc.maintenance.leases().json()
    if as_json:
        emit_json(held)
        return
    line = f"{held['live']} Runs under live leases, {held['lapsed']} lapsed"
    if held["oldest_lapse"]:
        line += f" (the oldest at {utc(held['oldest_lapse'])}, not yet recovered)"
    console.print(line, markup=False, soft_wrap=True)


@projections.command(name="rebuild")
@db_option
@click.argument("name", required=False)
@json_option
@click.pass_context
def projections_rebuild(ctx: click.Context, name: str | None, as_json: bool) -> None:
    """Replay NAME (default: every read model) from zero and swap it in atomically.
    Ctrl-C or SIGTERM stops it at its next page (exit 130 or 143): the views swapped in
    by then stay rebuilt, the others stay as they were, and its temporary copy is
    removed."""
    rebuilt: list[RebuildReport] = []
    names: list[str] = []
    with stop_signals() as stop:
        try:
            with open_center(ctx) as wc, bar_on_terminal(as_json, transient=False) as bar:
                names = [name] if name is not None else wc.maintenance.projection_names()
                tasks: dict[str, Any] = {}

                def advance(view: str, done: int, total: int) -> None:
                    if bar is not None:
                        if view not in tasks:
                            tasks[view] = bar.add_task(view, total=total)
                        bar.update(tasks[view], completed=done, total=total)
                    stop.check()

                # One view at a time, so that a stop between two says which are done.
                for view in names:
                    stop.check()
                    for report in wc.maintenance.rebuild_projection(view, progress=advance):
                        rebuilt.append(report)
                        if not as_json:
                            _print_rebuilt(report)
            stop.check()
        except Interrupted as stopped:
            if as_json:  # what was rebuilt, as a whole run says it; the status says the stop
                emit_json([r.json() for r in rebuilt])
            done = [r.name for r in rebuilt]
            left = [n for n in names if n not in done]
            interrupted(
                ctx,
                stopped,
                f"projections rebuild stopped: rebuilt {', '.join(done) or 'none'};"
                f" not rebuilt (left as they were): {', '.join(left) or 'none'}",
            )
        if as_json:
            emit_json([r.json() for r in rebuilt])
        stop.exit_if_stopped(ctx)


def _print_rebuilt(r: RebuildReport) -> None:
    for left in (*r.removed_schemas, *r.removed_directories):
        console.print(f"removed {left}, left by a rebuild cut short", highlight=False)
    console.print(
        f"rebuilt {r.name}: {r.events} events in {r.seconds:.2f} s "
        f"({r.events_per_second:,.0f} events/s), position {r.position}",
        highlight=False,
    )


def _positions(positions: dict[str, int] | None) -> str:
    if positions is None:
        return "the views' positions unknown: the database cannot be reached"
    return ", ".join(f"{name} at {position}" for name, position in positions.items())


@projections.command(name="run")
@db_option
@click.option("--once", is_flag=True, help="Catch up to the head once, then exit.")
@click.option(
    "--poll",
    "poll_seconds",
    type=Seconds(min=0.01, max=MAX_POLL),
    default=0.5,
    show_default=True,
    help="SQLite: seconds between polls. PostgreSQL is notified of new events.",
)
@click.option(
    "--report",
    "report_seconds",
    type=Seconds(min=0.1, max=86_400),
    default=None,
    help="Print each read model's position, the head and the lag every S seconds.",
)
@click.option("--json", "as_json", is_flag=True, help="Print what was applied as JSON.")
@click.pass_context
def projections_run(
    ctx: click.Context,
    once: bool,
    poll_seconds: float,
    report_seconds: float | None,
    as_json: bool,
) -> None:
    """Follow the event sequence and keep every read model current (the asynchronous
    lifecycle; pair it with WORKCENTER_INLINE_PROJECTIONS=0 on the writers). On
    PostgreSQL it is notified of new events (LISTEN/NOTIFY). Ctrl-C or
    SIGTERM stops it after the page in hand, and it exits 130 or 143. With --json the
    output is JSON Lines: one object a line, each --report's status, then the summary."""
    from workcenter.projections.runner import ProjectionRunner

    with stop_signals() as stop:
        # Opened without inline projections, or opening would catch the eager views up.
        opening = lambda: open_center(ctx, inline_projections=False)  # noqa: E731
        with open_when_reachable(ctx, opening, stop) as wc:
            runner = ProjectionRunner(wc, poll=poll_seconds)
            if once:
                applied = runner.run_once()
            else:
                if not as_json:
                    how = "notified" if runner.subscribes else f"polled every {poll_seconds} s"
                    console.print(f"following the event sequence ({how}; Ctrl-C stops)")
                _follow(runner, stop, report_seconds, as_json)
                applied = runner.applied
            positions: dict[str, int] | None = None
            try:
                positions = runner.positions()
            except StoreUnavailable:
                # Stopped while the database is away: the summary says so and the stop
                # ends it as one (found by acceptance testing: exit 2, no summary).
                if stop.signum is None:
                    raise
        # --once has no step to stop at: a signal during its catch-up ends it after.
        stopped_by = stop.signum
        summary: dict[str, Any] = {"applied": applied, "positions": positions}
        if stopped_by is not None:
            summary["stopped"] = signal.Signals(stopped_by).name
        if as_json:
            emit_json(summary, line=True)
        else:
            said = f"stopped by {summary['stopped']}: " if stopped_by is not None else ""
            console.print(
                f"{said}applied {applied} events; {_positions(positions)}", highlight=False
            )
        stop.exit_if_stopped(ctx)


def _follow(runner: Any, stop: Stop, report_seconds: float | None, as_json: bool) -> None:
    """Run the runner's thread until a stop signal, reporting the lag as asked."""
    runner.start()
    try:
        next_report = time.monotonic() + (report_seconds or 0)
        while runner.running and not stop.event.wait(0.05):
            if report_seconds is not None and time.monotonic() >= next_report:
                next_report += report_seconds
                _report(runner, as_json)
    finally:
        runner.stop()
    if runner.error is not None:
        raise runner.error


def _report(runner: Any, as_json: bool) -> None:
    try:
        rows = [row.json() for row in runner.status()]
    except StoreUnavailable as error:  # the database away: the runner waits it out
        if as_json:
            emit_json({"status": None, "unavailable": str(error)}, line=True)
        else:
            console.print(f"status unknown: {error}", highlight=False)
        return
    if as_json:
        emit_json({"status": rows}, line=True)
        return
    console.print(
        ", ".join(f"{r['name']} at {r['position']}/{r['head']} (lag {r['lag']})" for r in rows),
        highlight=False,
    )
