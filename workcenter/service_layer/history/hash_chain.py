"""The hash chain over the stored events (ADR-0028): its digests, how a write extends
it, and how a walk verifies it. No database here: each recorder supplies the SQL
through ``ChainTable`` and calls ``append_links`` in the transaction that inserts a
command's events, after the insert and before anything else it writes.

Each event's link is ``(position, previous, digest)``: its notification id, the
notification id of the event before it in the whole store (0 for the first), and

    SHA-256(TAG, position, previous, originator id, version, topic, state,
            digest of the previous event in the store, digest of the previous
            event in the same stream)

over the event's bytes as stored (after compression and encryption). Editing,
deleting, inserting or reordering an event therefore breaks the chain from there;
only an anchor (a head digest kept elsewhere) can show that the tail was cut or
that everything after an edit was hashed again.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol
from uuid import UUID

from eventsourcing.persistence import StoredEvent

from workcenter.domain import bounds
from workcenter.domain.errors import InvalidInput, WorkcenterError

TAG: Final = b"workcenter-chain-v1\x00"
GENESIS: Final = bytes(32)
DIGEST_HEX: Final = 64
# A stream's first event has this version (the library's aggregates count from 1).
FIRST_VERSION: Final = 1
# Events chained or verified per transaction and per page of a walk.
BATCH: Final = 5_000

ON: Final = ("1", "true", "yes", "on")
OFF: Final = ("0", "false", "no", "off")
HASH_CHAIN_ENV: Final = "WORKCENTER_HASH_CHAIN"
HASH_CHAIN_KEY: Final = "HASH_CHAIN"


# A stream's id: a UUID, or the text of a tampered row that holds no UUID.
Stream = UUID | str


class HistoryConflict(WorkcenterError):
    """A write found the chain already holding a position it was about to use: events
    were deleted from the tail after they were chained. Nothing was written."""

    code = "history_conflict"


def enabled(value: object) -> bool:
    """The hash-chain setting (on unless 0/false/no/off); anything else is InvalidInput."""
    text = value.strip().lower() if isinstance(value, str) else value
    if text in ON or text is None or text == "":
        return True
    if text in OFF:
        return False
    raise InvalidInput(
        f"the hash chain setting must be on or off, not {value!r} (from ${HASH_CHAIN_ENV})"
    )


def originator(raw: bytes) -> UUID | str:
    """A stored originator id read as bytes: its UUID, or the text as it is when it is
    not one in the form the store writes (lowercase hex, with or without dashes): a
    tampered row, even one whose edit only changed a letter's case, then fails its
    digest instead of failing the walk."""
    text = raw.decode(errors="surrogateescape")
    try:
        parsed = UUID(text)
    except ValueError:
        return text
    return parsed if text in (parsed.hex, str(parsed)) else text


def _id_bytes(originator_id: UUID | str) -> bytes:
    if isinstance(originator_id, UUID):
        return originator_id.bytes
    return originator_id.encode(errors="surrogateescape")


# The largest position or version a store holds (signed 64 bits, as SQLite's and
# PostgreSQL's integers), and so the largest a digest packs.
LARGEST: Final = 2**63 - 1


def digest(
    position: int,
    previous: int,
    event: StoredEvent,
    previous_digest: bytes,
    stream_previous_digest: bytes,
) -> bytes:
    """The digest of ``event`` stored at ``position``, linked to its predecessors."""
    topic = event.topic.encode(errors="surrogateescape")
    oid = _id_bytes(event.originator_id)
    state = event.state
    # One buffer hashed once: the same bytes as feeding the parts one by one, for a
    # third of the calls (ADR-0038). Signed 64-bit: every SQLite and PostgreSQL
    # integer, even a tampered one, fits.
    return hashlib.sha256(
        b"".join(
            (
                TAG,
                struct.pack(">qqQ", position, previous, len(oid)),
                oid,
                struct.pack(">qQ", event.originator_version, len(topic)),
                topic,
                struct.pack(">Q", len(state)),
                state,
                previous_digest,
                stream_previous_digest,
            )
        )
    ).digest()


@dataclass(frozen=True)
class Link:
    """One event's place in the chain: its position, its predecessor's, its digest."""

    position: int
    previous: int
    digest: bytes


class ChainTable(Protocol):
    """The SQL a recorder gives the chain, run on the cursor of the caller's transaction."""

    def head(self, c: Any) -> Link | None:
        """The chain's last link (the highest position), if any."""

    def unchained(
        self, c: Any, after: int, before: int | None
    ) -> Sequence[tuple[int, StoredEvent]]:
        """(position, event) of the events after ``after`` and before ``before``
        (to the end if None), oldest first, at most ``BATCH`` of them."""

    def stream_digests(self, c: Any, streams: Mapping[Stream, int]) -> dict[Stream, bytes]:
        """For each stream, the digest of its event at the version given (absent when
        there is no such event or it has no link)."""

    def insert(self, c: Any, links: Sequence[Link]) -> None: ...

    def tail_cut(self, c: Any, head: Link, first: int) -> bool:
        """Whether events up to the chain's ``head`` were deleted after they were chained,
        seen by a write whose first position is ``first``: a write must not chain past
        them (SQLite reuses their positions; PostgreSQL's sequence never does)."""

    def record_late(self, c: Any, first: int, last: int) -> None:
        """Record that the events from ``first`` to ``last`` were chained by an open
        (``chain_unchained``), now, in the store, for every later ``audit verify``
        (``late_links``)."""


