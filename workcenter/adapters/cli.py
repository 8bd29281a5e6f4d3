"""The ``workcenter`` command line: the demo, reads for operators, resume and the worker loop.

A typed refusal (any ``WorkcenterError``) ends every verb the same way: one
line ``ErrorName: message`` on stderr and exit status 2 (75 when the store was held
up or out of reach, worth trying again: ``cli_outcome``); nothing was written.
"""

from __future__ import annotations

import gc
import json
import os
import sqlite3
import sys
from typing import Any, get_args
from uuid import UUID

import click
from eventsourcing.persistence import PersistenceError
from rich.table import Table

from workcenter.adapters import (
    cli_coordinator,
    cli_next,
    cli_outcome,
    cli_tables,
    event_log,
    presenters,
)
from workcenter.adapters.cli_common import (
    MAX_POLL,
    Count,
    Seconds,
    clip,
    command_hint,
    console,
    db_option,
    json_option,
    work_item_id,
)
from workcenter.adapters.cli_common import emit_json as _emit_json
from workcenter.adapters.cli_common import open_center as _open
from workcenter.adapters.cli_stop import Stop, open_when_reachable
from workcenter.adapters.demo import ScriptedLlm, run_demo
from workcenter.adapters.persistence import StoreUnavailable
from workcenter.adapters.providers.scripted_coordinator import scripted_coordinator
from workcenter.adapters.terminal import safe, text
from workcenter.adapters.worker import default_name, load_executor, run_worker
from workcenter.adapters.worker_run import StopSignals, WorkerStats
from workcenter.application import Claim
from workcenter.domain import bounds
from workcenter.domain import work_item as wi
from workcenter.domain.actor import Actor
from workcenter.domain.errors import InvalidInput, WorkcenterError
from workcenter.domain.work_item import WorkItemStatus
from workcenter.projections.sanitize import (
    sanitize_event_payload,
    sanitize_personal,
    sanitize_record,
)
from workcenter.service_layer.handlers.coordinator_step import StepResult


