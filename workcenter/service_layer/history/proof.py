"""Proving the history: verifying the hash chain over the events and taking an anchor
of its head (ADR-0028). The chain is written by the recorder; this reads it through
the ``ChainReader`` port and walks it with the pure checks of ``hash_chain``."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import closing
from dataclasses import replace
from itertools import groupby
from uuid import UUID

from workcenter.domain import inputs
from workcenter.domain.errors import InvalidInput, UndecodableEvent
from workcenter.domain.model import NOT_THIS_STREAMS, AggregateState
from workcenter.service_layer.history import hash_chain
from workcenter.service_layer.history.hash_chain import Anchor, DamagedSnapshot, Verdict
from workcenter.service_layer.ports import ChainReader, SnapshotCheck, StoredSnapshot
from workcenter.service_layer.queries import audit_trail
from workcenter.service_layer.repository import Repository

NOT_THE_FOLD = "it is not the fold of the stream's events at its version"

VerifyProgress = Callable[[str, int, int], None]
"""Called after each page of the walk with ("events", position reached, the store's last
position when the walk began), then, once every event verified, after each stream's
snapshots were checked with ("snapshots", streams checked, streams to check)."""


class HistoryProof:
    def __init__(
        self, repository: Repository, chain: ChainReader, snapshots: SnapshotCheck | None = None
    ) -> None:
        self.repo = repository
        self.chain = chain
        self.snapshots = snapshots

    def verify(
        self,
        work_item_id: UUID | None,
        anchor: Anchor | str | None,
        progress: VerifyProgress | None,
        *,
        with_snapshots: bool = True,
    ) -> Verdict:
        if isinstance(anchor, str):
            anchor = Anchor.parse(anchor)
        elif anchor is not None and not isinstance(anchor, Anchor):
            raise InvalidInput(f"anchor must be DIGEST@POSITION, not {anchor!r}")
        streams = None
        if work_item_id is not None:
            if anchor is not None:
                raise InvalidInput(
                    "an anchor proves the whole history: verify without a WorkItem to use it"
                )
            work_item_id = inputs.aggregate_id(work_item_id, "WorkItem")
            try:
                streams = audit_trail.streams(self.repo.work_item(work_item_id))
            except UndecodableEvent as damaged:
                # The item's own stream holds bytes that do not decode: its Actions are
                # known only from the events before them. The damaged event is in the
                # streams walked, so the walk names its link (or one broken before it).
                streams = self._streams_before(work_item_id, damaged)
                verdict = self._walk(streams, None, work_item_id, progress)
                if verdict.ok:
                    # Its digest holds (hashed again after the edit): the walk proves
                    # nothing about bytes that cannot be read, so the damage is the answer.
                    raise damaged from None
                return verdict
        return self._walk(streams, anchor, work_item_id, progress, with_snapshots)

    def _streams_before(self, work_item_id: UUID, damaged: UndecodableEvent) -> list[UUID]:
        """The item's streams as far as its events before ``damaged`` tell them."""
        if damaged.stream == work_item_id and damaged.version > 1:
            try:
                return audit_trail.streams(self.repo.work_item(work_item_id, damaged.version - 1))
            except UndecodableEvent:
                pass  # an older event too (a snapshot's fold is no help): the streams it names
        return audit_trail.streams_of_id(work_item_id)

    def _walk(
        self,
        streams: list[UUID] | None,
        anchor: Anchor | None,
        work_item_id: UUID | None,
        progress: VerifyProgress | None,
        with_snapshots: bool = True,
    ) -> Verdict:
        _, last = self.chain.extent()
        step = None if progress is None else lambda position: progress("events", position, last)
        with closing(self.chain.walk(streams)) as rows:
            verdict = hash_chain.verify(
                rows,
                whole_store=streams is None,
                anchor=anchor,
                scope=work_item_id,
                progress=step,
            )
        verdict = replace(verdict, linked_on_open=tuple(self.chain.linked_late()))
        if self.snapshots is None or not with_snapshots:
            return verdict
        damaged: list[DamagedSnapshot] = []
        mismatched: list[DamagedSnapshot] = []
        # Each stream's fold reads its events again: the caller hears of each, as of each
        # page of the walk, so a stop is taken between two (ADR-0100). Not once the walk
        # found a break: a stop would then hide the verdict in hand (ADR-0106).
        told = progress if progress is not None and verdict.broken is None else None
        try:
            to_check, snapshots = self.snapshots(streams)
            for checked, (stream, of_stream) in enumerate(
                groupby(snapshots, key=lambda s: s.stream), start=1
            ):
                readable = []
                for snapshot in of_stream:
                    if snapshot.damage is None:
                        readable.append(snapshot)
                    else:
                        damaged.append(DamagedSnapshot(stream, snapshot.version, snapshot.damage))
                mismatched.extend(self._mismatched(stream, readable))
                if told is not None:
                    told("snapshots", checked, to_check)
        except Exception:
            # A row the store cannot even read (bytes made text that is no UTF-8, which
            # the library's read refuses): the walk found its break, which is said; only
            # the snapshots' check failed (found by acceptance testing, ADR-0134).
            if verdict.broken is None:
                raise
            return verdict
        return replace(
            verdict, damaged_snapshots=tuple(damaged), mismatched_snapshots=tuple(mismatched)
        )

    def _mismatched(
        self, stream: UUID, snapshots: list[StoredSnapshot]
    ) -> Iterator[DamagedSnapshot]:
        """The stream's snapshots whose state is not the fold of its events at their
        version: its events read once, up to its newest snapshot."""
        if not snapshots:
            return
        try:
            folds = self.repo.folds_of_events(stream, [s.version for s in snapshots])
        except UndecodableEvent:
            return  # an event that does not decode: the stream's loads raise it anyway
        for snapshot in snapshots:
            # No state (an event's row) or no fold (past the stream's end, or no
            # aggregate's stream) equals nothing.
            fold = folds.get(snapshot.version)
            if snapshot.state is None or fold is None or fold != snapshot.state:
                # A row that is no snapshot of this stream at this version, which loads go
                # past, is named for what it is (found by acceptance testing: the words
                # said that loads start from it).
                state = snapshot.state
                ours = isinstance(state, AggregateState) and (state.id, state.version) == (
                    stream,
                    snapshot.version,
                )
                reason = NOT_THE_FOLD if ours else NOT_THIS_STREAMS
                yield DamagedSnapshot(stream, snapshot.version, reason)

    def anchor(self) -> Anchor | None:
        """The chain's head as an anchor, or None while the store has no events."""
        head, _ = self.chain.extent()
        return hash_chain.anchor_of(head) if head else None

    def anchor_at(self, position: int) -> Anchor | None:
        """The chain's link at ``position`` as an anchor, or None where it has none (no
        event there, or the chain off)."""
        link = self.chain.link_at(position)
        return hash_chain.anchor_of(link) if link else None