def extend(
    head: Link | None,
    events: Sequence[tuple[int, StoredEvent]],
    stream_previous: Mapping[Stream, bytes],
) -> list[Link]:
    """The links of ``events`` (in position order) after ``head``; ``stream_previous``
    holds the digest of each stream's event just before its first one here."""
    links: list[Link] = []
    previous = head.position if head else 0
    previous_digest = head.digest if head else GENESIS
    streams = dict(stream_previous)
    for position, event in events:
        stream = _stream(event)
        link = Link(
            position,
            previous,
            digest(position, previous, event, previous_digest, streams.get(stream, GENESIS)),
        )
        links.append(link)
        streams[stream] = link.digest
        previous, previous_digest = position, link.digest
    return links


def _stream(event: StoredEvent) -> Stream:
    return event.originator_id


def predecessors(stored: Sequence[StoredEvent]) -> dict[Stream, int]:
    """The version before each stream's first event here, for streams that have one:
    what a write's links need of the chain besides its head (known before the write)."""
    wanted: dict[Stream, int] = {}
    for event in stored:
        stream = _stream(event)
        if stream not in wanted:
            wanted[stream] = event.originator_version - 1
    return {s: v for s, v in wanted.items() if v >= FIRST_VERSION}


def _chain(
    table: ChainTable, c: Any, head: Link | None, events: Sequence[tuple[int, StoredEvent]]
) -> Link | None:
    wanted = predecessors([event for _, event in events])
    links = extend(head, events, table.stream_digests(c, wanted))
    table.insert(c, links)
    return links[-1] if links else head


@dataclass(frozen=True)
class ChainReads:
    """What a write reads of the chain, read ahead in the write's transaction after its
    lock (PostgreSQL sends these reads with the insert, in one round trip, ADR-0051):
    the head, whether the head's event is still stored, and the digests of
    ``predecessors`` of the write's events."""

    head: Link | None
    head_stored: bool
    stream_digests: Mapping[Stream, bytes]


