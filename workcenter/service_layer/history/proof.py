"""Proving the history: verifying the hash chain over the events and taking an anchor
of its head (ADR-0028). The chain is written by the recorder; this reads it through
the ``ChainReader`` port and walks it with the pure checks of ``hash_chain``."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import closing
from uuid import UUID

from workcenter.domain import inputs
from workcenter.domain.errors import InvalidInput
from workcenter.service_layer.history import hash_chain
from workcenter.service_layer.history.hash_chain import Anchor, Verdict
from workcenter.service_layer.ports import ChainReader
from workcenter.service_layer.queries import audit_trail
from workcenter.service_layer.repository import Repository

# (position reached, the store's last position when the walk began)
VerifyProgress = Callable[[int, int], None]


class HistoryProof:
    def __init__(self, repository: Repository, chain: ChainReader) -> None:
        self.repo = repository
        self.chain = chain

    def verify(
        self,
        work_item_id: UUID | None,
        anchor: Anchor | str | None,
        progress: VerifyProgress | None,
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
            streams = audit_trail.streams(self.repo.work_item(work_item_id))
        _, last = self.chain.extent()
        step = None if progress is None else lambda position: progress(position, last)
        with closing(self.chain.walk(streams)) as rows:
            return hash_chain.verify(
                rows,
                whole_store=streams is None,
                anchor=anchor,
                scope=work_item_id,
                progress=step,
            )

    def anchor(self) -> Anchor | None:
        """The chain's head as an anchor, or None while the store has no events."""
        head, _ = self.chain.extent()
        return hash_chain.anchor_of(head) if head else None
