"""The decisions' audit on the command line (ADR-0060, ADR-0061): `audit decisions ID`
(provenance, or `--replay`) and `audit export ID --to FILE`; `audit verify --bundle`
is in ``cli_operator``."""

from __future__ import annotations

from typing import Any

import click
from rich.text import Text

from workcenter.adapters import audit_bundle
from workcenter.adapters.cli_common import (
    bar_on_terminal,
    clip,
    console,
    db_option,
    emit_json,
    json_option,
    open_center,
    work_item_id,
)
from workcenter.adapters.cli_stop import Interrupted, Steps, interrupted, stop_signals
from workcenter.adapters.terminal import text
from workcenter.service_layer.queries.decision_audit import ReplayReport

DIFFERS = 1  # exit status of a replay with a turn that differs (2 is a refusal)


@click.command(name="decisions")
@db_option
@click.argument("item_id", required=False)
@json_option
@click.option(
    "--replay",
    is_flag=True,
    help="Judge every stored reply again with today's rules; exit 1 if any differs.",
)
@click.pass_context
def decisions(ctx: click.Context, item_id: str | None, as_json: bool, replay: bool) -> None:
    """Each Coordinator turn of a WorkItem: what woke it, the versions its request was
    built from, its attempts and their cost, the decision, the verdict and the events
    it caused. With --replay (and no ID: every WorkItem), whether today's rules judge
    each stored reply the same on the state it was judged on."""
    if not replay:
        if item_id is None:
            raise click.UsageError("give a WorkItem ID (only --replay runs over every item)")
        with open_center(ctx, inline_projections=False) as wc:
            item = work_item_id(wc, item_id)
            turns = wc.maintenance.decisions(item)
        if as_json:
            emit_json({"work_item_id": str(item), "turns": turns})
        else:
            _print_turns(turns)
        return
    with stop_signals() as stop:
        steps = Steps(stop)
        try:
            with open_center(ctx, inline_projections=False) as wc, bar_on_terminal(as_json) as bar:
                scope = work_item_id(wc, item_id) if item_id is not None else None
                report = wc.maintenance.replay_decisions(
                    scope, progress=steps.shown_on(bar, "replaying")
                )
            stop.check()
        except Interrupted as stopped:
            where = f" after {steps.done:,} of {steps.total:,} items" if steps.total else ""
            interrupted(
                ctx,
                stopped,
                f"audit decisions --replay stopped{where}: no verdict (neither all same nor"
                " differing)",
            )
        if as_json:
            emit_json(report.json())
        else:
            _print_replay(report)
        if not report.same:
            ctx.exit(DIFFERS)
        stop.exit_if_stopped(ctx)


def _print_turns(turns: list[dict[str, Any]]) -> None:
    if not turns:
        console.print("no Coordinator turns", highlight=False)
    for turn in turns:
        wake, verdict, request = turn["wake"], turn["verdict"], turn["request"]
        console.print(
            Text.assemble(
                text(f"{turn['position']:>5} ", "bold"),
                text(f"turn {turn['turn_id'][:8]}  woken by {wake['kind']}  "),
                text(verdict["kind"], "green" if verdict["kind"] == "applied" else "red"),
                text(f"  {clip(verdict['reason'], 120)}" if verdict["reason"] else ""),
            ),
            highlight=False,
        )
        if wake["user_message"]:
            console.print(text(f"      user: {clip(wake['user_message'], 200)}"), highlight=False)
        console.print(
            text(
                f"      request {str(request['hash'])[:12]} {request['size']} bytes from item "
                f"v{request.get('item_version')} ledger v{request.get('ledger_version')} "
                f"plan of {len(request.get('plan') or {})}"
            ),
            highlight=False,
        )
        for attempt in turn["attempts"]:
            console.print(
                text(
                    f"      attempt {attempt['attempt']}: {attempt['status']}, "
                    f"{attempt['requests']} request(s), {attempt['charged']} tokens charged, "
                    f"response {str(attempt['response_hash'])[:12]}"
                    + (f", {clip(attempt['error'], 120)}" if attempt["error"] else "")
                ),
                highlight=False,
            )
        decision = turn["decision"]
        if decision:
            console.print(
                text(f"      decision {decision['kind']}: {clip(str(decision['reason']), 160)}"),
                highlight=False,
            )
        if turn["effects"]:
            positions = ", ".join(f"{e['position']} {e['type']}" for e in turn["effects"])
            console.print(text(f"      caused {positions}"), highlight=False)


def _print_replay(report: ReplayReport) -> None:
    for item_id, replayed in report.results:
        line = f"{str(item_id)[:8]} turn {str(replayed.turn_id)[:8]} attempt {replayed.attempt}"
        if replayed.same:
            console.print(text(f"{line}: same ({replayed.recorded})"), highlight=False)
            continue
        console.print(text(f"{line}: differs ({replayed.cause} changed)", "red"), highlight=False)
        for difference in replayed.differences:
            console.print(text(f"      {clip(difference, 300)}"), highlight=False)
    summary = (
        f"{len(report.results)} decisions of {report.items} items replayed from "
        f"{report.events} events: {len(report.differing)} differ"
    )
    console.print(text(summary, "green" if report.same else "red"), highlight=False)


@click.command(name="export")
@db_option
@click.argument("item_id")
@click.option("--to", "to", required=True, type=click.Path(dir_okay=False))
@click.option("--force", is_flag=True, help="Replace a file already at --to.")
@json_option
@click.pass_context
def export(ctx: click.Context, item_id: str, to: str, force: bool, as_json: bool) -> None:
    """Write one WorkItem's audit bundle: its events as stored, their links in the hash
    chain and the store's anchor, as JSON Lines that `audit verify --bundle` checks
    without the store. A file already at --to is replaced only with --force."""
    with open_center(ctx, inline_projections=False) as wc:
        scope = work_item_id(wc, item_id)
        count = audit_bundle.export(wc, scope, to, replace=force)
    if as_json:
        emit_json({"work_item_id": str(scope), "bundle": to, "events": count})
    else:
        console.print(f"{count} events of WorkItem {scope} written to {to}", highlight=False)