def append_links(
    table: ChainTable,
    c: Any,
    positions: Sequence[int],
    stored: Sequence[StoredEvent],
    reads: ChainReads | None = None,
) -> None:
    """The write hook: chain a command's events, just inserted at ``positions`` in the
    transaction of cursor ``c``, which must hold the store's write lock (SQLite's
    ``BEGIN`` plus the insert; PostgreSQL's ``LOCK TABLE ... IN EXCLUSIVE MODE``), so
    that no other writer can chain in between. Events before them left unchained
    (written with the chain off) are chained first. ``reads``, when given, were read
    in the same transaction under the same lock, and spare the table's reads."""
    if not positions:
        return
    first = positions[0]
    head = table.head(c) if reads is None else reads.head
    if head is not None:
        if reads is None:
            cut = table.tail_cut(c, head, first)
        else:
            cut = head.position >= first or not reads.head_stored
        if cut:
            raise HistoryConflict(
                f"the event chained at position {head.position}, the hash chain's head, is "
                f"gone (this write starts at position {first}): events were deleted from the "
                "end of the history after they were chained; run `workcenter audit verify`"
            )
    gap_chained = False
    while True:  # usually no query: the head is the event before this write's first
        if head is not None and head.position == first - 1:
            break
        gap = table.unchained(c, head.position if head else 0, first)
        if not gap:
            break  # ids a rolled-back PostgreSQL insert burnt: nothing to chain
        head = _chain(table, c, head, gap)
        gap_chained = True
    events = list(zip(positions, stored, strict=True))
    if reads is None or gap_chained:
        # The digests read ahead predate the gap's links: read them again.
        _chain(table, c, head, events)
        return
    links = extend(head, events, reads.stream_digests)
    table.insert(c, links)


def chain_unchained(table: ChainTable, transaction: Callable[[], Any]) -> None:
    """The migration: chain every event after the chain's head, ``BATCH`` per write
    transaction (``transaction()`` is a context manager giving a cursor that holds the
    write lock); idempotent, and resumable if interrupted.

    Each batch is recorded with its links (``record_late``): links made now prove the
    events only as they are stored now (written with the chain off, or their links
    deleted), and whichever process opened the store, `audit verify` says so (ADR-0137;
    before, only a verify that made them itself did)."""
    while True:
        with transaction() as c:
            head = table.head(c)
            events = table.unchained(c, head.position if head else 0, None)
            if not events:
                return
            _chain(table, c, head, events)
            table.record_late(c, events[0][0], events[-1][0])


# --- verifying ------------------------------------------------------------------


@dataclass(frozen=True)
class Anchor:
    """A head digest and its position, kept by an operator outside the store."""

    digest: bytes
    position: int

    def __str__(self) -> str:
        return f"{self.digest.hex()}@{self.position}"

    @classmethod
    def parse(cls, text: str) -> Anchor:
        value, _, position = text.strip().partition("@")
        try:
            if len(value) != DIGEST_HEX or not position.isascii() or not position.isdigit():
                raise ValueError
            anchor = cls(bytes.fromhex(value), int(position))
            # Past 2^53 - 1 no store has the position, and --json could not print it.
            if not 1 <= anchor.position <= bounds.INTEGER:
                raise ValueError
            return anchor
        except ValueError:
            raise InvalidInput(
                f"{text!r} is not an anchor: give DIGEST@POSITION as `workcenter audit anchor`"
                f" prints it ({DIGEST_HEX} hex digits, @, a position)"
            ) from None


@dataclass(frozen=True)
class Row:
    """One position of a walk: the event stored there and its link, either absent.

    ``previous_digest`` is the stored digest of the link's predecessor, for walks that
    do not visit every position (one item's streams)."""

    position: int
    event: StoredEvent | None
    link: Link | None
    previous_digest: bytes | None = None


@dataclass(frozen=True)
class Break:
    """The first broken link: where, in which stream, and why."""

    kind: str
    position: int
    message: str
    stream: Stream | None = None
    version: int | None = None
    previous_position: int | None = None

    def json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "position": self.position,
            "stream": str(self.stream) if self.stream else None,
            "version": self.version,
            "previous_position": self.previous_position,
            "message": self.message,
        }


@dataclass(frozen=True)
class DamagedSnapshot:
    """A stored snapshot that does not decode (the step that failed), or that is not
    the fold of its stream's events (the reason says so)."""

    stream: Stream
    version: int
    reason: str

    def json(self) -> dict[str, Any]:
        return {"stream": str(self.stream), "version": self.version, "reason": self.reason}


