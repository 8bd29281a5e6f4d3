"""What a store's opens chained (``hash_chain.chain_unchained``): links an open made for
events that had none (a store written with the chain off or before it, or links
deleted in the database) prove those events only as they were stored then, so each
batch is recorded beside the chain, and every ``audit verify`` says so (ADR-0137)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from workcenter.service_layer.history.hash_chain import HistoryConflict

# The record's table, beside the chain's.
LATE_TABLE: Final = "event_chain_late"


def late_links(row: Sequence[Any]) -> LateLinks:
    """A stored row of ``LATE_TABLE`` read, or ``HistoryConflict`` when it is not one
    (edited in the database: a verify ended in a traceback; found by acceptance testing,
    ADR-0137)."""
    first, last, count, linked_at = row
    if not all(type(v) is int for v in (first, last, count)) or not isinstance(linked_at, str):
        raise HistoryConflict(
            f"a row of {LATE_TABLE}, the record of events chained on open, is not one"
            f" ({row!r}): it was edited in the database"
        )
    return LateLinks(first, last, count, linked_at)


@dataclass(frozen=True)
class LateLinks:
    """Events from position ``first`` to ``last`` that a store's open chained at
    ``linked_at`` (an ISO time, UTC), ``count`` of them (positions may have gaps)."""

    first: int
    last: int
    count: int
    linked_at: str

    def json(self) -> dict[str, Any]:
        return {
            "first": self.first,
            "last": self.last,
            "count": self.count,
            "linked_at": self.linked_at,
        }
