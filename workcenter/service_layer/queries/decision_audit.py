"""The decisions' audit over the store (ADR-0060, ADR-0061): an item's decision
provenance, the replay check of one item's or every item's decisions, and the lines
of an item's audit bundle. Reached from ``WorkCenter.maintenance``."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import closing
from dataclasses import dataclass, replace
from typing import Any
from uuid import UUID

from workcenter.domain import inputs
from workcenter.projections.work_queue import WorkQueue
from workcenter.service_layer.handlers.coordinator_rules import DecisionRules
from workcenter.service_layer.history import bundle, hash_chain
from workcenter.service_layer.ports import ChainReader, StreamReader
from workcenter.service_layer.queries import audit_trail, decision_provenance, decision_replay
from workcenter.service_layer.queries.decision_replay import Replayed
from workcenter.service_layer.queries.decision_turns import Positioned
from workcenter.service_layer.read_models import ReadModels
from workcenter.service_layer.repository import Repository

# (items replayed, items in all)
ReplayProgress = Callable[[int, int], None]
PAGE = 1_000


@dataclass(frozen=True)
class ReplayReport:
    """Every judged reply replayed, per item, and how much history it read."""

    items: int
    events: int
    results: list[tuple[UUID, Replayed]]

    @property
    def same(self) -> bool:
        return all(r.same for _, r in self.results)

    @property
    def differing(self) -> list[tuple[UUID, Replayed]]:
        return [(i, r) for i, r in self.results if not r.same]

    def json(self) -> dict[str, Any]:
        return {
            "ok": self.same,
            "items": self.items,
            "events": self.events,
            "turns": len(self.results),
            "differs": len(self.differing),
            "replayed": [{"work_item_id": str(i), **r.json()} for i, r in self.results],
        }


def replay_events(
    work_item_id: UUID, events: Sequence[Positioned], rules: DecisionRules
) -> ReplayReport:
    """The replay of one item's merged events (from the store or a bundle)."""
    results = [(work_item_id, r) for r in decision_replay.replay(events, rules)]
    return ReplayReport(1, len(events), results)


class DecisionAudit:
    def __init__(
        self,
        repository: Repository,
        read_models: ReadModels,
        read_streams: StreamReader,
        chain: ChainReader,
        rules: DecisionRules,
        *,
        sealed: bool,
    ) -> None:
        self.repo = repository
        self.read_models = read_models
        self.read_streams = read_streams
        self.chain = chain
        self.rules = rules
        self.sealed = sealed  # the events are stored encrypted

    def events(self, work_item_id: UUID) -> list[Positioned]:
        item = self.repo.work_item(inputs.aggregate_id(work_item_id, "WorkItem"))
        return self.read_streams(audit_trail.streams(item))

    def decisions(self, work_item_id: UUID) -> list[dict[str, Any]]:
        return decision_provenance.provenance(self.events(work_item_id))

    def replay(
        self,
        work_item_id: UUID | None,
        rules: DecisionRules | None,
        progress: ReplayProgress | None,
    ) -> ReplayReport:
        rules = rules or self.rules
        if work_item_id is None:
            ids = self._every_item()
        else:
            ids = [self.repo.work_item(inputs.aggregate_id(work_item_id, "WorkItem")).id]
        results: list[tuple[UUID, Replayed]] = []
        events = 0
        for done, item_id in enumerate(ids, 1):
            report = replay_events(item_id, self.events(item_id), rules)
            results += self._blamed(item_id, report.results)
            events += report.events
            if progress is not None:
                progress(done, len(ids))
        return ReplayReport(len(ids), events, results)

    def _blamed(
        self, work_item_id: UUID, results: list[tuple[UUID, Replayed]]
    ) -> list[tuple[UUID, Replayed]]:
        """A turn that differs after the item's hash chain breaks (at or before the write
        of its verdict) differs because the history was altered: it says where."""
        if all(r.same for _, r in results):
            return results
        streams = audit_trail.streams(self.repo.work_item(work_item_id))
        with closing(self.chain.walk(streams)) as rows:
            broken = hash_chain.verify(rows, whole_store=False, scope=work_item_id).broken
        if broken is None:
            return results
        where = f"the hash chain breaks at position {broken.position} ({broken.kind})"
        return [
            (i, r)
            if r.same or r.position < broken.position
            else (i, replace(r, differences=(*r.differences, where), cause="history"))
            for i, r in results
        ]

    def _every_item(self) -> list[UUID]:
        queue = self.read_models.fresh(WorkQueue.name)
        ids: list[UUID] = []
        while True:
            page = queue.work_items(None, limit=PAGE, offset=len(ids))
            ids += [row["id"] for row in page]
            if len(page) < PAGE:
                return ids

    def bundle_lines(self, work_item_id: UUID) -> Iterator[bytes]:
        """The item's audit bundle, line by line; read in one transaction."""
        item = self.repo.work_item(inputs.aggregate_id(work_item_id, "WorkItem"))
        streams = audit_trail.streams(item)
        with closing(self.chain.walk(streams)) as walk:
            rows = list(walk)
        # Taken after the walk, so that it follows every event exported.
        head, _ = self.chain.extent()
        anchor = hash_chain.anchor_of(head) if head else None
        first = bundle.header(item.id, streams, len(rows), anchor)
        first["sealed"] = self.sealed
        yield from bundle.lines(first, rows)
