"""What a user runs next on a WorkItem, said after `show` and `resume` in text: the
command that moves it on, with the versions it expects, or why nothing is to be done
by hand (ADR-0136; before it, only a dynamic item waiting for a plan was told).

Each line names a verb of the CLI as the user would type it, with the `--db` they gave.
A state the user need not act on (a Run at work, an item done) gets no line."""

from __future__ import annotations

from dataclasses import dataclass

import click

from workcenter.adapters.cli_common import command_hint, console
from workcenter.adapters.cli_tables import EXTEND_FLAGS
from workcenter.application import WorkCenter
from workcenter.domain import action as act
from workcenter.domain import lifecycle, planning
from workcenter.domain import resource_ledger as rl
from workcenter.domain import work_item as wi
from workcenter.projections.sanitize import sanitize_personal


@dataclass(frozen=True)
class NextStep:
    """What the hints are made from, read while the store is open."""

    item: wi.WorkItemState
    actions: tuple[act.ActionState, ...]
    ledger: rl.LedgerState
    waits: planning.PlanWait | None


def read(wc: WorkCenter, item: wi.WorkItemState) -> NextStep:
    """The item's Actions and ledger, and (only for an item awaiting a plan, the one
    case it is needed) what its Coordinator's plan waits for."""
    waits = (
        planning.plan_wait(item, wc.conversation(item.id)) if planning.awaits_plan(item) else None
    )
    actions = tuple(sorted(wc.actions(item).values(), key=lambda a: a.sequence))
    return NextStep(item, actions, wc.ledger(item.id), waits)


def say(ctx: click.Context, step: NextStep) -> None:
    """Print ``lines``, as `show` and `resume` end."""
    for line in lines(ctx, step):
        console.print(line, soft_wrap=True, markup=False)


def lines(ctx: click.Context, step: NextStep) -> list[str]:
    """The lines to print, most pressing first: a stop before the Actions it holds."""
    item, ledger = step.item, step.ledger
    item_id = str(item.id)
    version = ("--expected-version", str(item.version))
    resume = command_hint(
        ctx, "resume", item_id, *version, "--expected-ledger-version", str(ledger.version)
    )
    if item.status == "draft":
        return [f"a draft: start it with `{command_hint(ctx, 'start', item_id, *version)}`"]
    if item.status == "cancelled":
        return [f"cancelled: `{resume}` resumes it"]
    if item.status == "done":
        return []
    said: list[str] = []
    if ledger.stop_reason is not None:
        code = ledger.stop_reason.code
        needs = lifecycle.resume_needs(ledger, step.actions)
        if needs:
            flags = " ".join(f"--{EXTEND_FLAGS[name]} {need}" for name, need in needs.items())
            extend = command_hint(
                ctx, "budget", "extend", item_id, "--expected-version", str(ledger.version)
            )
            said.append(
                f"stopped by its budget ({code}): `{extend} {flags}` (at least), then the"
                " `resume` it prints"
            )
        else:
            said.append(f"stopped by its budget ({code}): `{resume}` goes on")
        return said
    for action in step.actions:
        number = str(action.sequence)
        if action.status == "failed" and item.status == "needs_attention":
            retry = command_hint(ctx, "retry", item_id, number, *version)
            said.append(f"action {number} failed: `{retry}` runs it again")
        elif action.status == "waiting":
            run = action.runs[-1] if action.runs else None
            reason = run.result.waiting_reason if run and run.result else None
            asked = f" ({sanitize_personal(reason, 200)})" if reason else ""
            answer = command_hint(ctx, "retry", item_id, number, *version, "--answer", "TEXT")
            said.append(f"action {number} waits for an answer{asked}: `{answer}`")
    if not said and step.waits is not None:
        said.append(_plan_wait_line(ctx, item_id, step.waits))
    return said


def _plan_wait_line(ctx: click.Context, item_id: str, waits: planning.PlanWait) -> str:
    """What a dynamic item waiting for a plan waits for, or that it looks stuck; the user
    is sent to `coordinate` only when a step is due, else it would step nothing."""
    message = f"`{command_hint(ctx, 'message', item_id, 'TEXT')}`"
    if waits == "due":
        what = (
            f"run `{command_hint(ctx, 'coordinate')}` (or a worker), or say what to do"
            f" with {message}"
        )
    elif waits == "failed":
        what = (
            "its Coordinator's last turn failed and is not retried"
            f" (`{command_hint(ctx, 'conversation', item_id)}` says why); say what to do"
            f" with {message}"
        )
    else:
        what = f"its Coordinator has no step due; say what to do with {message}"
    return (
        "no Action is ready or running: a dynamic WorkItem's next Actions are planned by"
        f" its Coordinator; {what}"
    )
