"""The reads a browser makes beside an item's detail DTO: a page of summary DTOs, the
item's budget (its execution control), its Actions and Runs as a timeline, and its
conversation with the Coordinator.

Every answer is a sanitised DTO of the projections (read-models.md 2), built from
states loaded through the repository at the clock's ``now``. Each also carries the
versions a client echoes back as expected versions (``itemVersion``, and the
ledger's ``controlVersion``), read before the states it shows, so the body is never
older than the versions it names.
"""

from __future__ import annotations

import math
import re
import unicodedata
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from workcenter.domain import inputs, planning
from workcenter.domain import resource_ledger as rl
from workcenter.domain import work_item as wi
from workcenter.domain.errors import InvalidInput
from workcenter.projections.conversation_dto import conversation_dto
from workcenter.projections.detail import Detail, DetailView
from workcenter.projections.dto import execution_control, goal_progress_dto, summary_dto
from workcenter.projections.dto_models import GoalProgressCounts
from workcenter.projections.execution import data_revision
from workcenter.projections.sanitize import sanitize_personal
from workcenter.projections.timeline import timeline_dto
from workcenter.projections.views import GOAL_LIMIT
from workcenter.projections.work_queue import WorkQueue
from workcenter.service_layer.ports import Clock
from workcenter.service_layer.read_models import ReadModels
from workcenter.service_layer.repository import Repository

MAX_PAGE = 100
MAX_SEARCH = 200
# Rows read at a time while a search looks for a page of matches.
SCAN_BATCH = 200
CURSOR = re.compile(r"^(-?0x[0-9a-f]+(?:\.[0-9a-f]*)?p[+-]?[0-9]{1,8})~([0-9a-f]{32})$")


@dataclass(frozen=True)
class SummaryPage:
    items: list[dict[str, Any]]
    total: int
    limit: int
    next: str | None

    def json(self) -> dict[str, Any]:
        return {"items": self.items, "total": self.total, "limit": self.limit, "next": self.next}


def folded(text: str) -> str:
    """``text`` as a search compares it, so that "any case" holds in every script (found
    by acceptance testing, ADR-0144): composed (an accent typed apart from its letter
    matches it typed as one; ligatures and full-width forms match their letters),
    case-folded, and Turkish's dotted capital I (U+0130) and dotless small i (U+0131)
    taken as i (case folding makes the first an i with a combining dot, and keeps the
    second, so neither met "istanbul")."""
    composed = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", text).casefold())
    return composed.replace("i\u0307", "i").replace("\u0131", "i")


def _cursor(row: dict[str, Any]) -> str:
    # The row's creation time, exactly (float.hex), and its id: where the next page starts.
    # The exponent's "+" is left out (fromhex takes it so), or a cursor sent in a query
    # string as it was given would read as a space.
    return f"{float(row['created_at']).hex().replace('p+', 'p')}~{row['key']}"


def _before(after: str | None) -> tuple[float, str] | None:
    if after is None:
        return None
    match = CURSOR.fullmatch(after) if isinstance(after, str) else None
    if match is None:
        raise InvalidInput("after must be the next cursor a page of this list returned")
    try:
        moment = float.fromhex(match[1])
    except OverflowError:  # a cursor's shape, past any time: the page after it is the first
        moment = -math.inf if match[1].startswith("-") else math.inf
    return moment, match[2]


