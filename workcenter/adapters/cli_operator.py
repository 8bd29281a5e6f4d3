"""Operator verbs of the ``workcenter`` command line: audit (the trail, and the proof of
the history), progress; the read models' are in ``cli_projections``, a store's copies
(``copy``, ``rekey``) in ``cli_store_copy``."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import click
import orjson
from rich.table import Table
from rich.text import Text

from workcenter.adapters import audit_bundle, cli_tables, presenters
from workcenter.adapters.cli_common import (
    Count,
    bar_on_terminal,
    clip,
    console,
    db_option,
    emit_json,
    json_option,
    open_center,
    resolve_id,
    work_item_id,
)
from workcenter.adapters.cli_steer import action_id as action_named
from workcenter.adapters.cli_stop import Interrupted, Steps, interrupted, stop_signals
from workcenter.adapters.terminal import text
from workcenter.application import WorkCenter
from workcenter.domain import bounds
from workcenter.domain.action import ActionState
from workcenter.domain.goal_progress import GoalProgress
from workcenter.domain.model import NOT_THIS_STREAMS
from workcenter.domain.work_item import WorkItemState
from workcenter.projections.audit import AuditRow, explain_progress
from workcenter.projections.sanitize import sanitize_event_payload, sanitize_record

# --- audit and progress (issue 4) ---------------------------------------------


TRAIL = "trail"


class AuditGroup(click.Group):
    """``audit ID ...`` shows an item's trail as it always has; ``audit verify`` and
    ``audit anchor`` prove the history. An id is hex, so it never names a subcommand."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not args or (args[0] not in self.commands and args[0] not in ctx.help_option_names):
            args = [TRAIL, *args]
        return super().parse_args(ctx, args)


@click.group(cls=AuditGroup)
def audit() -> None:
    """The audit: `audit ID [options]` prints a WorkItem's trail (see `audit trail -h`);
    `audit verify` and `audit anchor` prove the history has not been changed;
    `audit decisions` explains and replays the Coordinator's decisions, and
    `audit export` writes a bundle that `audit verify --bundle` checks offline."""


SUMMARY_CHARS = 200


def _summary(event_type: str, payload: dict[str, Any], raw: bool) -> str:
    shown = payload if raw else sanitize_event_payload(event_type, payload)
    return orjson.dumps(shown).decode()


def _audit_row_json(row: AuditRow, raw: bool) -> dict[str, Any]:
    data = row.json()
    payload = data.pop("payload")
    data["summary"] = _summary(row.type, payload, raw)
    if raw:
        data["payload"] = payload
    return data


def _state(data: dict[str, Any], schema: type[Any], raw: bool) -> Any:
    """A state shown with ``--at``: masked like the rows, unless ``--raw``."""
    return data if raw else sanitize_record(data, schema)


def _at_time(value: str | None) -> datetime | None:
    if value is None:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not an ISO time", param_hint="--at-time") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _run_id(wc: WorkCenter, item: WorkItemState, value: str) -> UUID:
    return resolve_id(
        value,
        "Run",
        lambda: (run.id for action in wc.actions(item).values() for run in action.runs),
    )