class WorkcenterGroup(click.Group):
    """Turns a typed refusal raised by any verb into one line on stderr and its exit
    status (``cli_outcome``), an output that cannot be written into one line too, and a
    Ctrl-C that no verb took itself into one line and exit 130 (click would say
    "Aborted!" and exit 1, its status for "declined", ADR-0106)."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            result = super().invoke(ctx)
            sys.stdout.flush()  # a full disk is said here, not by Python's flush at exit
            return result
        except KeyboardInterrupt:
            verb = (
                f"workcenter {ctx.invoked_subcommand}" if ctx.invoked_subcommand else "workcenter"
            )
            click.echo(
                f"interrupted by SIGINT: {verb} stopped before it finished"
                " (a change it was making is recorded whole or not at all)",
                err=True,
            )
            ctx.exit(130)  # 128 + SIGINT, as the long verbs exit (ADR-0100)
        except WorkcenterError as error:
            ctx.exit(cli_outcome.failed(error))
        except (PersistenceError, sqlite3.Error) as error:  # the store failed under a verb
            ctx.exit(cli_outcome.store_failed(error))
        except OSError as error:
            ctx.exit(cli_outcome.output_failed(error))
        except UnicodeEncodeError as error:
            ctx.exit(cli_outcome.unencodable(error))


@click.group(cls=WorkcenterGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="workcenter", prog_name="workcenter")
@db_option
@click.pass_context
def cli(ctx: click.Context) -> None:
    """Workcenter: a durable, event-sourced work ledger for AI-agent orchestration.

    --db may be given before or after the verb.
    """
    ctx.ensure_object(dict)


def _budget_line(budget: dict[str, Any]) -> str:
    usage, limits = budget["usage"], budget["limits"]
    return (
        f"{usage['requests']} of {limits['max_requests']} LLM requests, "
        f"{usage['charged_tokens']} of {limits['max_tokens']} tokens charged"
    )


def _extend_hint(ctx: click.Context, budget: dict[str, Any]) -> str:
    """What a user runs after a budget stop, before the demo does it for them."""
    extend = command_hint(
        ctx,
        "budget",
        "extend",
        budget["work_item_id"],
        "--expected-version",
        str(budget["ledger_version"]),
        "--tokens",
        "N",
    )
    return (
        f"a user raises the limit with `{extend}`, then runs the `workcenter resume` "
        "command it prints, and tells the Coordinator what to do with `workcenter message`"
    )


@cli.command()
@db_option
@click.option("--json", "as_json", is_flag=True, help="Print the final item as JSON only.")
@click.option(
    "--max-tokens",
    # Bounded here, so a refused budget is refused before the store is made.
    type=Count(min=1, max=bounds.INTEGER),
    default=None,
    help="Create the item with this token budget (default: the ledger's default).",
)
@click.pass_context
def demo(ctx: click.Context, as_json: bool, max_tokens: int | None) -> None:
    """Run a complete scripted scenario on the embedded store.

    A dynamic WorkItem, planned, steered and completed by the Coordinator (a scripted
    model) while a worker runs its Actions. A budget too small for the script stops
    the item (no request past it is sent); the demo then raises the budget, resumes
    the item and answers the Coordinator, which plans again.
    """
    llm, coordinator = ScriptedLlm(), scripted_coordinator()
    with _open(ctx, create=True, in_memory=True) as wc:
        limits = {"max_tokens": max_tokens} if max_tokens is not None else None

        def say(line: str) -> None:
            if not as_json:
                console.print(text(line), soft_wrap=True)

        def on_stop(item_id: UUID) -> None:
            say(_extend_hint(ctx, presenters.budget_json(wc, item_id)))

        item_id = run_demo(
            wc, say=say, llm=llm, coordinator=coordinator, limits=limits, on_stop=on_stop
        )
        detail = presenters.detail_json(wc, wc.work_item(item_id))
        budget = presenters.budget_json(wc, item_id)
        talk = cli_coordinator.conversation_json(wc.conversation(item_id))
        now = wc.clock.now()
    if as_json:
        _emit_json(
            detail
            | {
                "budget": budget,
                "conversation": talk,
                "provider_calls": llm.calls,
                "coordinator_calls": len(coordinator.requests),
            }
        )
        return
    console.print(cli_tables.item_table(detail, now))
    console.print(f"budget: {_budget_line(budget)}", soft_wrap=True)


@cli.command()
@db_option
@click.option("--json", "as_json", is_flag=True, help="Print whether it was made, as JSON.")
@click.pass_context
def init(ctx: click.Context, as_json: bool) -> None:
    """Make the store at --db (default: $WORKCENTER_DB or ./workcenter.db) if there is none.

    Every other verb but demo (and serve --create) refuses a store that does not exist,
    so a deployment runs this once before its workers and runner. On a store that exists
    it changes nothing.
    """
    try:
        with _open(ctx) as wc:
            created, events = False, event_log.events_held(wc.store)
    except StoreUnavailable:
        with _open(ctx, create=True) as wc:
            created, events = True, event_log.events_held(wc.store)
    if as_json:
        _emit_json({"created": created, "events": events})
        return
    console.print("made the store" if created else f"the store exists ({events} events)")


LIST_LIMIT = 1000  # items `list` shows unless told
NARROW = 80  # columns under which `list` shows ids by their first SHORT_ID characters
SHORT_ID = 8


@cli.command(name="list")
@db_option
@click.option(
    "--status", type=click.Choice(get_args(WorkItemStatus)), help="Only items in this status."
)
@click.option(
    "--limit",
    type=Count(min=1, max=bounds.INTEGER),
    default=LIST_LIMIT,
    show_default=True,
    help="Show at most this many (a line on stderr says when there are more).",
)
@click.option(
    "--newest", is_flag=True, help="Newest first: the items made last, on a store of many."
)
@json_option
@click.pass_context
def list_items(
    ctx: click.Context, status: str | None, limit: int, newest: bool, as_json: bool
) -> None:
    """List WorkItems, oldest first (or --newest first)."""
    with _open(ctx) as wc:
        rows = wc.list_work_items(status, limit=min(limit + 1, bounds.INTEGER), newest=newest)
    if len(rows) > limit:
        rows = rows[:limit]
        which = "newest" if newest else "first"
        click.echo(f"showing the {which} {limit} items; there are more (--limit N)", err=True)
    if as_json:
        # Titles masked as on the table, `show --json` and the HTTP list (ADR-0136).
        _emit_json(
            [
                {
                    **r,
                    "id": str(r["id"]),
                    "title": sanitize_personal(r["title"]),
                    # As every other verb's JSON gives a time (found by acceptance
                    # testing, ADR-0140: seconds since the epoch, here only).
                    "created_at": presenters.utc_json(r["created_at"]),
                    "updated_at": presenters.utc_json(r["updated_at"]),
                }
                for r in rows
            ]
        )
        return
    # On a narrow terminal a full id left the other columns no room at all: its first
    # characters, which every verb takes as a prefix (found by acceptance testing,
    # ADR-0145; a pipe still gets the whole id).
    short = console.on_a_terminal and console.width < NARROW
    table = Table()
    table.add_column("id", no_wrap=True, min_width=SHORT_ID if short else 36)
    for column in ("status", "mode", "title"):
        table.add_column(column)
    for r in rows:
        shown = str(r["id"])[:SHORT_ID] if short else str(r["id"])
        table.add_row(
            shown, text(r["status"]), text(r["mode"]), text(sanitize_personal(r["title"]))
        )
    console.print(table)


@cli.command()
@db_option
@click.argument("item_id")
@click.option("--json", "as_json", is_flag=True, help="Print the item's browser detail DTO.")
@click.option(
    "--state",
    is_flag=True,
    help="With --json: print the aggregate states (item, actions, goal_progress) instead.",
)
@click.pass_context
def show(ctx: click.Context, item_id: str, as_json: bool, state: bool) -> None:
    """Show one WorkItem with its Actions and goal progress (--json: its detail DTO)."""
    if state and not as_json:
        raise click.UsageError("--state prints JSON: give --json too")
    with _open(ctx) as wc:
        if as_json and not state:
            dto = wc.detail(work_item_id(wc, item_id))
        else:
            item = wc.work_item(work_item_id(wc, item_id))
            detail = presenters.detail_json(wc, item)
            step = None if as_json else cli_next.read(wc, item)
            now = wc.clock.now()
    if as_json:
        _emit_json(detail if state else dto)
    else:
        console.print(cli_tables.item_table(detail, now))
        assert step is not None
        cli_next.say(ctx, step)


@cli.command()
@db_option
@click.argument("item_id")
@click.option("--at", "at_version", type=int, default=None, help="Also show the state at VERSION.")
@click.option("--raw", is_flag=True, help="Payloads as stored, not sanitised.")
@json_option
@click.pass_context
def history(
    ctx: click.Context, item_id: str, at_version: int | None, raw: bool, as_json: bool
) -> None:
    """The WorkItem's events in order (and its state as it was at --at VERSION), secrets,
    tokens and home paths masked as in the audit unless --raw."""
    with _open(ctx) as wc:
        item = wc.work_item(work_item_id(wc, item_id))
        if at_version is not None and not 1 <= at_version <= item.version:
            raise InvalidInput(
                f"WorkItem {item.id} has no version {at_version} "
                f"(its versions are 1 to {item.version})"
            )
        events = [presenters.event_json(e) for e in wc.history(item.id)]
        state = (
            presenters.item_json(wc.work_item(item.id, version=at_version))
            if at_version is not None
            else None
        )
    if not raw:
        # As the audit shows them: history is as often pasted into a ticket (found by
        # acceptance testing: it printed what `audit` masks).
        events = [e | {"data": sanitize_event_payload(e["type"], e["data"])} for e in events]
        state = sanitize_record(state, wi.WorkItemState) if state is not None else None
    if at_version is not None:
        events = [e for e in events if e["version"] <= at_version]
    if as_json:
        _emit_json({"events": events, "state": state} if state else {"events": events})
        return
    table = Table()
    for column in ("version", "at", "event", "by", "data"):
        table.add_column(column)
    for e in events:
        # The actor gets its own column so that it does not crowd the payload out.
        data = dict(e["data"])
        by = Actor.model_validate(data.pop("actor")) if "actor" in data else None
        table.add_row(
            str(e["version"]),
            text(e["at"]),
            text(e["type"]),
            text(str(by or "")),
            text(clip(json.dumps(data, ensure_ascii=False), 120)),
        )
    console.print(table)
    if state:
        _emit_json(state)


@cli.command()
@db_option
@click.option("--executor", "executor_spec", default=None, help="module:callable")
@click.option(
    "--name",
    default=None,
    help="Worker name (default: worker-HOST-PID, unique to this process).",
)
@click.option(
    "--lease",
    "lease_seconds",
    type=Seconds(min=1, max=86_400),
    default=60.0,
    show_default=True,
    help="Lease length in seconds (1 to 86400).",
)
@click.option(
    "--poll", "poll_seconds", type=Seconds(min=0.01, max=MAX_POLL), default=2.0, show_default=True
)
@click.option("--max-runs", type=Count(min=1), default=None)
@click.option(
    "--runs-at-once",
    type=Count(min=1, max=bounds.RUNS_AT_ONCE),
    default=1,
    show_default=True,
    help="Runs executed at once, each by a thread of this process: the executor is"
    " called from that many threads at once.",
)
@click.option("--exit-when-idle", is_flag=True)
@click.option(
    "--drain",
    is_flag=True,
    help="On the first Ctrl-C or SIGTERM let every Run in hand finish, not only a"
    " delivery (no attempt spent); a second interrupts them.",
)
@click.option("--no-coordinator", is_flag=True, help="Do not run Coordinator steps.")
@click.option("--no-runs", is_flag=True, help="Run only Coordinator steps, no Runs.")
@cli_coordinator.provider_option
@click.option("--json", "as_json", is_flag=True, help="Print the final stats as JSON.")
@click.pass_context
def worker(
    ctx: click.Context,
    executor_spec: str | None,
    name: str | None,
    lease_seconds: float,
    poll_seconds: float,
    max_runs: int | None,
    runs_at_once: int,
    exit_when_idle: bool,
    drain: bool,
    no_coordinator: bool,
    no_runs: bool,
    provider_name: str | None,
    as_json: bool,
) -> None:
    """Claim, renew and finish Runs through an executor, and run the due Coordinator
    steps beside them, until stopped.

    Ctrl-C or SIGTERM interrupts the Runs in hand (each is retried, and has spent one
    of its Action's attempts; an executor working in a thread of its own is left to end
    with the process, its report unrecorded), prints the summary and exits 130 or 143.
    A delivery in hand (a deliver Action, never run again by itself) is let finish and
    recorded first, claiming nothing new; a second Ctrl-C or SIGTERM interrupts it, and
    the deliver Action fails: its item needs attention until `workcenter retry`. With
    --drain the first stop lets every Run in hand finish and be recorded, no attempt
    spent, as before a store is copied (set the service manager's stop timeout above
    the longest Run); a second interrupts them. A
    malformed executor report is an error: the Run is interrupted with the reason and
    the worker goes on.
    """
    if no_coordinator and no_runs:
        raise click.UsageError("--no-coordinator and --no-runs leave nothing to do")
    if not no_runs and not (executor_spec or "").strip():
        # An empty value (an unset variable in a service file) is no executor: every
        # Run claimed would fail and spend its attempts.
        raise click.UsageError("--executor is required unless --no-runs is given")
    try:
        executor = load_executor(executor_spec) if executor_spec else _no_executor
    except (ImportError, AttributeError, ValueError) as error:
        raise click.BadParameter(str(error), param_hint="--executor") from None
    provider = None if no_coordinator else cli_coordinator.make_provider(provider_name)

    def on_event(kind: str, claim: Claim, detail: str) -> None:
        line = f"{kind} {claim.action_type} {claim.action_id} {detail}".rstrip()
        # On stderr, so --json keeps stdout for the stats; a drain says what a second
        # signal would cost, where the operator who sent the first looks.
        if kind in ("error", "draining"):
            click.echo(safe(" ".join(line.split())), err=True)
        elif not as_json:
            console.print(text(line), highlight=False)

    def on_step(result: StepResult) -> None:
        console.print(text(f"coordinator {cli_coordinator.step_line(result)}"), highlight=False)

    # The handlers stay until the store is closed and the summary printed: a burst of
    # signals after the loop only confirms the stop (it killed the process before
    # its summary, or ended it as "Aborted!" with status 1; ADR-0097). A signal
    # while the store opens stops the worker before its first claim.
    with StopSignals(drain=drain) as signals:
        with open_when_reachable(ctx, lambda: _open(ctx), Stop(signals)) as wc:
            # What the process holds now (its modules, models, store and pools) lives as
            # long as the worker: out of every collection's walk, the garbage collector
            # costs a run cycle about half as much (ADR-0110).
            gc.freeze()
            stats = WorkerStats()
            try:
                run_worker(
                    wc,
                    executor,
                    worker=default_name() if name is None else name,
                    lease_seconds=lease_seconds,
                    poll_seconds=poll_seconds,
                    max_runs=max_runs,
                    runs_at_once=runs_at_once,
                    exit_when_idle=exit_when_idle,
                    signals=signals,
                    on_event=on_event,
                    coordinator=provider,
                    runs=not no_runs,
                    on_step=None if as_json else on_step,
                    stats=stats,
                )
            except StoreUnavailable:
                # The store failed under the loop (a full disk): what it did is said before
                # the error's line (found by acceptance testing: nothing was, ADR-0138).
                _said_worker(stats, as_json)
                raise
        _said_worker(stats, as_json)
    if signals.signum is not None:
        ctx.exit(128 + signals.signum)


def _said_worker(stats: WorkerStats, as_json: bool) -> None:
    if as_json:
        _emit_json(stats.json())
    else:
        console.print(stats.summary(), markup=False, highlight=False)


def _no_executor(claim: Claim) -> dict[str, Any]:
    raise AssertionError("a worker without --executor runs no Runs")  # never claimed


# The operator verbs (audit, progress, projections, copy, rekey), budgets, the
# Coordinator's and serve live in their own modules.
from workcenter.adapters import (  # noqa: E402
    cli_budget,
    cli_decisions,
    cli_events,
    cli_operator,
    cli_projections,
    cli_serve,
    cli_steer,
    cli_store_copy,
)

cli_operator.audit.add_command(cli_decisions.decisions)
cli_operator.audit.add_command(cli_decisions.export)
cli_operator.audit.add_command(cli_events.events)

for _command in (
    cli_steer.create,
    cli_steer.start,
    cli_steer.cancel,
    cli_steer.resume,
    cli_steer.retry,
    cli_steer.guide,
    cli_steer.add_input,
    cli_budget.budget,
    cli_operator.audit,
    cli_operator.progress,
    cli_projections.projections,
    cli_projections.leases,
    cli_coordinator.coordinate,
    cli_coordinator.message,
    cli_coordinator.conversation,
    cli_serve.serve,
    cli_store_copy.copy_verb,
    cli_store_copy.rekey,
):
    cli.add_command(_command)


def main() -> None:
    # PostgreSQL's pg_stat_activity names each connection by its process's verb (found by
    # acceptance testing, ADR-0137); an operator's own name is kept. Here, in the
    # command's own process, not in the verbs: a service calling them keeps its own.
    verb = _verb(sys.argv[1:])
    if verb is not None:
        os.environ.setdefault("PGAPPNAME", f"workcenter {verb}")
    if cli_outcome.stdout_closed():
        click.echo(
            "workcenter: its standard output is closed, so what it did could not be said:"
            " nothing was done (send the output to /dev/null to discard it)",
            err=True,
        )
        sys.exit(cli_outcome.OUTPUT_FAILED)
    try:
        cli(standalone_mode=True)
    except WorkcenterError as error:  # raised outside a verb; verbs report their own
        sys.exit(cli_outcome.failed(error))


def _verb(args: list[str]) -> str | None:
    """The verb of a command line: its first word that is neither an option nor
    ``--db``'s value."""
    words = iter(args)
    for word in words:
        if word == "--db":
            next(words, None)
        elif not word.startswith("-"):
            return word
    return None
