"""`audit events`: every event of the store after a position, in order, as JSON Lines,
for an export to another system that resumes where it stopped (ADR-0145).

`audit ID` is one item's trail and the change stream carries no payloads; an export
needs the whole sequence with its data, and where to go on from. Each line is written
whole: a stop (Ctrl-C, SIGTERM) comes between two pages, and the last line on stderr
names the event to give ``--after`` next as ``DIGEST@POSITION``, which a store restored
from an older backup does not hold.
"""

from __future__ import annotations

import sys
from typing import Any

import click
import orjson

from workcenter.adapters.cli_common import Count, clip, db_option, open_center
from workcenter.adapters.cli_stop import Interrupted, interrupted, stop_signals
from workcenter.adapters.terminal import safe
from workcenter.application import WorkCenter
from workcenter.domain import bounds
from workcenter.domain.errors import InvalidInput
from workcenter.domain.model import DomainEvent
from workcenter.projections.audit import ENVELOPE
from workcenter.projections.sanitize import sanitize_event_payload, sanitize_record
from workcenter.service_layer.history.hash_chain import Anchor
from workcenter.service_layer.queries.changes import MAX_BATCH, Change

DEFAULT_LIMIT = 10_000


def event_line(position: int, change: Change | None, event: DomainEvent, raw: bool) -> bytes:
    """One event as its export line: where it is, whose it is, who caused it, and its
    payload (masked as `audit` masks it unless ``raw``)."""
    kind = type(event).__name__
    payload = event.model_dump(mode="json", exclude=ENVELOPE)
    actor = event.actor
    row: dict[str, Any] = {
        "position": position,
        "time": event.timestamp.isoformat(),
        "work_item_id": str(change.work_item_id) if change is not None else None,
        "aggregate": change.aggregate if change is not None else None,
        "aggregate_id": str(event.originator_id),
        "version": event.originator_version,
        "type": kind,
        "action_id": str(change.action_id) if change and change.action_id else None,
        "run_id": str(change.run_id) if change and change.run_id else None,
        "actor": actor.kind,
        "actor_id": actor.id if raw else sanitize_record(actor.id),
        "caused_by": str(actor.caused_by) if actor.caused_by else None,
        "masked": not raw,
        "payload": payload if raw else sanitize_event_payload(kind, payload),
    }
    return orjson.dumps(row) + b"\n"


@click.command(name="events")
@db_option
@click.option(
    "--after",
    "after_given",
    default="0",
    show_default=True,
    metavar="ANCHOR|POSITION",
    help="Start after this event: DIGEST@POSITION as the last export said to go on from"
    " (refused if the store's event there is another), or a bare position.",
)
@click.option(
    "--limit",
    type=Count(min=1, max=bounds.INTEGER),
    default=DEFAULT_LIMIT,
    show_default=True,
    help="Print at most this many events.",
)
@click.option("--raw", is_flag=True, help="Payloads as stored, not masked.")
@click.pass_context
def events(ctx: click.Context, after_given: str, limit: int, raw: bool) -> None:
    """Every event of the store after --after, oldest first, as JSON Lines on stdout
    (position, time, work_item_id, aggregate, aggregate_id, version, type, action_id,
    run_id, actor, actor_id, caused_by, masked, payload); stderr's last line names the
    event to go on from with --after, as DIGEST@POSITION."""
    anchor = _anchor_or_position(after_given)
    after = anchor.position if isinstance(anchor, Anchor) else anchor
    printed, position = 0, after
    out = sys.stdout.buffer
    with stop_signals() as stop, open_center(ctx, inline_projections=False) as wc:
        if isinstance(anchor, Anchor) and wc.maintenance.anchor_at(after) != anchor:
            raise InvalidInput(
                f"the store's event at position {after} is not the one the export read"
                " (another digest, or none): its history changed since, as when a backup"
                " older than the export is restored; export again from the start (or from"
                " an anchor `audit verify --anchor` still verifies)"
            )
        try:
            while printed < limit:
                stop.check()
                page = wc.changes.events_after(position, limit=min(MAX_BATCH, limit - printed))
                for at, change, event in page.events:
                    out.write(event_line(at, change, event, raw))
                    printed, position = printed + 1, at
                out.flush()
                if not page.events:
                    break
            head = wc.changes.head()
        except Interrupted as stopped:
            out.flush()
            interrupted(ctx, stopped, _said(printed, after, position, _resume(wc, position)))
        resume = _resume(wc, position)
    click.echo(safe(_said(printed, after, position, resume, head)), err=True)


def _anchor_or_position(given: str) -> Anchor | int:
    text = given.strip()
    if text.isascii() and text.isdigit() and int(text) <= bounds.INTEGER:
        return int(text)
    if "@" not in text:
        raise InvalidInput(
            f"--after must be DIGEST@POSITION as an export said it, or a position, not"
            f" {clip(given, 80)!r}"
        )
    return Anchor.parse(text)


def _resume(wc: WorkCenter, position: int) -> str:
    """What to give --after next: the anchor of the last event read, which a restore of
    an older backup would not hold (positions alone are taken again by new events; found
    by acceptance testing, ADR-0145); a bare position where the chain has no link."""
    anchor = wc.maintenance.anchor_at(position) if position else None
    return str(anchor) if anchor is not None else str(position)


def _said(printed: int, after: int, position: int, resume: str, head: int | None = None) -> str:
    events = "1 event" if printed == 1 else f"{printed} events"
    done = f"{events} after position {after}, up to position {position}"
    if head is not None and position >= head:
        return f"{done} (the head): go on later with --after {resume}"
    return f"{done}: go on with --after {resume}"