@audit.command(name=TRAIL)
@db_option
@click.argument("item_id")
@json_option
@click.option("--at", "at_version", type=int, default=None, help="State at this WorkItem version.")
@click.option("--at-time", default=None, help="State at this ISO time (UTC if no offset).")
@click.option(
    "--action",
    "action_id",
    default=None,
    help="Only this Action's rows: its number as `show` prints it, or its id or a prefix.",
)
@click.option("--run", "run_id", default=None, help="Only this Run's rows.")
@click.option("--type", "event_type", default=None, help="Only events of this type.")
@click.option("--limit", type=Count(min=1, max=bounds.INTEGER), default=500, show_default=True)
@click.option("--raw", is_flag=True, help="Payloads as stored, not sanitised.")
@click.pass_context
def audit_trail(
    ctx: click.Context,
    item_id: str,
    as_json: bool,
    at_version: int | None,
    at_time: str | None,
    action_id: str | None,
    run_id: str | None,
    event_type: str | None,
    limit: int,
    raw: bool,
) -> None:
    """Every event of a WorkItem, its Actions and Runs and its ledger, in write order.

    With --at or --at-time, also the state of the item and its Actions at that point.
    """
    if at_version is not None and at_time is not None:
        raise click.UsageError("give --at or --at-time, not both")
    moment = _at_time(at_time)
    with open_center(ctx) as wc:
        item = wc.work_item(work_item_id(wc, item_id))
        state: dict[str, Any] | None = None
        until: int | None = None
        if at_version is not None or moment is not None:
            until, item_then, actions = wc.state_at(item.id, version=at_version, at=moment)
            ordered = sorted(actions.values(), key=lambda a: (a.sequence, a.id))
            state = {
                "position": until,
                "item": _state(presenters.item_json(item_then), WorkItemState, raw),
                "actions": [_state(presenters.action_json(a), ActionState, raw) for a in ordered],
            }
        rows = wc.audit(
            item.id,
            limit=min(limit + 1, bounds.INTEGER),  # one more: whether older ones were left
            action_id=action_named(item, action_id) if action_id is not None else None,
            run_id=_run_id(wc, item, run_id) if run_id is not None else None,
            type=event_type,
            until=until,
        )
    if len(rows) > limit:
        rows = rows[-limit:]
        # Said, as `list` says it: the newest rows alone read as the whole history (found
        # by acceptance testing, ADR-0136).
        click.echo(
            f"showing the newest {limit} events; there are older ones (--limit N, or narrow"
            " with --action, --run, --type or --at)",
            err=True,
        )
    events = [_audit_row_json(row, raw) for row in rows]
    if as_json:
        emit_json({"events": events, "state": state} if state else {"events": events})
        return
    if not events:
        # Said, not silent: an empty answer to a mistyped --type looked like no output.
        console.print("no event of the item matches these filters", highlight=False)
    # One event per two lines, so the history reads at any terminal width.
    for e in events:
        by = e["actor"]
        if e["worker"]:
            by += f" {e['worker']}@{(e['boot_id'] or '')[:8]}"
        elif e["actor_id"] != e["actor"]:
            by += f" {e['actor_id']}"
        if e["caused_by"]:
            by += f" (caused by {e['caused_by']})"
        ids = " ".join(
            part
            for part in (
                f"action {e['action_id'][:8]}" if e["action_id"] else "",
                f"run {e['run_id'][:8]}" if e["run_id"] else "",
                f"gen {e['generation']}" if e["generation"] is not None else "",
            )
            if part
        )
        console.print(
            Text.assemble(
                text(f"{e['position']:>5}", "bold"),
                text(f" {cli_tables.utc(e['time'])}  {e['aggregate']} v{e['version']}  "),
                text(e["type"], "cyan"),
                text(f"  by {by}  {ids}"),
            ),
            highlight=False,
        )
        console.print(text(f"      {clip(e['summary'], SUMMARY_CHARS)}"), highlight=False)
    if state:
        emit_json(state)


# --- the proof of the history (issue 12, ADR-0028) ------------------------------

HISTORY_BROKEN = 1  # exit status of a verify that found a broken link (2 is a refusal)


@audit.command(name="verify")
@db_option
@click.argument("item_id", required=False)
@json_option
@click.option(
    "--anchor",
    "anchor",
    default=None,
    metavar="DIGEST@POSITION",
    help="An anchor from `audit anchor`: also prove nothing up to it changed or was cut.",
)
@click.option(
    "--bundle",
    default=None,
    type=click.Path(dir_okay=False),
    help="Check an audit bundle from `audit export` instead, without the store.",
)
@click.pass_context
def audit_verify(
    ctx: click.Context, item_id: str | None, as_json: bool, anchor: str | None, bundle: str | None
) -> None:
    """Walk the hash chain over every event (or over one WorkItem's streams) and report
    the first broken link; exit status 1 when the history was changed. With --bundle,
    check the bundle's links and anchor and replay its decisions, with no store."""
    if bundle is not None:
        _verify_bundle(ctx, bundle, item_id, anchor, as_json)
        return

    with stop_signals() as stop:
        steps = Steps(stop)
        try:
            with open_center(ctx, inline_projections=False) as wc, bar_on_terminal(as_json) as bar:
                scope = work_item_id(wc, item_id) if item_id is not None else None
                progress = steps.shown_on(bar, VERIFY_PHASES["events"]).by_phase(VERIFY_PHASES)
                verdict = wc.maintenance.verify_history(scope, anchor=anchor, progress=progress)
            if verdict.ok:  # a break found is said, whatever stop came after it
                stop.check()
        except Interrupted as stopped:
            interrupted(ctx, stopped, _verify_stopped(steps))
        if as_json:
            emit_json(verdict.json())
        else:
            _print_verdict(verdict.json())
        if verdict.linked_on_open:
            # Links an open made for events that had none (a chain deleted, or events
            # written with it off) prove only what was stored then: said whichever
            # process opened the store (ADR-0134, ADR-0137).
            opened = sorted({late.linked_at for late in verdict.linked_on_open})
            when = opened[0] if len(opened) == 1 else f"{opened[0]} to {opened[-1]}"
            click.echo(
                f"note: {verdict.chained_on_open:,} events of the store had no link in the hash"
                f" chain and were chained when it was opened ({when}; written with the chain"
                " off, or their links deleted): the walk proves them as they were stored"
                " then; an anchor kept from before shows whether they were changed",
                err=True,
            )
        if not verdict.ok:
            ctx.exit(HISTORY_BROKEN)
        stop.exit_if_stopped(ctx)


