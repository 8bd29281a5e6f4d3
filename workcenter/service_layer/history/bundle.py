"""The audit bundle (ADR-0060): one WorkItem's events as stored, with their links in the
hash chain and the store's anchor at export time, as JSON Lines an auditor checks
offline, without the store.

Line 1 is the header (format, version, the item, the streams, the event count, the
anchor); then one line per event in position order: its position, its link
(``previous``, ``digest``), the digest of the event it follows in the store
(``previous_digest``, needed to recompute its own, since that event is another
item's), and the event as stored (originator, version, topic, state in base64).
Decoding the events needs the store's codec, which the caller supplies; the links
are checked on the stored bytes, by the same walk as ``audit verify``.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final
from uuid import UUID

import orjson
from eventsourcing.persistence import StoredEvent

from workcenter.domain import conversation as conv
from workcenter.domain.errors import InvalidInput
from workcenter.domain.model import DomainEvent
from workcenter.service_layer.history import hash_chain
from workcenter.service_layer.history.hash_chain import Anchor, Break, Link, Row, Verdict

FORMAT: Final = "workcenter-audit-bundle"
VERSION: Final = 1
HEADER_FIELDS: Final = ("format", "version", "work_item_id", "streams", "events", "anchor")
WHOLE_FIELDS: Final = ("position", "previous", "originator_version")
EVENT_FIELDS: Final = (
    "position",
    "previous",
    "digest",
    "previous_digest",
    "originator_id",
    "originator_version",
    "topic",
    "state",
)


class BundleInvalid(InvalidInput):
    """A file that is not an audit bundle this version reads, said where."""


def header(
    work_item_id: UUID, streams: Sequence[UUID], events: int, anchor: Anchor | None
) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "version": VERSION,
        "work_item_id": str(work_item_id),
        "streams": [str(s) for s in streams],
        "events": events,
        "anchor": str(anchor) if anchor else None,
        "chain": hash_chain.TAG.rstrip(b"\x00").decode(),
    }


def event_line(row: Row) -> dict[str, Any]:
    """One event of the walk over the item's streams, as a bundle line."""
    event, link = row.event, row.link
    if event is None or link is None:
        raise InvalidInput(
            f"position {row.position} has no event or no link: run `workcenter audit verify`"
        )
    return {
        "position": row.position,
        "previous": link.previous,
        "digest": link.digest.hex(),
        "previous_digest": row.previous_digest.hex() if row.previous_digest is not None else None,
        "originator_id": str(event.originator_id),
        "originator_version": event.originator_version,
        "topic": event.topic,
        "state": base64.b64encode(event.state).decode(),
    }


def lines(head: dict[str, Any], rows: Iterable[Row]) -> Iterator[bytes]:
    """The bundle's lines, each ending in a newline."""
    yield orjson.dumps(head) + b"\n"
    for row in rows:
        yield orjson.dumps(event_line(row)) + b"\n"


@dataclass(frozen=True)
class Bundle:
    head: dict[str, Any]
    rows: list[Row]

    @property
    def anchor(self) -> Anchor | None:
        text = self.head.get("anchor")
        return Anchor.parse(text) if isinstance(text, str) else None


def read(data: bytes) -> Bundle:
    """The bundle in ``data``; ``BundleInvalid`` naming the line that cannot be read."""
    raw_lines = data.splitlines()
    if not raw_lines:
        raise BundleInvalid("the bundle is empty")
    head = _object(raw_lines[0], 1)
    if head.get("format") != FORMAT or any(f not in head for f in HEADER_FIELDS):
        raise BundleInvalid(f"line 1 is not the header of a {FORMAT}")
    if head.get("version") != VERSION:
        raise BundleInvalid(f"bundle version {head.get('version')!r}; this reads {VERSION}")
    _check_header(head)
    rows = [_row(_object(line, number), number) for number, line in enumerate(raw_lines[1:], 2)]
    if rows and head["anchor"] is None:
        # An export with events always names the chain's head: without it nothing shows
        # that no events were cut from the bundle's end.
        raise BundleInvalid("line 1 names no anchor, though the bundle holds events")
    return Bundle(head, rows)


def _check_header(head: dict[str, Any]) -> None:
    """The header's fields as an export writes them, else ``BundleInvalid``."""
    try:
        UUID(str(head["work_item_id"]))
    except ValueError:
        raise BundleInvalid("line 1: work_item_id is not a WorkItem's id") from None
    if not _whole(head["events"], 0):
        raise BundleInvalid("line 1: events is not a count of events")
    streams = head["streams"]
    if not isinstance(streams, list) or not all(isinstance(s, str) for s in streams):
        raise BundleInvalid("line 1: streams is not a list of stream ids")
    anchor = head["anchor"]
    if anchor is not None:
        if not isinstance(anchor, str):
            raise BundleInvalid("line 1: the anchor is not DIGEST@POSITION")
        try:
            Anchor.parse(anchor)
        except InvalidInput:
            raise BundleInvalid("line 1: the anchor is not DIGEST@POSITION") from None


