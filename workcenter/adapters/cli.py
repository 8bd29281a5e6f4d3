"""The ``workcenter`` command line: the demo, reads for operators, and the worker loop."""

from __future__ import annotations

import json
import sys
from typing import Any
from uuid import UUID

import click
import orjson
from rich.console import Console
from rich.table import Table

from workcenter.adapters import presenters
from workcenter.adapters.demo import run_demo
from workcenter.adapters.worker import load_executor, run_worker
from workcenter.application import Claim, WorkCenter
from workcenter.domain.errors import WorkcenterError

console = Console()
errors = Console(stderr=True)


def _emit_json(data: Any) -> None:
    sys.stdout.write(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode() + "\n")


def _open(ctx: click.Context) -> WorkCenter:
    return WorkCenter.open(ctx.obj["db"])


def _uuid(value: str) -> UUID:
    try:
        return UUID(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a WorkItem id") from None


def _item_table(detail: dict[str, Any]) -> Table:
    item, progress = detail["item"], detail["goal_progress"]
    table = Table(title=f"{item['title']}  [{item['status']}]", show_lines=False)
    table.add_column("field", style="bold")
    table.add_column("value")
    table.add_row("id", item["id"])
    table.add_row("mode", item["mode"])
    table.add_row("version", str(item["version"]))
    table.add_row("contract revision", str(item["contract_revision"]))
    table.add_row("delivery", f"{item['delivery_target']} ({progress['delivery']['status']})")
    for row in progress["criteria"]:
        mark = {"passed": "[green]passed[/]", "failed": "[red]failed[/]"}.get(
            row["status"], "unmet"
        )
        table.add_row("criterion", f"{mark}  {row['criterion']}")
    for action in detail["actions"]:
        table.add_row(
            f"action {action['sequence']}",
            f"{action['type']}: {action['status']} (generation {action['generation']}, "
            f"{len(action['runs'])} runs)",
        )
    return table


@click.group()
@click.option(
    "--db",
    type=click.Path(dir_okay=False),
    default=None,
    help="SQLite file (default: $WORKCENTER_DB or ./workcenter.db).",
)
@click.pass_context
def cli(ctx: click.Context, db: str | None) -> None:
    """Workcenter: a durable, event-sourced work ledger for AI-agent orchestration."""
    ctx.ensure_object(dict)
    ctx.obj["db"] = db


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print the final item as JSON only.")
@click.pass_context
def demo(ctx: click.Context, as_json: bool) -> None:
    """Run a complete scripted scenario on the embedded store."""
    with _open(ctx) as wc:
        say = (lambda _: None) if as_json else (lambda line: console.print(line))
        item_id = run_demo(wc, say=say)
        detail = presenters.detail_json(wc, wc.work_item(item_id))
    if as_json:
        _emit_json(detail)
    else:
        console.print(_item_table(detail))


@cli.command(name="list")
@click.option("--status", default=None, help="Only items in this status.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def list_items(ctx: click.Context, status: str | None, as_json: bool) -> None:
    """List WorkItems."""
    with _open(ctx) as wc:
        rows = wc.list_work_items(status)
    if as_json:
        _emit_json([{**r, "id": str(r["id"])} for r in rows])
        return
    table = Table()
    for column in ("id", "status", "mode", "title"):
        table.add_column(column)
    for r in rows:
        table.add_row(str(r["id"]), r["status"], r["mode"], r["title"])
    console.print(table)


@cli.command()
@click.argument("item_id")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def show(ctx: click.Context, item_id: str, as_json: bool) -> None:
    """Show one WorkItem with its Actions and goal progress."""
    with _open(ctx) as wc:
        detail = presenters.detail_json(wc, wc.work_item(_uuid(item_id)))
    if as_json:
        _emit_json(detail)
    else:
        console.print(_item_table(detail))


@cli.command()
@click.argument("item_id")
@click.option("--at", "at_version", type=int, default=None, help="Also show the state at VERSION.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def history(ctx: click.Context, item_id: str, at_version: int | None, as_json: bool) -> None:
    """The WorkItem's events in order (and its state as it was at --at VERSION)."""
    with _open(ctx) as wc:
        work_item_id = _uuid(item_id)
        events = [presenters.event_json(e) for e in wc.history(work_item_id)]
        state = (
            presenters.item_json(wc.work_item(work_item_id, version=at_version))
            if at_version is not None
            else None
        )
    if at_version is not None:
        events = [e for e in events if e["version"] <= at_version]
    if as_json:
        _emit_json({"events": events, "state": state} if state else {"events": events})
        return
    table = Table()
    for column in ("version", "at", "event", "data"):
        table.add_column(column)
    for e in events:
        table.add_row(str(e["version"]), e["at"], e["type"], json.dumps(e["data"])[:120])
    console.print(table)
    if state:
        console.print_json(data=state)


@cli.command()
@click.option("--executor", "executor_spec", required=True, help="module:callable")
@click.option("--name", default="worker-1", show_default=True, help="Worker name.")
@click.option("--lease", "lease_seconds", default=60.0, show_default=True)
@click.option("--poll", "poll_seconds", default=2.0, show_default=True)
@click.option("--max-runs", type=int, default=None)
@click.option("--exit-when-idle", is_flag=True)
@click.option("--json", "as_json", is_flag=True, help="Print the final stats as JSON.")
@click.pass_context
def worker(
    ctx: click.Context,
    executor_spec: str,
    name: str,
    lease_seconds: float,
    poll_seconds: float,
    max_runs: int | None,
    exit_when_idle: bool,
    as_json: bool,
) -> None:
    """Claim, renew and finish Runs through an executor until stopped."""
    try:
        executor = load_executor(executor_spec)
    except (ImportError, AttributeError, ValueError) as error:
        raise click.BadParameter(str(error), param_hint="--executor") from None

    def on_event(kind: str, claim: Claim, detail: str) -> None:
        if not as_json:
            console.print(f"{kind} {claim.action_type} {claim.action_id} {detail}")

    with _open(ctx) as wc:
        try:
            stats = run_worker(
                wc,
                executor,
                worker=name,
                lease_seconds=lease_seconds,
                poll_seconds=poll_seconds,
                max_runs=max_runs,
                exit_when_idle=exit_when_idle,
                on_event=on_event,
            )
        except KeyboardInterrupt:
            return
    if as_json:
        _emit_json(stats.__dict__)
    else:
        console.print(
            f"claimed {stats.claimed}, finished {stats.finished}, interrupted {stats.interrupted}"
        )


def main() -> None:
    try:
        cli(standalone_mode=True)
    except WorkcenterError as error:
        errors.print(f"[red]{type(error).__name__}[/]: {error}")
        sys.exit(2)