class Linked(Protocol):
    """What a verdict says of a batch an open chained (``late_links.LateLinks``)."""

    @property
    def count(self) -> int: ...

    @property
    def linked_at(self) -> str: ...

    def json(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class Verdict:
    events: int
    head: Link | None  # the last link verified: the head when nothing is broken
    broken: Break | None = None
    anchor: Anchor | None = None
    scope: UUID | None = None
    # Snapshots are a cache outside the chain (ADR-0099): one that does not decode is
    # ignored by every load, reported here, and leaves the history ``ok``.
    damaged_snapshots: tuple[DamagedSnapshot, ...] = ()
    # One that decodes to another state than its events' fold is where loads start
    # from, so commands act on a state the history does not hold: not ``ok`` (ADR-0103).
    mismatched_snapshots: tuple[DamagedSnapshot, ...] = ()
    # Events of the store (not only of a verify's scope) an open chained
    # (``chain_unchained``): proven only as stored then; an
    # anchor kept from before shows whether they were changed.
    linked_on_open: tuple[Linked, ...] = ()

    @property
    def ok(self) -> bool:
        return self.broken is None and not self.mismatched_snapshots

    @property
    def chained_on_open(self) -> int:
        return sum(late.count for late in self.linked_on_open)

    def json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "events": self.events,
            "scope": str(self.scope) if self.scope else "store",
            "verified_to": _link_json(self.head),
            "anchor": str(self.anchor) if self.anchor else None,
            "broken": self.broken.json() if self.broken else None,
            "damaged_snapshots": [d.json() for d in self.damaged_snapshots],
            "mismatched_snapshots": [d.json() for d in self.mismatched_snapshots],
            "chained_on_open": self.chained_on_open,
            "linked_on_open": [late.json() for late in self.linked_on_open],
        }


def _link_json(link: Link | None) -> dict[str, Any] | None:
    if link is None:
        return None
    return {"position": link.position, "digest": link.digest.hex(), "anchor": str(anchor_of(link))}


def anchor_of(link: Link) -> Anchor:
    return Anchor(link.digest, link.position)


@dataclass
class _Walk:
    """What a walk remembers: the last position and digest, and each stream's last."""

    last: Link | None = None
    streams: dict[Stream, tuple[int, int, bytes]] = field(default_factory=dict)


def _where(event: StoredEvent) -> str:
    return f"stream {_stream(event)} version {event.originator_version}"


def _check(row: Row, walk: _Walk, whole_store: bool) -> Break | None:
    """The first thing wrong with ``row``, given the walk so far."""
    event, link = row.event, row.link
    if event is None:
        return Break(
            "missing",
            row.position,
            f"position {row.position} has a digest but no event: the event was deleted",
        )
    stream, version = _stream(event), event.originator_version
    if link is None:
        return Break(
            "unchained",
            row.position,
            f"position {row.position} ({_where(event)}) "
            "has no digest: it was inserted by hand, or written with the chain off",
            stream,
            version,
        )
    if whole_store:
        expected = walk.last.position if walk.last else 0
        if link.previous != expected:
            if link.previous > expected:
                return Break(
                    "missing",
                    link.previous,
                    f"position {link.previous} is missing: position {row.position} "
                    f"({_where(event)}) was chained after it, but the walk came from "
                    f"position {expected}: the events in between were deleted",
                    stream,
                    version,
                    expected,
                )
            return Break(
                "reordered",
                row.position,
                f"position {row.position} ({_where(event)}) "
                f"was chained after position {link.previous}, not {expected}",
                stream,
                version,
                expected,
            )
        previous_digest = walk.last.digest if walk.last else GENESIS
    else:
        if row.previous_digest is None and link.previous != 0:
            return Break(
                "missing",
                link.previous,
                f"position {link.previous}, which position "
                f"{row.position} ({_where(event)}) follows, is missing",
                stream,
                version,
                link.previous,
            )
        previous_digest = row.previous_digest if row.previous_digest is not None else GENESIS
    seen = walk.streams.get(stream)
    if (seen is None and version != FIRST_VERSION) or (seen is not None and version != seen[0] + 1):
        before = (
            f"after version {seen[0]} of that stream at position {seen[1]}"
            if seen
            else f"with no version {version - 1} of that stream before it"
        )
        return Break(
            "stream",
            row.position,
            f"position {row.position} holds {_where(event)} {before}: versions were "
            "deleted, inserted or swapped",
            stream,
            version,
            seen[1] if seen else None,
        )
    stream_digest = seen[2] if seen else GENESIS
    if digest(row.position, link.previous, event, previous_digest, stream_digest) != link.digest:
        followed = [f"position {link.previous}"] if link.previous else []
        if seen:
            followed.append(f"its stream's version {seen[0]} at position {seen[1]}")
        cause = " or ".join(followed)
        return Break(
            "digest",
            row.position,
            f"position {row.position} ({_where(event)}) does not match its digest: its "
            "stored bytes or its digest were changed"
            + (f", or an event it follows ({cause}) was changed and hashed again" if cause else ""),
            stream,
            version,
            link.previous,
        )
    return None


