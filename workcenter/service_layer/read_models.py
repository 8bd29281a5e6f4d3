"""The registry of read models, each with its lifecycle declared beside it.

A read model is written in a command's own transaction (inline) by every save or
by the saves its ``inline_for`` picks, and may be caught up when it is read and
found behind the head of the event log. With inline projections off (scale-out)
the models read ``ALWAYS`` (the work queue, the mailbox) are still written by the
saves, since their readers would otherwise catch them up from the log before every
claim (ADR-0116); the others are the projection runner's (asynchronous).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any, cast
from uuid import UUID

from eventsourcing.application import Application

from workcenter.domain.errors import InvalidInput
from workcenter.domain.model import DomainEvent
from workcenter.projections import lifecycle as projection_lifecycle
from workcenter.projections import sql
from workcenter.projections.inline import InlineProjections, InTransactionView
from workcenter.projections.lifecycle import Progress, ProjectionStatus, RebuildReport


class OnRead(Enum):
    """Whether a reader that finds the model behind the head catches it up first."""

    NEVER = "never"
    WITH_INLINE = "when inline projections are on"
    # Claims and recovery choose their candidates from it, whoever writes the views.
    ALWAYS = "always"


@dataclass(frozen=True)
class ReadModel:
    name: str
    view: Any  # a TrackedView: applied inline, on read and by the runner alike
    # The saves whose transaction writes it (None: every save).
    inline_for: Callable[[Sequence[DomainEvent]], bool] | None = None
    on_read: OnRead = OnRead.NEVER

    def written_inline(self, inline_projections: bool) -> bool:
        """Whether saves write it, with inline projections on or off (ADR-0116)."""
        return inline_projections or self.on_read is OnRead.ALWAYS


class ReadModels:
    """The registered read models of one event store and how each is kept current."""

    def __init__(
        self,
        store: Application[UUID],
        registry: Sequence[ReadModel],
        *,
        inline: bool,
        watch: projection_lifecycle.Watch,
    ) -> None:
        self.store = store
        self.inline = inline
        self.watch = watch  # given a rebuild's PostgreSQL datastore, as the store's is
        self.registry = {model.name: model for model in registry}
        self.projections = InlineProjections(
            store.recorder, store.mapper, {name: m.view for name, m in self.registry.items()}
        )
        if inline:
            # Views left behind by a crash of an older version or by other writers.
            self.projections.catch_up(names=self.every_save)

    @property
    def every_save(self) -> list[str]:
        return [name for name, m in self.registry.items() if m.inline_for is None]

    def view(self, name: str) -> Any:
        return self.registry[name].view

    def written_by(self, events: Sequence[DomainEvent]) -> dict[str, InTransactionView]:
        """The views a save of ``events`` writes in its own transaction."""
        return {
            name: cast(InTransactionView, m.view)
            for name, m in self.registry.items()
            if m.written_inline(self.inline) and (m.inline_for is None or m.inline_for(events))
        }

    def catches_up_on_read(self, name: str) -> bool:
        on_read = self.registry[name].on_read
        return on_read is OnRead.ALWAYS or (on_read is OnRead.WITH_INLINE and self.inline)

    def fresh(self, name: str) -> Any:
        """The view, brought up to the head first if its lifecycle says so."""
        if self.catches_up_on_read(name):
            self.catch_up([name])
        return self.view(name)

    def catch_up(self, names: Sequence[str]) -> None:
        self.projections.catch_up(names=names)

    def head(self, c: Any) -> int:
        """The last position of the event log, read with the view's cursor ``c``."""
        c.execute(sql.head_statement(self.store.recorder))
        return int(c.fetchone()[0] or 0)

    def at_head(self, c: Any, name: str) -> Callable[[], bool]:
        """Send, with the view's cursor ``c``, the read of whether view ``name`` has every
        event (its position and the head in one statement); the answer is taken by
        calling what this returns."""
        answer = sql.position_and_head(c, self.store.recorder, name)

        def current() -> bool:
            position, head = answer()
            return position >= head

        return current

    def status(self) -> list[ProjectionStatus]:
        return projection_lifecycle.status(self.projections, self.store.recorder)

    def rebuild(self, name: str | None, progress: Progress | None) -> list[RebuildReport]:
        if name is not None and not isinstance(name, str):
            raise InvalidInput(f"a read model's name is a string, not {type(name).__name__}")
        names = list(self.registry) if name is None else [name]
        unknown = [n for n in names if n not in self.registry]
        if unknown:
            known = ", ".join(self.registry)
            raise InvalidInput(f"no read model named {unknown[0]!r} (known: {known})")
        return [
            projection_lifecycle.rebuild(
                self.projections, self.store.recorder, self.store.mapper, n, progress, self.watch
            )
            for n in names
        ]
