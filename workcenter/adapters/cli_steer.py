"""``workcenter start``: a draft's start, under the version the user saw, as every
writing verb takes it (``--expected-version``, the item version ``show`` prints)."""

from __future__ import annotations

import click

from workcenter.adapters import presenters
from workcenter.adapters.cli_common import (
    actor_option,
    command_hint,
    console,
    db_option,
    emit_json,
    open_center,
    work_item_id,
)


@click.command()
@db_option
@click.argument("item_id")
@click.option(
    "--expected-version",
    type=int,
    required=True,
    help="The WorkItem version you saw (`show` prints it); refused if it changed since.",
)
@actor_option
@click.option("--json", "as_json", is_flag=True)
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
