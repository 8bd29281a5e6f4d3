"""Base types shared by every aggregate: frozen models and domain events.

The domain imports nothing of persistence. Events satisfy the
``eventsourcing`` library's event protocol structurally (an originator id,
an originator version and a timestamp), so the library can store them
without the domain importing it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar, Generic, TypeVar
from uuid import UUID

from pydantic import BaseModel, ConfigDict

from workcenter.domain.actor import Actor


class Immutable(BaseModel):
    """A frozen value: states, events and value objects are all immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class DomainEvent(Immutable):
    """An immutable fact about one aggregate at one version.

    ``timestamp`` is the domain time the event happened (from the injected
    clock), not the time it was written; ``actor`` is who decided it. Subclasses
    that change shape raise ``class_version`` and add ``upcast_vN_vN+1(state: dict)``
    static methods.
    """

    class_version: ClassVar[int] = 1

    originator_id: UUID
    originator_version: int
    timestamp: datetime
    actor: Actor


class AggregateState(Immutable):
    """The current state of an aggregate: a fold of its events."""

    id: UUID
    version: int


E = TypeVar("E", bound=DomainEvent)
F = TypeVar("F", bound=DomainEvent)


class Emitter(Generic[E]):
    """Numbers the events one decision appends to one aggregate's stream."""

    def __init__(self, aggregate_id: UUID, version: int, at: datetime, by: Actor) -> None:
        self._id = aggregate_id
        self._version = version
        self._at = at
        self._by = by
        self.events: list[E] = []

    @classmethod
    def after(cls, state: AggregateState, at: datetime, by: Actor) -> Emitter[E]:
        return cls(state.id, state.version, at, by)

    def __call__(self, event_class: type[F], **fields: Any) -> F:
        self._version += 1
        event = event_class(
            originator_id=self._id,
            originator_version=self._version,
            timestamp=self._at,
            actor=self._by,
            **fields,
        )
        self.events.append(event)  # type: ignore[arg-type]  # F is a subtype of E by use
        return event
