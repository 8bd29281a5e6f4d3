"""The inline lifecycle: read models written in the same transaction as the events.

**In the command's transaction.** A command's save hands the event recorder an
``InlineWrite``: the recorder inserts the events, then, with the same cursor and
before the one commit, calls ``InlineWrite.apply`` with the notification ids it
was given. Each registered view reads its position (the recorder's insert holds
the write lock, so no other writer can move it), applies the command's events
from memory and writes its rows and new position. Nothing the command wrote is
read back, and the events and the views commit or roll back together. Views
that share one tracking table (every TrackedView of the store) read all their
positions in one statement and write the new ones in one more (ADR-0042),
instead of two statements per view.

**A lagging view.** If a view's position is below the notification just before
the command's first event (a writer with inline projections off, or an older
version, wrote events it has not seen), those events are applied first, read
from the log in the same transaction, so the view never skips one. A gap longer
than ``GAP_LIMIT`` is not read inside the command: the view is left untouched
(rows and position unchanged, so still consistent) and named in ``left_behind``
for the caller to catch it up after the commit. A view never applies an event
at or below its position, so nothing is applied twice.

**Catching up.** ``InlineProjections.catch_up`` reads the log after each view's
own position (``tracking`` table) and applies it page by page. It serves
opening a store (views left behind by a crash of an older version or by other
writers), the views kept on read, the runner, and over-long gaps.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol
from uuid import UUID

from eventsourcing.persistence import IntegrityError, Notification

from workcenter.domain.errors import UndecodableEvent
from workcenter.domain.model import AggregateState, DomainEvent
from workcenter.projections.tracked import (
    Batch,
    TrackedView,
    apply_together,
    positions_within,
    sharing_positions,
    write_positions,
)

PAGE = 500
# The most events of a lagging view's gap a command applies inside its own transaction;
# a longer gap would make one command hold the write lock for as long as a catch-up.
GAP_LIMIT = PAGE

ReadGap = Callable[[Any, int, int, int], Sequence[Notification]]
"""(cursor, after, before, limit) -> the notifications with ids in (after, before), at
most ``limit``, read in the caller's transaction."""


class View(Protocol):
    def apply(self, application_name: str, batch: Sequence[tuple[int, DomainEvent]]) -> Any: ...

    def max_tracking_id(self, application_name: str) -> int | None: ...


class InTransactionView(Protocol):
    """A read model the event recorder updates inside a command's transaction.

    ``c`` is the recorder's cursor (SQLite's, or a ``sql.PortableCursor`` over
    psycopg's), and the transaction already holds the event store's write lock."""

    def position_within(self, c: Any, application_name: str) -> int: ...

    def apply_within(self, c: Any, application_name: str, batch: Batch, position: int) -> int: ...


@dataclass(frozen=True)
class Prebuilt:
    """What a one-exchange PostgreSQL write sends besides its insert (ADR-0070): the views
    to lock and move to the write's last notification id, in lock order; the view that may
    lag on some streams only (the detail view, on the streams of the items it rewrites)
    and those streams; each stream the prebuilt DTOs read, at the version they read (0:
    none); the DTO rows; and the other views' rows, sent on a cursor by ``send_rows``."""

    views: Sequence[str] = ()
    lenient: str | None = None
    lenient_streams: Collection[UUID] = ()
    wanted: Sequence[tuple[UUID, int]] = ()
    detail_rows: Sequence[tuple[str, UUID, int, bytes]] = ()
    send_rows: Callable[[Any], None] = lambda c: None


