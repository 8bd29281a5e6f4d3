"""The ports the service layer declares: what it needs from the outside world.

The composition root (``workcenter.bootstrap``) plugs in the SQLite adapters; the
service modules know only these shapes, so another recorder (PostgreSQL, say) is a
change to the bootstrap, not to the commands.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, NamedTuple, Protocol, runtime_checkable
from uuid import UUID

from eventsourcing.persistence import StoredEvent

from workcenter.domain.errors import WorkcenterError
from workcenter.domain.model import DomainEvent
from workcenter.projections.inline import InlineWrite
from workcenter.service_layer.history.hash_chain import Link, Row
from workcenter.service_layer.history.late_links import LateLinks


class StoreUnreachable(WorkcenterError):
    """The store's server could not be reached (a restart, a failover, a network cut): a
    write in flight may or may not have been made. Raised by a client-server store's
    adapter; what the service layer holds on to (a reply it paid for) it tries again
    once the store answers, reading first whether the write was made."""

    code = "store_unreachable"


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


@runtime_checkable
class StreamsAfter(Protocol):
    """A recorder that reads the events of several streams, each after a version, in one
    read transaction (the repository loads a command's cached aggregates with it)."""

    def select_streams_after(
        self, after: Sequence[tuple[UUID, int]]
    ) -> list[Sequence[StoredEvent]]: ...


class StreamReader(Protocol):
    """(position, event) of every event of ``stream_ids`` in write order, up to ``until``."""

    def __call__(
        self, stream_ids: Sequence[UUID], *, until: int | None = None
    ) -> list[tuple[int, DomainEvent]]: ...


class ChainReader(Protocol):
    """The hash chain as stored (ADR-0028), read for ``audit verify`` and ``audit anchor``."""

    def walk(self, streams: Sequence[UUID] | None) -> Generator[Row, None, None]:
        """Every position of the store (or of ``streams``) in order, in one read
        transaction that ends when the iterator is closed."""
        ...

    def extent(self) -> tuple[Link | None, int]:
        """The chain's head and the store's last position."""
        ...

    def link_at(self, position: int) -> Link | None:
        """The chain's link at ``position``, if it has one."""
        ...

    def linked_late(self) -> list[LateLinks]:
        """What opens of the store chained (``hash_chain.chain_unchained``), oldest first."""
        ...


class StoredSnapshot(NamedTuple):
    """A stored snapshot: its state, or why it does not decode (``damage``)."""

    stream: UUID | str  # text when the stored id is not a UUID (SQLite's column takes any)
    version: int
    state: Any
    damage: str | None


class SnapshotCheck(Protocol):
    """How many streams have snapshots, and the stored snapshots (of ``streams``, or
    all), oldest version of each stream first: one that does not decode is gone past by
    every load (ADR-0099), every other is checked against the fold of its stream's
    events (ADR-0103)."""

    def __call__(self, streams: Sequence[UUID] | None) -> tuple[int, Iterable[StoredSnapshot]]: ...


class NotificationReader(Protocol):
    """(position, event) of the events written after position ``after``, oldest first,
    at most ``limit`` of them: the event sequence as a change feed follows it."""

    def __call__(self, after: int, limit: int) -> list[tuple[int, DomainEvent]]: ...


# --- the Coordinator's LLM ----------------------------------------------------


class ProviderRequest(Protocol):
    """One provider turn's request, as the Coordinator prepared (and hashed) it.

    ``messages`` are chat messages (``{"role": ..., "content": ...}``) and
    ``reply_schema`` is the JSON schema a structured reply must satisfy; the
    body and its hash never change once prepared (coordinator.md 3.1)."""

    @property
    def turn_id(self) -> str: ...

    @property
    def attempt(self) -> int: ...

    @property
    def messages(self) -> Sequence[dict[str, str]]: ...

    @property
    def reply_schema(self) -> dict[str, Any]: ...

    @property
    def max_output_tokens(self) -> int | None:
        """The bound on the reply's tokens the provider declared and the budget reserved
        (send it as the server's ``max_tokens``); None: no bound, reserved at 16,384."""
        ...


class ProviderReply(Protocol):
    """What the model answered: its text (a JSON decision, or text around one) and
    the usage the provider reported (None when it reported none): a mapping, or the
    provider SDK's usage object as it came (a pydantic model, read by ``model_dump``)."""

    @property
    def text(self) -> str: ...

    @property
    def usage(self) -> object: ...


class CoordinatorProvider(Protocol):
    """What an embedding service implements to answer a Coordinator turn.

    ``before_request`` must be called right before every HTTP request the
    provider sends, hidden retries included: each call reserves budget through
    the ResourceLedger and raises ``ResourceStopError`` (or ``TurnFenceLost``)
    when the request must not be sent, which the provider lets propagate. A
    provider that cannot see its own retries calls it once. Failures raise
    ``ProviderFailed`` with ``transient`` set for rate limits and server errors.

    A provider may declare ``max_output_tokens`` (a whole number of at least 1): each
    request it is given then carries that bound on the reply, which the budget reserves
    instead of 16,384 tokens, and which the provider sends to its server.
    """

    def answer(
        self, request: ProviderRequest, before_request: Callable[[], None]
    ) -> ProviderReply: ...


@dataclass(frozen=True, slots=True)
class ProviderTurnRequest:
    """The ``ProviderRequest`` the Coordinator hands its provider; its fields are
    the prepared body, so nothing may mutate them after the hash is taken."""

    turn_id: str
    attempt: int
    messages: tuple[dict[str, str], ...]
    reply_schema: dict[str, Any]
    max_output_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class ProviderTurnReply:
    """A ``ProviderReply``: the model's text and the usage its provider reported."""

    text: str
    usage: dict[str, Any] | None = None
