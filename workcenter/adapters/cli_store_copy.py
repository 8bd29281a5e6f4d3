"""The verbs that copy the store into a new one: ``copy`` moves it to another database
under its own key (ADR-0125), ``rekey`` rotates its cipher key (issue 10, ADR-0033)."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from typing import Final

import click
from rich.progress import Progress, TaskID

from workcenter.adapters.cli_common import (
    bar_on_terminal,
    console,
    db_option,
    emit_json,
    json_option,
)
from workcenter.adapters.cli_stop import Interrupted, Steps, Stop, interrupted, stop_signals
from workcenter.adapters.persistence import is_postgres_url, public_url, resolve_db_path
from workcenter.adapters.store_copy import NEW_KEY_ENV, Copied, ViewsNotBuilt, opened_with
from workcenter.adapters.terminal import safe, text
from workcenter.domain.errors import WorkcenterError
from workcenter.projections.lifecycle import Progress as ViewProgress
from workcenter.service_layer.history.proof import VerifyProgress

Copying = Callable[..., Copied]

TO_HELP: Final = "The new store (path or URL): none there yet, or an empty one that `init` made"


@click.command("copy")
@db_option
@click.option("--to", "target", required=True, help=f"{TO_HELP} in this store's key's mode.")
@json_option
@click.pass_context
def copy_verb(ctx: click.Context, target: str, as_json: bool) -> None:
    """Copy the store's events, in order and under its own key ($WORKCENTER_CIPHER_KEY,
    or none), into a new, empty store, and build its read models: how a SQLite store
    moves to PostgreSQL (or back). Stop the writers first; then point them at the new
    store."""
    from workcenter.adapters.store_copy import copy

    _copied(ctx, "copy", copy, "its key", target, as_json)


@click.command()
@db_option
@click.option("--to", "target", required=True, help=f"{TO_HELP} in the new key's mode.")
@json_option
@click.pass_context
def rekey(ctx: click.Context, target: str, as_json: bool) -> None:
    """Copy the store's events into a new store under a new cipher key: read with
    $WORKCENTER_CIPHER_KEY, written with $WORKCENTER_NEW_CIPHER_KEY (set to an empty
    value: no encryption; unset: refused). Stop the writers first; then point them at
    the new store."""
    from workcenter.adapters.store_copy import rekey as copy_under_new_key

    _copied(ctx, "rekey", copy_under_new_key, "the new key", target, as_json)


def _copied(
    ctx: click.Context, verb: str, copy_store: Copying, key_named: str, target: str, as_json: bool
) -> None:
    shown = public_url(target)  # never its password (found by acceptance testing)
    new_key = os.environ.get(NEW_KEY_ENV) or None  # a rekey's
    with stop_signals() as stop:
        steps = Steps(stop)
        building: list[str] = []  # the views begun, once every event is copied

        def partial(how: str) -> str:
            if building:
                # Every event is in the new store: a stop no longer cuts the copy, only
                # the views' build, which its first open or a rebuild finishes (found by
                # acceptance testing: the stop was put off for the whole build, the
                # longer part of a copy of a large store).
                return (
                    f"{verb} {how} while its read models were built: every event up to"
                    f" position {steps.total:,} was copied to {shown}, a whole copy; build"
                    f" its read models with `workcenter --db {shown} projections rebuild`"
                    f"{opened_with(new_key, as_stored=verb == 'copy')} (else its first"
                    " command builds them, and takes as long)"
                )
            if not steps.total:  # the source's history checked, or the new store made
                return f"{verb} {how} before its first event was copied: nothing was copied"
            # The pages copied are committed: the new store holds a beginning of the
            # history, which verifies as one (found by acceptance testing: it was then
            # taken for a copy, and SIGTERM ended the verb without a word).
            removal = "DROP SCHEMA ... CASCADE" if is_postgres_url(target) else "delete the file"
            return (
                f"{verb} {how} at position {steps.done:,} of {steps.total:,}: the new store at"
                f" {shown} holds only the events copied so far and is not a copy of the"
                f" store; remove it ({removal}) and run {verb} again into a new, empty store"
            )

        try:
            with bar_on_terminal(as_json) as bar:
                done = copy_store(
                    ctx.ensure_object(dict).get("db") or resolve_db_path(None),
                    target,
                    checking=_checking_on(bar, stop),
                    progress=steps.shown_on(bar, "copying"),
                    building=_views_on(bar, stop, building),
                )
        except Interrupted as stopped:
            if as_json:  # a script reads what the stop left as it reads a copy's answer
                emit_json(
                    {
                        "stopped": stopped.name,
                        "position": steps.total if building else steps.done,
                        "source_head": steps.total or None,
                        "complete": bool(building),
                    }
                )
            interrupted(ctx, stopped, partial("stopped"))
        except ViewsNotBuilt:
            raise  # every event is in the new store: its words say what finishes it
        except WorkcenterError:
            if steps.done:  # the database went away mid-copy, say: said before its words
                click.echo(safe(partial("failed")), err=True)
            raise
        if stop.signum is not None:
            # It came after the read models' last page: the copy is whole, so the verb
            # ends as its copy says (found by acceptance testing: 130 or 143 without a
            # word, the status of a copy cut short).
            click.echo(
                f"{signal.Signals(stop.signum).name} came after the copy was finished",
                err=True,
            )
        _said_copied(ctx, done, key_named, shown, as_json)


def _checking_on(bar: Progress | None, stop: Stop) -> VerifyProgress:
    """The source's history checked before anything is made, on a bar of its own on a
    terminal, a stop taken at every page (found by acceptance testing: the copy's bar
    showed 0 of an unknown total meanwhile, and a stop waited for its end)."""
    task = None if bar is None else bar.add_task("checking the store's history", total=None)

    def advance(_phase: str, done: int, total: int) -> None:
        if bar is not None and task is not None:
            bar.update(task, completed=done, total=total)
        stop.check()

    return advance


def _views_on(bar: Progress | None, stop: Stop, building: list[str]) -> ViewProgress:
    """The new store's read models built after the last page, each on a bar of its own
    on a terminal (the copy's bar stood still at its end meanwhile, the longer part on a
    large store; found by acceptance testing), a stop taken at every page; ``building``
    gets each view as it begins."""
    tasks: dict[str, TaskID] = {}

    def advance(view: str, done: int, total: int) -> None:
        if view not in building:
            building.append(view)
        if bar is not None:
            if view not in tasks:
                tasks[view] = bar.add_task(f"building {view}", total=total)
            bar.update(tasks[view], completed=done, total=total)
        stop.check()

    return advance


def _said_copied(
    ctx: click.Context, done: Copied, key_named: str, target: str, as_json: bool
) -> None:
    if as_json:
        emit_json(done.json())
    else:
        sealed = f"encrypted with {key_named}" if done.encrypted else "without encryption"
        # The paths are the operator's, printed as they are: never as markup, their
        # control characters visible (found by acceptance testing, ADR-0140).
        console.print(
            text(
                f"copied {done.events} events to {target}, {sealed}, up to position {done.position}"
            ),
            highlight=False,
        )
    if done.runs_in_hand:
        source = public_url(ctx.ensure_object(dict).get("db") or resolve_db_path(None))
        click.echo(
            safe(
                f"warning: {done.runs_in_hand} Runs were held in {source} under live leases"
                " when the copy ended: a worker may still be at work on it. Stop every"
                " worker before moving to the copy: one left running finishes its Runs"
                " there, their results only there, while the copy runs them again once"
                " their leases lapse."
            ),
            err=True,
        )
    if done.source_head is None:
        click.echo(
            f"unchecked: every event up to position {done.position} was copied, but the"
            " store could not be read at the end to check that no writer added events"
            " meanwhile; if every writer was stopped, the copy is whole, else copy again"
            " into a new, empty store.",
            err=True,
        )
        ctx.exit(1)
    if not done.complete:
        # A consistent copy, but not of the store as the writers left it (ADR-0050).
        click.echo(
            f"incomplete: writers added events to the store while it was copied (after"
            f" position {done.position}, up to {done.source_head}); the copy holds the"
            f" store as it was at position"
            f" {done.position}. Stop every writer and the runner, then copy again into"
            " a new, empty store.",
            err=True,
        )
        ctx.exit(1)