@dataclass
class InlineWrite:
    """The read models a command's save updates in its own transaction, and its events."""

    events: Sequence[DomainEvent]
    views: Mapping[str, InTransactionView]
    mapper: Any  # decodes a lagging view's gap
    left_behind: list[str] = field(default_factory=list)
    # The command's states after ``events``, by aggregate id, for a view with a
    # ``rows_with_states`` (the detail view, ADR-0043).
    states: Mapping[UUID, AggregateState] | None = None
    # The view that reads other streams in the transaction, what it asked a pipelined
    # write to read ahead with its insert, and what that gave it (ADR-0069).
    reader: tuple[str, Any, Any] | None = None
    ahead: Any = None
    prebuilt: Mapping[UUID, bytes] | None = None
    _gap: Sequence[Notification] | None = None
    # Committed states the caller holds besides the command's (the repository's cache):
    # a view reading other streams starts from the newest it is given (ADR-0070).
    known: Callable[[UUID], AggregateState | None] | None = None

    def streams_ahead(self) -> list[tuple[UUID, int]] | None:
        """(stream, the version a view holds of it, 0 for none) of each stream a view
        will read inside the transaction, for a pipelined write to read with its insert
        (``take_ahead``), and the view's rows built meanwhile, before the lock; None when
        no view reads ahead. One view does: the detail view, the only one that reads
        other streams (ADR-0069)."""
        if not self.states:
            return None
        for name, view in self.views.items():
            reader: Any = view  # the detail view: streams_ahead, prebuild, fold_ahead
            if getattr(reader, "streams_ahead", None) is None:
                continue
            wanted = reader.streams_ahead(
                self.states, {event.originator_id for event in self.events}, self.known
            )
            self.reader = (name, reader, wanted)
            self.prebuilt = reader.prebuild(self.events, self.states, wanted)
            return [(i, held.version if held else 0) for i, (_, held) in wanted.items()]
        return None

    def prebuilt_write(self) -> Prebuilt | None:
        """The write's rows and the checks they rest on, if every view's rows were built
        before the lock (call after ``streams_ahead``): views sharing one tracking table,
        each either needing no positions or the detail view with every DTO prebuilt;
        None otherwise (the write then goes the two-exchange way)."""
        names = self.tracked_names()
        if names is None:
            return None
        free = [v for v in self.views.values() if not getattr(v, "ROWS_NEED_POSITIONS", True)]
        lenient: str | None = None
        rows: Sequence[tuple[str, UUID, int, bytes]] = []
        streams: set[UUID] = set()
        wanted: list[tuple[UUID, int]] = []
        for name, view in self.views.items():
            if not getattr(view, "ROWS_NEED_POSITIONS", True):
                continue
            if self.reader is None or self.reader[1] is not view or not self.prebuilt:
                return None
            assert self.states is not None  # streams_ahead set reader from them
            detail: Any = view  # the detail view: prebuilt_rows, assumed
            found = detail.prebuilt_rows(self.events, self.states, self.prebuilt)
            if found is None:
                return None
            rows, streams = found
            lenient = name
            wanted = detail.assumed(self.prebuilt, self.reader[2])

        def send_rows(c: Any) -> None:
            for view in free:
                view.rows_of(c, self.events)  # type: ignore[attr-defined]

        return Prebuilt(names, lenient, streams, wanted, rows, send_rows)

    def written_once(self) -> None:
        """After a one-exchange write committed: the detail view remembers the states it
        would have folded (``_apply_batch``)."""
        if self.reader is not None and self.states:
            self.reader[1].remember_written(self.events, self.states)

    def take_ahead(self, read: Sequence[tuple[Sequence[Any], int]]) -> None:
        """Hand the reading view what was read for ``streams_ahead``, in its order: the
        stored events of each stream and its newest version."""
        assert self.reader is not None
        _, view, wanted = self.reader
        self.ahead = view.fold_ahead(wanted, [(self._decoded(events), v) for events, v in read])

    def _decoded(self, events: Sequence[Any]) -> list[Any]:
        try:
            return [self.mapper.to_domain_event(e) for e in events]
        except UndecodableEvent:
            # A stream that leads with no state is read the usual way (``fold_ahead``),
            # which replays past a snapshot that does not decode and reports an event.
            return [None]

    def apply(
        self,
        c: Any,
        notification_ids: Sequence[int],
        read_gap: ReadGap,
        positions: Mapping[str, int] | None = None,
        gap: Sequence[Notification] | None = None,
    ) -> None:
        """Called by the recorder after inserting ``events`` as ``notification_ids``.

        ``positions``, when given, are the tracked views' positions the recorder read
        ahead with ``send_positions`` in this transaction, under the views' locks (a
        pipelined PostgreSQL write, ADR-0051): the positions are not read again, and
        their write is not counted back (``write_positions``). ``gap``, when given, is
        what it read ahead of the events before the command's and after the lowest of
        those positions, at most ``GAP_LIMIT + 1`` of them (ADR-0069)."""
        batch = list(zip(notification_ids, self.events, strict=True))
        self._gap = gap
        tracked = sharing_positions(self.views)
        if tracked is None:
            for name, view in self.views.items():
                position = view.position_within(c, name)
                due = self._due(c, name, position, batch, read_gap)
                if due:
                    view.apply_within(c, name, due, position)
            return
        read_ahead = positions is not None
        if positions is None:
            datastore = next(iter(tracked.values())).datastore
            positions = positions_within(c, datastore, list(tracked))
        moved: dict[str, int] = {}
        for name, tracked_view in tracked.items():
            due = self._due(c, name, positions[name], batch, read_gap)
            fresh = self._rows(c, tracked_view, due, positions[name]) if due else ()
            if fresh:
                moved[name] = fresh[-1][0]
        write_positions(c, moved, counted=not read_ahead)

    def tracked_names(self) -> list[str] | None:
        """The names of the views whose positions one statement reads (``sharing_positions``),
        in the order their locks are taken; None if the views do not share one table."""
        tracked = sharing_positions(self.views)
        return None if tracked is None else list(tracked)

    def forget_uncommitted(self) -> None:
        """After a failed save: the transaction may have rolled back after a view
        remembered states of versions never committed, and another writer may commit
        other events at those versions, so such a view forgets the command's aggregates
        (ADR-0043)."""
        aggregate_ids = {event.originator_id for event in self.events}
        for view in self.views.values():
            forget = getattr(view, "forget", None)
            if forget is not None:
                forget(aggregate_ids)

    def _rows(self, c: Any, view: TrackedView, due: Batch, position: int) -> Batch:
        # getattr, not a runtime Protocol: that isinstance costs 10-20 us a view.
        take = getattr(view, "rows_with_states", None) if self.states else None
        if take is None:
            return view.rows_within(c, due, position)
        if self.ahead is not None and self.reader is not None and self.reader[1] is view:
            # The DTOs built before the lock stand if nothing newer was read ahead: a
            # lagging gap's events of the item's streams are then in the states they
            # were built from (the command's after its own, or those read ahead).
            current = None if self.ahead.changed else self.prebuilt
            return take(c, due, position, self.states, self.ahead, current)
        return take(c, due, position, self.states)

    def _due(
        self, c: Any, name: str, position: int, batch: Batch, read_gap: ReadGap
    ) -> Batch | None:
        """What view ``name`` at ``position`` is given: the command's events, after the
        gap it missed, if any; None if that gap is too long to read here."""
        first = batch[0][0]
        if position >= first - 1:
            return batch
        ahead = self._gap
        if ahead is not None and len(ahead) <= GAP_LIMIT:
            gap: Sequence[Notification] = [n for n in ahead if position < n.id < first]
        else:
            gap = read_gap(c, position, first, GAP_LIMIT + 1)
        if len(gap) > GAP_LIMIT:
            self.left_behind.append(name)
            return None
        return [*((n.id, self.mapper.to_domain_event(n)) for n in gap), *batch]