class WebReads:
    def __init__(self, repository: Repository, read_models: ReadModels, clock: Clock) -> None:
        self.repo = repository
        self.read_models = read_models
        self.clock = clock

    def versions(self, work_item_id: UUID) -> tuple[int, int]:
        """(WorkItem version, ledger control version): what commands on it expect."""
        item = self.repo.work_item(inputs.aggregate_id(work_item_id, "WorkItem"))
        return item.version, self.repo.ledger(item.id).control_version

    def summaries(
        self,
        status: str | None = None,
        limit: int = 50,
        after: str | None = None,
        search: str | None = None,
    ) -> SummaryPage:
        """A page of summary DTOs (read-models.md 2.3), newest first, each with its goal
        progress counted (``goalProgress``: the criteria met and in all, the delivery).

        ``after`` is the ``next`` cursor of the page before: pages are cut at an item,
        not at a count, so items created meanwhile shift no page but the first.
        ``search`` keeps the items whose title or goal holds it (case-insensitively);
        ``total`` counts the items of the status, searched or not."""
        if status is not None and (not isinstance(status, str) or status not in wi.STATUSES):
            raise InvalidInput(f"status must be one of {', '.join(wi.STATUSES)}, not {status!r}")
        limit = inputs.version(limit, "limit")
        if not 1 <= limit <= MAX_PAGE:
            raise InvalidInput(f"limit must be from 1 to {MAX_PAGE}, not {limit}")
        before = _before(after)
        needle = folded(inputs.text(search, "search", MAX_SEARCH)) if search else ""
        view = self.read_models.fresh(WorkQueue.name)
        found: list[dict[str, Any]] = []
        batch = SCAN_BATCH if needle else limit + 1
        while len(found) <= limit:
            rows = view.newest_work_items(status, batch, before)
            for row in self._matching(rows, needle) if needle else rows:
                found.append(row)
                if len(found) > limit:
                    break
            if len(rows) < batch:
                break
            before = (rows[-1]["created_at"], rows[-1]["key"])
        more = len(found) > limit
        found = found[:limit]
        return SummaryPage(
            [self._summary(row["id"]) for row in found],
            view.count_work_items(status),
            limit,
            _cursor(found[-1]) if more else None,
        )

    def _matching(self, rows: list[dict[str, Any]], needle: str) -> list[dict[str, Any]]:
        """The rows whose title, or goal as the page shows it, holds ``needle``: the goals
        read from the detail view, a batch in one read (each item was loaded from its
        events, 12 s a search of 10,000 items; found by acceptance testing, ADR-0138); an
        item the view holds no DTO of (not yet, or a marker) is loaded."""
        titles = {row["id"]: folded(row["title"]) for row in rows}  # each folded once
        unmatched = [item_id for item_id, title in titles.items() if needle not in title]
        details: DetailView = self.read_models.view(Detail.name)
        goals = details.goals(unmatched)

        def goal(work_item_id: UUID) -> str:
            shown = goals.get(work_item_id)
            if shown is None:
                shown = sanitize_personal(self.repo.work_item(work_item_id).goal, GOAL_LIMIT)
            return shown

        return [
            row for row in rows if needle in titles[row["id"]] or needle in folded(goal(row["id"]))
        ]

    def _summary(self, work_item_id: UUID) -> dict[str, Any]:
        item = self.repo.work_item(work_item_id)
        ledger = self.repo.ledger(item.id)
        actions = self.repo.actions(item)
        # The Conversation's version, as the detail carries it: a row said 0 (ADR-0136).
        conversation = self.repo.conversation(item.id)
        dto = summary_dto(
            item,
            actions,
            ledger,
            now=self.clock.now(),
            coordinator_revision=conversation.coordinator_revision if conversation else 0,
            dispatching=conversation.dispatching if conversation else (),
        )
        progress = goal_progress_dto(planning.progress(item, actions))
        counts: GoalProgressCounts = (
            {
                "completedCriteriaCount": progress["completedCriteriaCount"],
                "totalCriteriaCount": progress["totalCriteriaCount"],
                "deliveryStatus": progress["delivery"]["status"],
            }
            if progress is not None
            else {"completedCriteriaCount": 0, "totalCriteriaCount": 0, "deliveryStatus": "unmet"}
        )
        dto["goalProgress"] = counts
        return dto

    def progress(self, work_item_id: UUID) -> dict[str, Any]:
        """The goal-progress DTO (read-models.md 2.5), null when there is none."""
        item = self.repo.work_item(inputs.aggregate_id(work_item_id, "WorkItem"))
        ledger = self.repo.ledger(item.id)
        return _header(item, ledger) | {
            "goalProgress": goal_progress_dto(planning.progress(item, self.repo.actions(item))),
        }

    def budget(self, work_item_id: UUID) -> dict[str, Any]:
        """The item's execution control (limits, usage, attempts, stop; whitelisted)."""
        item = self.repo.work_item(inputs.aggregate_id(work_item_id, "WorkItem"))
        ledger = self.repo.ledger(item.id)
        actions = self.repo.actions(item)
        conversation = self.repo.conversation(item.id)
        now = self.clock.now()
        return _header(item, ledger) | {
            "executionControl": execution_control(
                ledger,
                actions,
                now=now,
                data_revision=data_revision(item, actions.values(), ledger, now=now),
                dispatching=conversation.dispatching if conversation else (),
                done=item.status == "done",
            ),
        }

    def timeline(self, work_item_id: UUID) -> dict[str, Any]:
        item = self.repo.work_item(inputs.aggregate_id(work_item_id, "WorkItem"))
        ledger = self.repo.ledger(item.id)
        dto = timeline_dto(item, self.repo.actions(item), ledger, now=self.clock.now())
        return dto | {"itemVersion": item.version, "controlVersion": ledger.control_version}

    def conversation(self, work_item_id: UUID) -> dict[str, Any]:
        """The item's messages and Coordinator turns, sanitised and bounded."""
        item = self.repo.work_item(inputs.aggregate_id(work_item_id, "WorkItem"))
        ledger = self.repo.ledger(item.id)
        talk = self.repo.conversation(item.id)
        return (
            _header(item, ledger)
            | conversation_dto(talk)
            | {"planWait": planning.plan_wait(item, talk)}
        )


def _header(item: wi.WorkItemState, ledger: rl.LedgerState) -> dict[str, Any]:
    """What every per-item read starts with: the item, its status and the versions a
    command must echo back."""
    return {
        "workItemId": str(item.id),
        "status": item.status,
        "itemVersion": item.version,
        "controlVersion": ledger.control_version,
    }
