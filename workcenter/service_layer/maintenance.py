"""The operator's verbs over the whole store: proving its history (ADR-0028) and the
read models' lifecycle (ADR-0011).

They act on the store, not on one item's work, and the CLI's operator commands
(`verify`, `anchor`, `projections status|rebuild`) are their callers; the facade
exposes them as one part, ``WorkCenter.maintenance`` (ADR-0039).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from workcenter.domain import inputs
from workcenter.domain.errors import InvalidInput
from workcenter.projections.lifecycle import Progress, ProjectionStatus, RebuildReport
from workcenter.service_layer.handlers.coordinator_rules import DecisionRules, check_rules
from workcenter.service_layer.handlers.run import RunCommands
from workcenter.service_layer.history.hash_chain import Anchor, Verdict
from workcenter.service_layer.history.proof import HistoryProof, VerifyProgress
from workcenter.service_layer.queries.decision_audit import (
    DecisionAudit,
    ReplayProgress,
    ReplayReport,
)
from workcenter.service_layer.read_models import ReadModels


@dataclass(frozen=True)
class Leases:
    """The Runs held under a lease now: ``live`` ones, and ``lapsed`` ones, whose worker is
    gone or stalled (each ends at the next recovery: a worker's, a claim's or a server's
    watch), the oldest lapsed at ``oldest_lapse``."""

    live: int
    lapsed: int
    oldest_lapse: datetime | None

    def json(self) -> dict[str, Any]:
        lapse = self.oldest_lapse
        return {
            "live": self.live,
            "lapsed": self.lapsed,
            "oldest_lapse": lapse.astimezone(UTC).isoformat().replace("+00:00", "Z")
            if lapse
            else None,
        }


class Maintenance:
    def __init__(
        self,
        proof: HistoryProof,
        read_models: ReadModels,
        decisions: DecisionAudit,
        runs: RunCommands,
    ) -> None:
        self._proof = proof
        self._read_models = read_models
        self._decisions = decisions
        self._runs = runs

    def verify_history(
        self,
        work_item_id: UUID | None = None,
        *,
        anchor: Anchor | str | None = None,
        progress: VerifyProgress | None = None,
        snapshots: bool = True,
    ) -> Verdict:
        """Walk the hash chain over the whole store (or one WorkItem's streams) and report
        the first broken link; with ``anchor`` (``DIGEST@POSITION`` from
        ``history_anchor``), also that nothing up to its position changed (ADR-0028).
        ``snapshots=False`` leaves out the check of the snapshots against their events
        (a copy, which writes none, needs only the events' proof)."""
        _callable_or_none(progress, "progress")
        snapshots = inputs.flag(snapshots, "snapshots")
        return self._proof.verify(work_item_id, anchor, progress, with_snapshots=snapshots)

    def history_anchor(self) -> Anchor | None:
        """The chain's head digest and position, to keep outside the store."""
        return self._proof.anchor()

    def anchor_at(self, position: int) -> Anchor | None:
        """The anchor of the event at ``position`` (None where the chain has no link):
        what an export keeps to learn, when it resumes, that the history it read is
        still the store's (not an older backup's, restored and written on; ADR-0145)."""
        return self._proof.anchor_at(inputs.version(position, "position"))

    def decisions(self, work_item_id: UUID) -> list[dict[str, Any]]:
        """Each Coordinator turn of the item, in order: its wake, the versions its request
        was built from, its attempts and their cost, the reply's decision, the verdict
        and the events it caused (ADR-0061), masked like the audit."""
        return self._decisions.decisions(work_item_id)

    def replay_decisions(
        self,
        work_item_id: UUID | None = None,
        *,
        rules: DecisionRules | None = None,
        progress: ReplayProgress | None = None,
    ) -> ReplayReport:
        """Judge every stored reply of the item (or of every item) again with today's
        rules (or ``rules``) on the state rebuilt from the history, writing nothing, and
        compare with the recorded verdict and effects (ADR-0061)."""
        if rules is not None:
            check_rules(rules, "rules")
        _callable_or_none(progress, "progress")
        return self._decisions.replay(work_item_id, rules, progress)

    def export_bundle(self, work_item_id: UUID) -> Iterator[bytes]:
        """The item's audit bundle (ADR-0060), line by line."""
        return self._decisions.bundle_lines(work_item_id)

    def projection_names(self) -> list[str]:
        """The registered read models' names, in the order a rebuild of all takes them."""
        return list(self._read_models.registry)

    def projection_status(self) -> list[ProjectionStatus]:
        """Each registered read model's position, the head of the event sequence, the lag."""
        return self._read_models.status()

    def leases(self) -> Leases:
        """The Runs held under live and lapsed leases, store-wide, by the store's clock:
        lapsed ones that stay mean no worker, claim or server watch recovers them."""
        now = self._runs.clock.now()
        expiries = [expires_at for *_, expires_at in self._runs.work_queue().live_runs()]
        lapsed = [at for at in expiries if at <= now.timestamp()]
        return Leases(
            live=len(expiries) - len(lapsed),
            lapsed=len(lapsed),
            oldest_lapse=datetime.fromtimestamp(min(lapsed), UTC) if lapsed else None,
        )

    def rebuild_projection(
        self, name: str | None = None, *, progress: Progress | None = None
    ) -> list[RebuildReport]:
        """Replay one read model (default: every one) from zero into shadow tables and swap
        it in atomically: readers see the old view until the new one is complete."""
        _callable_or_none(progress, "progress")
        return self._read_models.rebuild(name, progress)


def _callable_or_none(value: object, name: str) -> None:
    """``InvalidInput`` for a progress callback that cannot be called: it would fail only
    once the work had begun, as another error."""
    if value is not None and not callable(value):
        raise InvalidInput(f"{name} must be a function or None, not {type(value).__name__}")