def _whole(value: Any, least: int) -> bool:
    """A JSON integer (not a string, a fraction or a boolean) from ``least`` up to the
    largest the stores hold (signed 64 bits)."""
    return type(value) is int and least <= value <= hash_chain.LARGEST


def _object(line: bytes, number: int) -> dict[str, Any]:
    try:
        value = orjson.loads(line)
    except orjson.JSONDecodeError:
        raise BundleInvalid(f"line {number} is not JSON") from None
    if not isinstance(value, dict):
        raise BundleInvalid(f"line {number} is not a JSON object")
    return value


def _row(line: dict[str, Any], number: int) -> Row:
    try:
        if not all(_whole(line[field], 0) for field in WHOLE_FIELDS):
            raise ValueError
        previous_digest = line["previous_digest"]
        event = StoredEvent(
            originator_id=hash_chain.originator(str(line["originator_id"]).encode()),
            originator_version=int(line["originator_version"]),
            topic=str(line["topic"]),
            state=base64.b64decode(line["state"], validate=True),
        )
        link = Link(int(line["position"]), int(line["previous"]), bytes.fromhex(line["digest"]))
        return Row(
            link.position,
            event,
            link,
            bytes.fromhex(previous_digest) if previous_digest is not None else None,
        )
    except (KeyError, TypeError, ValueError):
        raise BundleInvalid(
            f"line {number} is not an event line ({', '.join(EVENT_FIELDS)})"
        ) from None


def verify_links(bundle: Bundle) -> Verdict:
    """Every link and stream link of the bundle, then its anchor: the count in the
    header, and the anchor's position at or after the last event (its digest, when
    the last event is the anchor's)."""
    scope = UUID(str(bundle.head["work_item_id"]))
    verdict = hash_chain.verify(bundle.rows, whole_store=False, scope=scope)
    if not verdict.ok:
        return verdict
    anchor = bundle.anchor
    broken = _unlinked(bundle.rows) or _stream_removed(bundle, scope)
    if broken is None and bundle.head["events"] != len(bundle.rows):
        # The links hold, so lines were cut from the end (or added there): the break is
        # after the last event, whose own position is intact (it was named instead).
        end = bundle.rows[-1].position if bundle.rows else 0
        removed = bundle.head["events"] > len(bundle.rows)
        broken = Break(
            "truncated" if removed else "added",
            end,
            f"the header counts {bundle.head['events']} events, the bundle holds "
            f"{len(bundle.rows)}: "
            + (f"events after position {end} were removed" if removed else "lines were added"),
            previous_position=end,
        )
    elif broken is None and anchor is not None and verdict.head is not None:
        last = verdict.head
        if anchor.position < last.position or (
            anchor.position == last.position and anchor.digest != last.digest
        ):
            broken = Break(
                "anchor",
                anchor.position,
                f"the anchor {anchor} does not follow the bundle's last link "
                f"{hash_chain.anchor_of(last)}",
            )
    return Verdict(verdict.events, verdict.head, broken, anchor, scope)


def _stream_removed(bundle: Bundle, item: UUID) -> Break | None:
    """A stream the header names that holds no event: the item's own, its ledger's (both
    begun by its creation) and each Action's it planned always hold one, so its lines
    were cut, and the count in the header set to match (found by acceptance testing,
    ADR-0134). A Conversation is begun only by a started dynamic item: its absence
    shows in the replay of its decisions, not here."""
    held = {str(row.event.originator_id) for row in bundle.rows if row.event is not None}
    conversation = str(conv.conversation_id_for(item))
    # The item's own stream first, named or not: a header pointed at another item, or
    # a bundle emptied, verified (found by acceptance testing).
    for stream in [str(item), *bundle.head["streams"]]:
        if stream != conversation and stream not in held:
            return Break(
                "missing",
                0,
                f"the header names stream {stream}, of which the bundle holds no event:"
                " its events were removed",
            )
    return None


def _unlinked(rows: Sequence[Row]) -> Break | None:
    """A row that says it follows an event of the bundle, with another digest than that
    event's: an event edited and hashed again, without the events after it."""
    digests = {row.position: row.link.digest for row in rows if row.link is not None}
    for row in rows:
        assert row.link is not None
        before = digests.get(row.link.previous)
        if before is not None and before != row.previous_digest:
            return Break(
                "digest",
                row.position,
                f"position {row.position} follows position {row.link.previous}, whose digest"
                " is not the one it was chained to: that event was changed and hashed again",
            )
    return None


def decoded(bundle: Bundle, decode: Callable[[StoredEvent], DomainEvent]) -> list[tuple[int, Any]]:
    """(position, event) of every event, decoded with the store's codec."""
    out: list[tuple[int, Any]] = []
    for row in bundle.rows:
        assert row.event is not None
        out.append((row.position, decode(row.event)))
    return out
