"""The verbs that steer one WorkItem as a user does on the dashboard: ``create``,
``start``, ``cancel``, ``retry`` (a waiting Action's answer too), ``guide``, and
``input`` to an Action, which only the Python API had. Each
writing verb but ``create`` takes the version the user saw (``--expected-version``, the
item version ``show`` prints) and is refused, writing nothing, if the item changed
since. An Action is named as ``show`` numbers it, or by its id or an id's prefix."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import click

from workcenter.adapters import cli_next, presenters
from workcenter.adapters.cli_common import (
    MIN_PREFIX,
    actor_option,
    command_hint,
    console,
    db_option,
    emit_json,
    json_option,
    open_center,
    options_named,
    resolve_id,
    work_item_id,
)
from workcenter.application import WorkCenter
from workcenter.domain import work_item as wi
from workcenter.domain.errors import NotFound
from workcenter.domain.resource_ledger import LIMIT_NAMES
from workcenter.service_layer.handlers.work_item import new_work_item

expected_version_option = click.option(
    "--expected-version",
    type=int,
    required=True,
    help="The WorkItem version you saw (`show` prints it; `planRevision` in `show --json`);"
    " refused if what this command depends on changed since.",
)
expected_generation_option = click.option(
    "--expected-generation",
    type=int,
    default=None,
    help="The Action's generation you saw (`show` prints it); refused if it changed since.",
)


def action_id(item: wi.WorkItemState, value: str) -> UUID:
    """The Action ``value`` names: its number as ``show`` prints it, or its id or a
    prefix of one (of this item's Actions only)."""
    # ASCII digits only: str.isdigit also takes "²" and "①", which int() refuses.
    if value.isascii() and value.isdigit() and len(value) < MIN_PREFIX:
        number = int(value)
        for entry in item.plan:
            if entry.sequence == number:
                return entry.action_id
        raise NotFound(f"Action number {number} of WorkItem", str(item.id))
    return resolve_id(value, "Action", lambda: (e.action_id for e in item.plan))


def _item_and_action(wc: WorkCenter, item_id: str, action: str) -> tuple[UUID, UUID]:
    work_item = work_item_id(wc, item_id)
    return work_item, action_id(wc.work_item(work_item), action)


def _said(as_json: bool, item: wi.WorkItemState, done: str, **extra: Any) -> None:
    if as_json:
        emit_json({"item": presenters.item_json(item)} | extra)
        return
    console.print(f"{done}: WorkItem is {item.status} (version {item.version})", markup=False)


def _said_of_action(as_json: bool, item: wi.WorkItemState, done: str, target: UUID) -> None:
    """As ``_said``, naming the Action the work goes on in: a linear item's retry or
    guidance plans a replacement, which ``show`` numbers anew."""
    current = item.current_action_id
    if as_json:
        went_on = str(current) if current is not None else None
        _said(True, item, done, action_id=str(target), current_action_id=went_on)
        return
    _said(False, item, done)
    entry = next((e for e in item.plan if e.action_id == current), None)
    if current != target and entry is not None:
        console.print(f"its work goes on as Action {entry.sequence} ({entry.status})", markup=False)


# The Python API's names in create's refusals, and the options they stand for.
CREATE_OPTIONS = {f"limits.{name}": f"--{name.replace('_', '-')}" for name in LIMIT_NAMES} | {
    "each of acceptance_criteria": "each --criterion",
    "acceptance_criteria": "--criterion",
    "delivery_target": "--delivery-target",
    "request_id": "--request-id",
}


@click.command()
@db_option
@click.option("--title", required=True, help="What the work is called.")
@click.option("--goal", required=True, help="What the work must achieve.")
@click.option(
    "--criterion",
    "criteria",
    multiple=True,
    help="An acceptance criterion; give it once per criterion.",
)
@click.option(
    "--delivery-target",
    default=None,
    help="Where the result goes: response, workspace_files, pull_request or merge; a"
    " dynamic item without one asks the user before it changes anything.",
)
@click.option(
    "--mode",
    type=click.Choice(["dynamic", "linear"]),
    default="dynamic",
    help="dynamic: a Coordinator plans the Actions; linear: one Action per stage, in order.",
)
@click.option(
    "--stage",
    "stages",
    multiple=True,
    help="A linear item's stage, in order; once per stage (default: triage, implement,"
    " review, deliver).",
)
@click.option("--start", "start_now", is_flag=True, help="Start it at once (else a draft).")
@click.option("--max-tokens", type=int, default=None, help="Charged tokens, in all.")
@click.option("--max-requests", type=int, default=None, help="LLM requests, in all.")
@click.option("--max-run-requests", type=int, default=None, help="LLM requests of one Run.")
@click.option("--max-action-attempts", type=int, default=None, help="Runs of one Action.")
@click.option(
    "--max-coordinator-failures", type=int, default=None, help="Failed Coordinator turns."
)
@click.option(
    "--request-id",
    default=None,
    help="Makes the create safe to send again (a script retrying after a lost answer):"
    " the same create with the same id answers the WorkItem the first one made; other"
    " input with it is refused.",
)
@actor_option
@json_option
@click.pass_context
def create(
    ctx: click.Context,
    /,
    title: str,
    goal: str,
    criteria: tuple[str, ...],
    delivery_target: str | None,
    mode: wi.Mode,
    stages: tuple[str, ...],
    start_now: bool,
    request_id: str | None,
    actor: str | None,
    as_json: bool,
    **limits: int | None,
) -> None:
    """Create a WorkItem (a draft unless --start) with its budget: the defaults, or the
    limits given."""
    arguments: dict[str, Any] = {
        "title": title,
        "goal": goal,
        "acceptance_criteria": list(criteria),
        "delivery_target": delivery_target,
        "mode": mode,
        "stages": list(stages) or None,
        "start": start_now,
        "limits": {name: value for name, value in limits.items() if value is not None},
        "actor": actor,
        "request_id": request_id,
    }
    with options_named(CREATE_OPTIONS):
        # Checked before the store is opened, so that a refusal names the input first
        # (ADR-0101). The store must exist: `init` makes it (a create that made one made
        # a fresh store while a backup was being restored; ADR-0145).
        new_work_item(**arguments, at=datetime.now(UTC))
        with open_center(ctx) as wc:
            item = wc.create_work_item(**arguments)
    if as_json:
        emit_json({"item": presenters.item_json(item)})
        return
    console.print(
        f"created WorkItem {item.id}: {item.status} (version {item.version})", markup=False
    )
    if item.status == "draft":
        hint = command_hint(ctx, "start", str(item.id), "--expected-version", str(item.version))
        console.print(f"start it with `{hint}`", soft_wrap=True, markup=False)


@click.command()
@db_option
@click.argument("item_id")
@expected_version_option
@actor_option
@json_option
@click.pass_context
def start(
    ctx: click.Context, item_id: str, expected_version: int, actor: str | None, as_json: bool
) -> None:
    """Start a draft WorkItem: a linear one's first stage is ready to claim, a dynamic one
    waits for its Coordinator to plan."""
    with open_center(ctx) as wc:
        work_item = work_item_id(wc, item_id)
        before = wc.work_item(work_item)
        item = wc.start(work_item, expected_version=expected_version, actor=actor)
    # A start of a started item writes nothing (lifecycle.md 3.1), whatever version it was
    # given; a draft started by another in between is started all the same.
    changed = before.status == "draft" and item.status != "draft"
    if as_json:
        emit_json({"item": presenters.item_json(item), "changed": changed})
        return
    said = "started" if changed else "already started (nothing written)"
    console.print(f"{said}: WorkItem is {item.status} (version {item.version})", markup=False)
    if item.mode == "dynamic":
        console.print(
            "its Coordinator plans the first Actions at its next step: run"
            f" `{command_hint(ctx, 'coordinate')}` (or a worker, or `serve --coordinate`)",
            soft_wrap=True,
            markup=False,
        )


@click.command()
@db_option
@click.argument("item_id")
@expected_version_option
@click.option("--reason", default="", help="Why, kept with the cancellation.")
@actor_option
@json_option
@click.pass_context
def cancel(
    ctx: click.Context,
    item_id: str,
    expected_version: int,
    reason: str,
    actor: str | None,
    as_json: bool,
) -> None:
    """Cancel a WorkItem: its open Actions and running Runs end (`resume` undoes it)."""
    with open_center(ctx) as wc:
        work_item = work_item_id(wc, item_id)
        before = wc.work_item(work_item)
        item = wc.cancel(work_item, reason=reason, expected_version=expected_version, actor=actor)
    # A cancel of a cancelled item writes nothing, as a start of a started one.
    changed = before.status != "cancelled"
    _said(
        as_json,
        item,
        "cancelled" if changed else "already cancelled (nothing written)",
        changed=changed,
    )


@click.command()
@db_option
@click.argument("item_id")
@click.argument("action")
@expected_version_option
@expected_generation_option
@click.option("--answer", default="", help="The answer a waiting Action asked for.")
@actor_option
@json_option
@click.pass_context
def retry(
    ctx: click.Context,
    item_id: str,
    action: str,
    expected_version: int,
    expected_generation: int | None,
    answer: str,
    actor: str | None,
    as_json: bool,
) -> None:
    """Run a failed ACTION again, or answer a waiting one (--answer), with its last Run's
    result as context. ACTION is its number as `show` prints it, or its id or a prefix."""
    with open_center(ctx) as wc:
        work_item, target = _item_and_action(wc, item_id, action)
        answered = wc.action(target).status == "waiting"
        item = wc.retry(
            work_item,
            target,
            expected_version=expected_version,
            expected_generation=expected_generation,
            answer=answer,
            actor=actor,
        )
    _said_of_action(as_json, item, "answered" if answered else "retried", target)


@click.command()
@db_option
@click.argument("item_id")
@click.argument("action")
@click.argument("guidance")
@expected_version_option
@expected_generation_option
@actor_option
@json_option
@click.pass_context
def guide(
    ctx: click.Context,
    item_id: str,
    action: str,
    guidance: str,
    expected_version: int,
    expected_generation: int | None,
    actor: str | None,
    as_json: bool,
) -> None:
    """Give a ready or running ACTION (on a dynamic item, a waiting one too) your
    GUIDANCE: a new generation of it (a linear item's: a replacement) with your words in
    its context."""
    with open_center(ctx) as wc:
        work_item, target = _item_and_action(wc, item_id, action)
        item = wc.guide(
            work_item,
            target,
            expected_version=expected_version,
            expected_generation=expected_generation,
            guidance=guidance,
            actor=actor,
        )
    _said_of_action(as_json, item, "guided", target)


@click.command(name="input")
@db_option
@click.argument("item_id")
@click.argument("action")
@click.argument("text")
@expected_version_option
@click.option(
    "--expected-generation",
    type=int,
    required=True,
    help="The Action's generation you saw (`show` prints it); refused if it changed since.",
)
@click.option("--run", "run", default=None, help="A running Action's Run (its id or a prefix).")
@actor_option
@json_option
@click.pass_context
def add_input(
    ctx: click.Context,
    item_id: str,
    action: str,
    text: str,
    expected_version: int,
    expected_generation: int,
    run: str | None,
    actor: str | None,
    as_json: bool,
) -> None:
    """Send TEXT to ACTION: a ready one starts a new generation with it in its context; a
    running one's Run gets it queued (name the Run with --run). Its executor must read it
    while it runs: `workcenter worker` hands input over at the claim only, so its Run is
    interrupted at its end and the next Run, an attempt, gets the input."""
    with open_center(ctx) as wc:
        work_item, target = _item_and_action(wc, item_id, action)
        runs = [r.id for r in wc.action(target).runs]
        run_id = resolve_id(run, "Run", lambda: runs) if run is not None else None
        after = wc.add_input(
            work_item,
            target,
            expected_version=expected_version,
            expected_generation=expected_generation,
            text=text,
            expected_run_id=run_id,
            actor=actor,
        )
    if as_json:
        emit_json({"action": presenters.action_json(after)})
        return
    where = (
        "queued for its running Run"
        if after.status == "running"
        else f"its generation {after.generation} is {after.status}"
    )
    console.print(f"input sent to Action {after.sequence}: {where}", markup=False)


@click.command()
@db_option
@click.argument("item_id")
@click.option("--expected-version", type=int, required=True, help="The WorkItem version you saw.")
@click.option(
    "--expected-ledger-version",
    type=int,
    required=True,
    help="The ledger (or control) version you saw; refused if a stop, extend or resume came after.",
)
@actor_option
@json_option
@click.pass_context
def resume(
    ctx: click.Context,
    item_id: str,
    expected_version: int,
    expected_ledger_version: int,
    actor: str | None,
    as_json: bool,
) -> None:
    """Resume a cancelled WorkItem, or one its budget stopped (extend the budget first)."""
    with open_center(ctx) as wc:
        item = wc.resume(
            work_item_id(wc, item_id),
            expected_version=expected_version,
            expected_ledger_version=expected_ledger_version,
            actor=actor,
        )
        snapshot = presenters.budget_json(wc, item.id)
        step = None if as_json else cli_next.read(wc, item)
    if as_json:
        emit_json({"item": presenters.item_json(item), "budget": snapshot})
    else:
        console.print(f"resumed: WorkItem is {item.status} (version {item.version})")
        assert step is not None
        cli_next.say(ctx, step)
