"""Base types shared by every aggregate: frozen models and domain events.

The domain imports nothing of persistence. Events satisfy the
``eventsourcing`` library's event protocol structurally (an originator id,
an originator version and a timestamp), so the library can store them
without the domain importing it.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, ClassVar, Generic, Self, TypeVar
from uuid import UUID

from pydantic import BaseModel, ConfigDict

from workcenter.domain.actor import Actor
from workcenter.domain.errors import UndecodableEvent

# Sets an attribute of a frozen model, as pydantic's own copy does.
_set = object.__setattr__


class Immutable(BaseModel):
    """A frozen value: states, events and value objects are all immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """pydantic's shallow copy with ``update`` (unvalidated, as pydantic's is), in one
        step: every fold makes one per event, and pydantic's takes three times as long
        (ADR-0038). A model with extra fields or private attributes takes pydantic's."""
        if deep or self.__pydantic_private__ is not None or self.__pydantic_extra__ is not None:
            return super().model_copy(update=update, deep=deep)
        copied = object.__new__(type(self))
        changes = update or {}
        _set(copied, "__dict__", {**self.__dict__, **changes})
        _set(copied, "__pydantic_fields_set__", self.__pydantic_fields_set__ | changes.keys())
        _set(copied, "__pydantic_extra__", None)
        _set(copied, "__pydantic_private__", None)
        return copied


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


NOT_THIS_STREAMS = "it is not a snapshot of this stream at this version"
NO_START = "the stream's fold starts neither at its first event nor at a snapshot"


def no_start(event: DomainEvent) -> UndecodableEvent:
    """The typed error of a stream folded from ``event`` when it is not the stream's
    first: the events before it are gone from the store (deleted by hand), found by
    whichever reader folds it first; ``audit verify`` names the gap."""
    return UndecodableEvent(event.originator_id, event.originator_version, None, NO_START)


def snapshot_state(snapshot: object, stream: UUID | str, version: int) -> AggregateState:
    """The state a stored snapshot of ``stream`` at ``version`` holds, checked to be that
    stream's at that version: a row moved, copied or swapped in the snapshots table, or an
    event's row put there, is ``UndecodableEvent``, which every load goes past by
    replaying the stream's events (ADR-0099, ADR-0103)."""
    state = getattr(snapshot, "state", None)
    if not isinstance(state, AggregateState) or state.id != stream or state.version != version:
        raise UndecodableEvent(stream, version, None, NOT_THIS_STREAMS)
    return state


E = TypeVar("E", bound=DomainEvent)
F = TypeVar("F", bound=DomainEvent)


class Emitter(Generic[E]):
    """Numbers the events one decision appends to one aggregate's stream.

    Declare its type (``emit: Emitter[X] = Emitter(...)``) rather than subscripting the
    class at run time: ``Emitter[X](...)`` builds a typing alias at every call, ten
    times the cost of the call itself (ADR-0038)."""

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


def event_classes(base: type[DomainEvent] = DomainEvent) -> dict[str, type[DomainEvent]]:
    """Every event class under ``base`` (subclasses of subclasses too), by name."""
    found: dict[str, type[DomainEvent]] = {}
    for sub in base.__subclasses__():
        found[sub.__name__] = sub
        found |= event_classes(sub)
    return found
