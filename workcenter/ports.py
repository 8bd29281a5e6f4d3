"""The ports the service layer declares: what it needs from the outside world.

The composition root (``workcenter.bootstrap``) plugs in the SQLite adapters; the
service modules know only these shapes, so another recorder (PostgreSQL, say) is a
change to the bootstrap, not to the commands.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Protocol
from uuid import UUID

from workcenter.domain.model import DomainEvent
from workcenter.projections.inline import InlineWrite


class Clock(Protocol):
    def now(self) -> datetime: ...


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)


class TransactionArguments(Protocol):
    """How a save hands the recorder what it writes in the events' own transaction.

    The library passes ``save``'s keyword arguments down to the recorder's insert;
    the recorder adapter decides their names and shapes."""

    def snapshots(self, snapshots: Sequence[DomainEvent]) -> dict[str, Any]: ...

    def inline(self, write: InlineWrite) -> dict[str, Any]: ...


class StreamReader(Protocol):
    """(position, event) of every event of ``stream_ids`` in write order, up to ``until``."""

    def __call__(
        self, stream_ids: Sequence[UUID], *, until: int | None = None
    ) -> list[tuple[int, DomainEvent]]: ...