VERIFY_PHASES = {"events": "verifying", "snapshots": "checking snapshots"}


def _verify_stopped(steps: Steps) -> str:
    unsaid = "the history is neither verified nor found broken"
    if steps.phase == "snapshots":
        # The walk was whole (a broken one takes no stop in the check): only the check
        # of the snapshots against their events was cut.
        return (
            f"audit verify stopped in its snapshot check, {steps.done:,} of {steps.total:,}"
            f" snapshotted streams checked: every event was verified; {unsaid}"
        )
    where = f" at position {steps.done:,} of {steps.total:,}" if steps.total else ""
    return f"audit verify stopped{where}: {unsaid}"


def _verify_bundle(
    ctx: click.Context, path: str, item_id: str | None, anchor: str | None, as_json: bool
) -> None:
    if item_id is not None or anchor is not None:
        raise click.UsageError("--bundle takes no ID and no --anchor: the bundle holds both")
    verdict = audit_bundle.verify(path)
    if as_json:
        emit_json(verdict.json())
    else:
        _print_verdict(verdict.links.json())
        if verdict.replay is not None:
            replay = verdict.replay
            shown = f"{len(replay.results)} decisions replayed: {len(replay.differing)} differ"
            console.print(text(shown, "green" if replay.same else "red"), highlight=False)
            for _, replayed in replay.differing:
                for difference in replayed.differences:
                    console.print(text(f"      {clip(difference, 300)}"), highlight=False)
        if verdict.note:
            console.print(text(verdict.note, "red"), highlight=False)
    if not verdict.ok:
        ctx.exit(HISTORY_BROKEN)


def _print_verdict(data: dict[str, Any]) -> None:
    _print_chain(data)
    for damaged in data.get("damaged_snapshots", ()):
        # A warning, not a break: the snapshot is a cache that every load now goes past.
        said = (
            f"warning: the snapshot of stream {damaged['stream']} at version"
            f" {damaged['version']} cannot be decoded ({damaged['reason']}): loads ignore"
            " it and replay the stream's events"
        )
        console.print(text(said, "yellow"), highlight=False)
    for edited in data.get("mismatched_snapshots", ()):
        where = f"the snapshot of stream {edited['stream']} at version {edited['version']}"
        if edited["reason"] == NOT_THIS_STREAMS:
            # Loads go past it (ADR-0103), but someone put it there.
            said = (
                f"BROKEN: {where} is not a snapshot of this stream at this version (a row"
                " moved, copied or put in the snapshots table by hand): loads ignore it and"
                " replay the stream's events. Remove it"
                ' (docs/deployment.md, "A snapshot that is not its events\' fold")'
            )
        else:
            said = (
                f"BROKEN: {where} is not what the stream's events fold to: loads start from"
                " it, so commands act on a state the history does not hold. Remove the"
                " stream's snapshots (docs/deployment.md, \"A snapshot that is not its"
                " events' fold\") and loads replay its events"
            )
        console.print(text(said, "red"), highlight=False)


