"""The operator's verbs over the whole store: proving its history (ADR-0028) and the
read models' lifecycle (ADR-0011).

They act on the store, not on one item's work, and the CLI's operator commands
(`verify`, `anchor`, `projections status|rebuild`) are their callers; the facade
exposes them as one part, ``WorkCenter.maintenance`` (ADR-0039).
"""

from __future__ import annotations

from uuid import UUID

from workcenter.projections.lifecycle import Progress, ProjectionStatus, RebuildReport
from workcenter.service_layer.history.hash_chain import Anchor, Verdict
from workcenter.service_layer.history.proof import HistoryProof, VerifyProgress
from workcenter.service_layer.read_models import ReadModels


class Maintenance:
    def __init__(self, proof: HistoryProof, read_models: ReadModels) -> None:
        self._proof = proof
        self._read_models = read_models

    def verify_history(
        self,
        work_item_id: UUID | None = None,
        *,
        anchor: Anchor | str | None = None,
        progress: VerifyProgress | None = None,
    ) -> Verdict:
        """Walk the hash chain over the whole store (or one WorkItem's streams) and report
        the first broken link; with ``anchor`` (``DIGEST@POSITION`` from
        ``history_anchor``), also that nothing up to its position changed (ADR-0028)."""
        return self._proof.verify(work_item_id, anchor, progress)

    def history_anchor(self) -> Anchor | None:
        """The chain's head digest and position, to keep outside the store."""
        return self._proof.anchor()

    def projection_status(self) -> list[ProjectionStatus]:
        """Each registered read model's position, the head of the event sequence, the lag."""
        return self._read_models.status()

    def rebuild_projection(
        self, name: str | None = None, *, progress: Progress | None = None
    ) -> list[RebuildReport]:
        """Replay one read model (default: every one) from zero into shadow tables and swap
        it in atomically: readers see the old view until the new one is complete."""
        return self._read_models.rebuild(name, progress)