class InlineProjections:
    def __init__(self, recorder: Any, mapper: Any, views: dict[str, View]) -> None:
        self._recorder = recorder
        self._mapper = mapper
        self.views = views

    def position(self, name: str) -> int:
        return self.views[name].max_tracking_id(name) or 0

    def catch_up(self, head: int | None = None, names: Collection[str] | None = None) -> int:
        """Apply every notification up to ``head`` (default: the newest) to the views (default:
        all, else those ``names``); returns the events applied (per view, summed)."""
        views = self.views if names is None else {n: self.views[n] for n in names}
        if not views:
            return 0
        applied = 0
        while True:
            positions = {name: self.position(name) for name in views}
            start = min(positions.values(), default=0)
            if head is not None and start >= head:
                return applied
            page = self._recorder.select_notifications(
                start=start, limit=PAGE, stop=head, inclusive_of_start=False
            )
            if not page:
                return applied
            done, raced = self._apply_page(views, page, positions)
            applied += done
            if len(page) < PAGE and not raced:
                # A short page was the head when read: no need to ask for an empty one.
                return applied

    def _apply_page(
        self, views: dict[str, View], page: Sequence[Notification], positions: dict[str, int]
    ) -> tuple[int, bool]:
        """(events applied, whether another writer raced a view) for one page."""
        # A view already past the page is left alone, not locked: the work queue a runner
        # follows behind writers that keep it inline (ADR-0116) would otherwise be locked
        # while the runner builds detail DTOs, and every write waits for it in the table's
        # lock. Positions only move forward, so one read before the lock is enough.
        views = {name: view for name, view in views.items() if positions[name] < page[-1].id}
        if not views:
            return 0, False
        batch = [(n.id, self._mapper.to_domain_event(n)) for n in page]
        if _share_one_datastore(views):
            return apply_together(views, batch), False  # type: ignore[arg-type]
        applied = 0
        raced = False
        for name, view in views.items():
            mine = [entry for entry in batch if entry[0] > positions[name]]
            try:
                done = view.apply(name, mine)
            except IntegrityError:
                # Another process applied these first; re-read positions and go on.
                raced = True
                continue
            # A TrackedView says how many were new (it skips what another writer applied).
            applied += done if isinstance(done, int) else len(mine)
        return applied, raced


def _share_one_datastore(views: dict[str, View]) -> bool:
    """Several TrackedViews of one database can be caught up with one commit."""
    if len(views) < 2 or not all(isinstance(v, TrackedView) for v in views.values()):
        return False
    return len({id(v.datastore) for v in views.values()}) == 1  # type: ignore[attr-defined]
