"""The inline lifecycle: bring read models up to the head right after each save.

Each view keeps its own position in the ``tracking`` table, written in the
same transaction as its rows. Catching up reads only the notifications after
the lowest position, so a view left behind by a crash (or by another process
writing the same store) is brought up to date on the next save or read.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any, Protocol

from eventsourcing.persistence import IntegrityError

from workcenter.domain.model import DomainEvent
from workcenter.projections.tracked import TrackedView, apply_together

PAGE = 500


class View(Protocol):
    def apply(self, application_name: str, batch: Sequence[tuple[int, DomainEvent]]) -> Any: ...

    def max_tracking_id(self, application_name: str) -> int | None: ...


class InlineProjections:
    def __init__(self, recorder: Any, mapper: Any, views: dict[str, View]) -> None:
        self._recorder = recorder
        self._mapper = mapper
        self.views = views

    def position(self, name: str) -> int:
        return self.views[name].max_tracking_id(name) or 0

    def catch_up(self, head: int | None = None, names: Collection[str] | None = None) -> int:
        """Apply every notification up to ``head`` (default: the newest) to the views (default:
        all, else those ``names``); returns the events applied (per view, summed)."""
        views = self.views if names is None else {n: self.views[n] for n in names}
        if not views:
            return 0
        applied = 0
        while True:
            positions = {name: self.position(name) for name in views}
            start = min(positions.values(), default=0)
            if head is not None and start >= head:
                return applied
            page = self._recorder.select_notifications(
                start=start, limit=PAGE, stop=head, inclusive_of_start=False
            )
            if not page:
                return applied
            batch = [(n.id, self._mapper.to_domain_event(n)) for n in page]
            if _share_one_datastore(views):
                applied += apply_together(views, batch)  # type: ignore[arg-type]
                if len(page) < PAGE:
                    return applied
                continue
            raced = False
            for name, view in views.items():
                mine = [entry for entry in batch if entry[0] > positions[name]]
                try:
                    done = view.apply(name, mine)
                except IntegrityError:
                    # Another process applied these first; re-read positions and go on.
                    raced = True
                    continue
                # A TrackedView says how many were new (it skips what another writer applied).
                applied += done if isinstance(done, int) else len(mine)
            if len(page) < PAGE and not raced:
                # A short page was the head when read: no need to ask for an empty one.
                return applied


def _share_one_datastore(views: dict[str, View]) -> bool:
    """Several TrackedViews of one SQLite file can be caught up with one commit."""
    if len(views) < 2 or not all(isinstance(v, TrackedView) for v in views.values()):
        return False
    return len({id(v.datastore) for v in views.values()}) == 1  # type: ignore[attr-defined]