def verify(
    rows: Iterable[Row],
    *,
    whole_store: bool = True,
    anchor: Anchor | None = None,
    scope: UUID | None = None,
    progress: Callable[[int], None] | None = None,
) -> Verdict:
    """Walk ``rows`` in position order (every position of the store, or, without
    ``whole_store``, those of some streams) and report the first broken link; with an
    ``anchor``, also that its position still holds its digest."""
    walk = _Walk()
    count = 0
    anchored: Link | None = None
    for row in rows:
        broken = _check(row, walk, whole_store)
        if broken is not None:
            return Verdict(count, walk.last, broken, anchor, scope)
        assert row.event is not None and row.link is not None  # _check saw to it
        count += 1
        walk.last = row.link
        walk.streams[_stream(row.event)] = (
            row.event.originator_version,
            row.position,
            row.link.digest,
        )
        if anchor is not None and row.position == anchor.position:
            anchored = row.link
        if progress is not None and count % BATCH == 0:
            progress(row.position)
    if progress is not None and walk.last is not None:
        progress(walk.last.position)
    broken = _check_anchor(anchor, anchored, walk.last) if anchor else None
    return Verdict(count, walk.last, broken, anchor, scope)


def _check_anchor(anchor: Anchor, anchored: Link | None, head: Link | None) -> Break | None:
    if anchored is not None and anchored.digest == anchor.digest:
        return None
    if anchored is not None:
        return Break(
            "anchor",
            anchor.position,
            f"position {anchor.position} has digest "
            f"{anchored.digest.hex()}, not the anchor's {anchor.digest.hex()}: the "
            "history up to it was changed and hashed again (or the store was restored"
            " from an older backup and written on since)",
        )
    end = head.position if head else 0
    if end < anchor.position:
        return Break(
            "truncated",
            anchor.position,
            f"the history ends at position {end}, "
            f"before the anchor's position {anchor.position}: events after position "
            f"{end} were removed (or up to an earlier position, if the store was restored"
            " from an older backup and written on since)",
            previous_position=end,
        )
    return Break(
        "anchor",
        anchor.position,
        f"position {anchor.position} is no longer in the "
        "history: it was removed and the history after it hashed again",
    )


def merge(events: Iterable[tuple[int, StoredEvent]], links: Iterable[Link]) -> Iterator[Row]:
    """Rows of every position that has an event, a link or both, from two sequences each
    in position order (the events table and the chain's, read side by side)."""
    event_iter, link_iter = iter(events), iter(links)
    event = next(event_iter, None)
    link = next(link_iter, None)
    while event is not None or link is not None:
        if link is None or (event is not None and event[0] < link.position):
            assert event is not None
            yield Row(event[0], event[1], None)
            event = next(event_iter, None)
        elif event is None or link.position < event[0]:
            yield Row(link.position, None, link)
            link = next(link_iter, None)
        else:
            yield Row(event[0], event[1], link)
            event, link = next(event_iter, None), next(link_iter, None)
