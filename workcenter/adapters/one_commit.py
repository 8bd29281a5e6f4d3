"""The save arguments that take a command's snapshots and inline views into the
transaction of its events, for ``OneCommitSQLiteRecorder`` (ADR-0016)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from uuid import UUID

from eventsourcing.application import Application

from workcenter.adapters.recorders import INLINE_WRITE, SNAPSHOTS, SnapshotWrite
from workcenter.domain.model import DomainEvent
from workcenter.projections.inline import InlineWrite


class OneCommitArguments:
    def __init__(self, store: Application[UUID]) -> None:
        self.store = store

    def snapshots(self, snapshots: Sequence[DomainEvent]) -> dict[str, Any]:
        assert self.store.snapshots is not None
        return {
            SNAPSHOTS: SnapshotWrite(
                self.store.snapshots.recorder,  # type: ignore[arg-type]
                [self.store.mapper.to_stored_event(s) for s in snapshots],
            )
        }

    def inline(self, write: InlineWrite) -> dict[str, Any]:
        return {INLINE_WRITE: write}