def _print_chain(data: dict[str, Any]) -> None:
    scope = "the store" if data["scope"] == "store" else f"WorkItem {data['scope']}"
    broken, last = data["broken"], data["verified_to"]
    if broken is None and data.get("mismatched_snapshots"):
        # Not "verified": the events are, but loads start from snapshots they do not hold.
        console.print(
            text(f"events of {scope} verified: {data['events']} events; its snapshots not:"),
            highlight=False,
        )
        return
    if broken is None:
        console.print(
            text(f"history of {scope} verified: {data['events']} events", "green"),
            highlight=False,
        )
        if last is not None and data["scope"] == "store":
            console.print(text(f"head {last['anchor']}"), highlight=False)
        if data["anchor"]:
            console.print(text(f"matches the anchor {data['anchor']}"), highlight=False)
        return
    # A cut tail is found after the last event, and an anchor's mismatch after the
    # walk: every event was verified, and the break is where the history ends.
    at_the_end = broken["kind"] in ("truncated", "added", "anchor")
    where = (
        f"after position {broken['previous_position']}"
        if broken["kind"] in ("truncated", "added") and broken["previous_position"] is not None
        else f"at position {broken['position']}"
    )
    console.print(
        text(f"history of {scope} BROKEN {where} ({broken['kind']})", "red"), highlight=False
    )
    console.print(text(broken["message"]), highlight=False)
    said = f"{data['events']} events verified" + ("" if at_the_end else " before it")
    console.print(text(said), highlight=False)


@audit.command(name="anchor")
@db_option
@json_option
@click.pass_context
def audit_anchor(ctx: click.Context, as_json: bool) -> None:
    """Print the head of the hash chain as DIGEST@POSITION, to keep outside the store
    (a ticket, a log, a signed commit) and give to `audit verify --anchor` later."""
    with open_center(ctx, inline_projections=False) as wc:
        anchor = wc.maintenance.history_anchor()
    if as_json:
        emit_json(
            {"anchor": str(anchor), "digest": anchor.digest.hex(), "position": anchor.position}
            if anchor
            else {"anchor": None, "digest": None, "position": None}
        )
    elif anchor is None:
        console.print("no events yet: nothing to anchor", highlight=False)
    else:
        # Alone on its line, so a script can keep it as it is printed.
        console.print(str(anchor), highlight=False)


@click.command()
@db_option
@click.argument("item_id")
@json_option
@click.pass_context
def progress(ctx: click.Context, item_id: str, as_json: bool) -> None:
    """Goal progress, and which Runs were proof, stale or conflicting.

    Criteria, blocker reasons and Action types pass the same masking as audit
    summaries: a blocker reason may be a Run's error."""
    with open_center(ctx) as wc:
        item = wc.work_item(work_item_id(wc, item_id))
        goal = wc.goal_progress(item.id)
        explanation = explain_progress(item, wc.actions(item), goal)
    shown = sanitize_record(presenters.progress_json(goal), GoalProgress)
    data = {"goal_progress": shown, "explanation": sanitize_record(explanation)}
    if as_json:
        emit_json(data)
        return
    _print_progress(sanitize_record(item.title), data)


def _run_ids(run_ids: list[str]) -> str:
    return ", ".join(run_id[:8] for run_id in run_ids)


def _print_progress(title: str, data: dict[str, Any]) -> None:
    goal, explanation = data["goal_progress"], data["explanation"]
    table = Table(
        title=text(f"Goal progress of {title} (contract revision {goal['contract_revision']})")
    )
    table.add_column("criterion")
    table.add_column("status")
    table.add_column("runs")
    for row in goal["criteria"]:
        run_ids = row["evidence_run_ids"] or row["conflicting_run_ids"]
        table.add_row(text(row["criterion"]), text(row["status"]), _run_ids(run_ids))
    delivery = goal["delivery"]
    table.add_row(
        text(f"delivery ({delivery['target'] or cli_tables.NO_TARGET})"),
        text(cli_tables.delivery_status(delivery["target"], delivery["status"])),
        _run_ids(delivery["evidence_run_ids"]),
    )
    for blocker in goal["blockers"]:
        table.add_row(
            f"blocker {blocker['action_id'][:8]}",
            text(blocker["status"]),
            text(clip(blocker["reason"], 80)),
        )
    console.print(table)
    run_table = Table(title="Runs")
    for column in ("action", "run", "status", "generation", "revision", "roles"):
        run_table.add_column(column)
    for run in explanation["runs"]:
        roles = ", ".join(run["roles"])
        if run["conflicts_with"]:
            roles += f" (fails: {'; '.join(run['conflicts_with'])})"
        run_table.add_row(
            text(f"{run['sequence']} {run['action_type']}"),
            run["run_id"][:8],
            text(run["status"]),
            str(run["generation"]),
            str(run["contract_revision"]),
            text(roles),
        )
    console.print(run_table)
