"""Who caused an event: a frozen value recorded on every event by the decision."""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

from workcenter.domain.errors import InvalidInput

ActorKind = Literal["user", "coordinator", "worker", "operator", "system", "unknown"]
ACTOR_KINDS: tuple[ActorKind, ...] = get_args(ActorKind)
ACTOR_ID_LIMIT = 200


class Actor(BaseModel):
    """Who decided an event: recorded when the command decides, never inferred later.

    ``kind`` is closed; ``id`` names the one of that kind (a user id, a worker's
    ``name@boot``). ``caused_by`` is set when the system acts because of someone:
    a budget stop that a worker's claim ran into is the system's, caused by that
    worker. ``unknown`` is only for events stored before actors were recorded.
    """

    # Frozen like every value of the domain (model.Immutable, which imports this module).
    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: ActorKind
    id: str
    # Most actors have no cause; storing a null on every event costs bytes. Left out by
    # pydantic's own serialiser, not a wrapping Python one: a call less per event (ADR-0038).
    caused_by: Actor | None = Field(default=None, exclude_if=lambda cause: cause is None)

    def __str__(self) -> str:
        text = self.kind if self.id == self.kind else f"{self.kind} {self.id}"
        return f"{text} (caused by {self.caused_by})" if self.caused_by else text

    def because_of(self, cause: Actor) -> Actor:
        return self.model_copy(update={"caused_by": cause})

    @property
    def as_worker(self) -> tuple[str, str] | None:
        """(name, boot id) of a worker actor, else None."""
        if self.kind != "worker":
            return None
        name, _, boot = self.id.rpartition("@")
        return (name, boot) if name else (self.id, "")


def actor_problem(actor: Actor) -> str | None:
    """Why ``actor`` cannot be recorded, or None (checked before any event is built)."""
    text = actor.id
    if actor.kind not in ACTOR_KINDS:
        return f"actor kind must be one of {', '.join(ACTOR_KINDS)}"
    if actor.kind == "unknown":
        return "the unknown actor is only for events stored before actors were recorded"
    if not text.strip() or text != text.strip():
        return "actor id must not be blank or padded"
    if len(text) > ACTOR_ID_LIMIT:
        return f"actor id must be at most {ACTOR_ID_LIMIT} characters"
    if not text.isprintable():
        return "actor id must not hold control characters"
    if actor.kind == "worker" and not actor.id.rpartition("@")[0]:
        return "a worker actor id is name@boot"
    return actor_problem(actor.caused_by) if actor.caused_by is not None else None


def resolve(value: Actor | str | None, default: Actor) -> Actor:
    """The actor a command records: ``default`` for None, else ``parse(value)``. A
    default built from caller input (a worker's name) is checked too."""
    return parse(default if value is None else value)


def parse(value: Actor | str) -> Actor:
    """An ``Actor``, or text ``kind:id`` (``user:alice``, ``worker:w1@boot``) or a bare
    kind, checked; InvalidInput for anything else, before anything is decided."""
    if isinstance(value, str):
        kind, colon, ident = value.partition(":")
        if kind not in ACTOR_KINDS:
            raise InvalidInput(
                f"actor {_shown(value)!r}: kind must be one of {', '.join(ACTOR_KINDS)}"
            )
        value = Actor.model_construct(kind=kind, id=ident if colon else kind)  # checked below
    if not isinstance(value, Actor) or not isinstance(value.id, str):
        raise InvalidInput(f"actor must be an Actor or 'kind:id' text, not {value!r}")
    problem = actor_problem(value) or _recorded_by_the_store_only(value)
    if problem:
        raise InvalidInput(f"actor {_shown(f'{value.kind}:{value.id}')!r}: {problem}")
    return value


def _recorded_by_the_store_only(actor: Actor) -> str | None:
    """Why an actor given to a command (a CLI's ``--actor``, a caller's text or Actor)
    cannot be one the store records by itself, or be caused by one: the system (a
    budget's stop, a lapsed lease) and any Coordinator but the plain ``coordinator`` (a
    turn's decisions are recorded under its id by the turn). Given, either made a
    command look like a budget's stop or a turn's decision in the audit, a turn's id
    or a look-alike of it alike (found by acceptance testing, ADR-0142)."""
    if actor.kind == "system":
        return "the system's actions are recorded by the store itself, not given"
    if actor.kind == "coordinator" and actor.id != COORDINATOR_ID:
        return (
            "a Coordinator turn's decisions are recorded by the turn itself; a plan or"
            " completion made outside a turn is the plain 'coordinator'"
        )
    return _recorded_by_the_store_only(actor.caused_by) if actor.caused_by else None


def _shown(text: str) -> str:
    """An actor as a refusal says it back: clipped, since a refused id may be any length."""
    return text if len(text) <= ACTOR_ID_LIMIT + 20 else text[: ACTOR_ID_LIMIT + 20] + "..."


def user(user_id: str = "user") -> Actor:
    return Actor(kind="user", id=user_id)


def worker(name: str, boot_id: str) -> Actor:
    return Actor(kind="worker", id=f"{name}@{boot_id}")


COORDINATOR_ID = "coordinator"
COORDINATOR = Actor(kind="coordinator", id=COORDINATOR_ID)
OPERATOR = Actor(kind="operator", id="operator")
USER = user()
# The system's actors: the budget, whose stops name who ran into them, and the leases.
BUDGET = Actor(kind="system", id="budget")
# Runs whose lease lapsed, ended by the store's own watch (a server's, a remote claim's):
# no person did it (found by acceptance testing: the audit said "by operator", ADR-0142).
LEASES = Actor(kind="system", id="leases")
# Events stored before actors were recorded (ADR-0017): unknown, never guessed.
LEGACY = Actor(kind="unknown", id="legacy")
