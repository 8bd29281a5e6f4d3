"""Shared fixtures for service-layer tests: a fake clock, a WorkCenter on a temp
SQLite file, and helpers to create items, plan Actions and build run reports.

Helpers are plain functions; test modules import them with
``from conftest import ...`` (pytest puts this directory on ``sys.path``).
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from unittest import mock

import orjson
import postgres
import pytest

from workcenter.application import Claim, WorkCenter
from workcenter.domain import action as act
from workcenter.domain import work_item as wi
from workcenter.projections.dto import detail_json
from workcenter.service_layer.handlers.resource_ledger import BudgetCommands
from workcenter.service_layer.read_models import ReadModels

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
CRITERIA: tuple[str, ...] = ("Tests pass", "Docs updated")
BOOT_ID = "boot-1"
WORKER = "w1"


class FakeClock:
    """An injectable clock: time moves only when a test says so."""

    def __init__(self, start: datetime = T0) -> None:
        self._now = start

    def now(self) -> datetime:
        return self._now

    def advance(self, seconds: float) -> datetime:
        self._now += timedelta(seconds=seconds)
        return self._now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


SHM = Path("/dev/shm")


@pytest.fixture
def db_path(tmp_path: Path) -> Iterator[Path]:
    """A fresh SQLite file; on tmpfs when there is one, since fsync dominates test time."""
    if SHM.is_dir() and os.access(SHM, os.W_OK):
        with tempfile.TemporaryDirectory(dir=SHM, prefix="workcenter-test-") as directory:
            yield Path(directory) / "workcenter.db"
    else:
        yield tmp_path / "workcenter.db"


@pytest.fixture
def backend() -> str:
    """The database of ``location``; a module runs on both by overriding this fixture with
    ``params=BACKENDS``."""
    return "sqlite"


BACKENDS = ("sqlite", "postgresql")


@pytest.fixture
def location(backend: str, request: pytest.FixtureRequest) -> Iterator[str]:
    """Where the test's store is: a fresh SQLite file, or a fresh PostgreSQL schema."""
    if backend == "sqlite":
        yield str(request.getfixturevalue("db_path"))
        return
    with postgres.fresh_schema() as url:
        yield url


@pytest.fixture
def wc(location: str, clock: FakeClock) -> Iterator[WorkCenter]:
    center = WorkCenter.open(location, clock=clock, boot_id=BOOT_ID)
    yield center
    center.close()


@pytest.fixture
def other(wc: WorkCenter, location: str, clock: FakeClock) -> Iterator[WorkCenter]:
    """A second store on ``wc``'s database: another worker process's connections and
    cache."""
    center = WorkCenter.open(location, clock=clock, boot_id=f"{BOOT_ID}-other", create=False)
    yield center
    center.close()


def budget_commands(wc: WorkCenter) -> BudgetCommands:
    """The service layer's budget command handler over ``wc``'s store, built the way the
    facade builds it. The ledger's Coordinator side (a turn's requests, its settlement,
    failures) is not on the facade: the Coordinator drives it under its turn fence
    (ADR-0039), and tests drive it here."""
    return BudgetCommands(wc._repository, wc.clock)


@pytest.fixture
def budget(wc: WorkCenter) -> BudgetCommands:
    return budget_commands(wc)


# --- refusals ------------------------------------------------------------------


@contextmanager
def refused(
    wc: WorkCenter, error: type[Exception], match: str | None = None
) -> Iterator[pytest.ExceptionInfo[Exception]]:
    """Expect exactly ``error`` (not a subclass) and no event written."""
    before = wc.event_count()
    with pytest.raises(error, match=match) as info:
        yield info
    assert type(info.value) is error, f"expected {error.__name__}, got {type(info.value).__name__}"
    assert wc.event_count() == before, "a refused command wrote events"


@contextmanager
def saves_writing_no_view() -> Iterator[None]:
    """Saves that write no read model, leaving every view behind the log: a writer with
    inline projections off did so before ADR-0116 (and one of those versions still may)."""
    with mock.patch.object(ReadModels, "written_by", lambda self, events: {}):
        yield


# --- items -----------------------------------------------------------------------


def create_dynamic(
    wc: WorkCenter,
    *,
    criteria: Sequence[str] = CRITERIA,
    delivery_target: str | None = "response",
    start: bool = True,
    title: str = "Dynamic item",
    goal: str = "Ship the feature",
    limits: Mapping[str, int] | None = None,
) -> wi.WorkItemState:
    return wc.create_work_item(
        title=title,
        goal=goal,
        acceptance_criteria=list(criteria),
        delivery_target=delivery_target,
        mode="dynamic",
        start=start,
        limits=limits,
    )


def create_linear(
    wc: WorkCenter,
    *,
    criteria: Sequence[str] = CRITERIA,
    delivery_target: str | None = "response",
    stages: tuple[str, ...] | None = None,
    start: bool = True,
    title: str = "Linear item",
    goal: str = "Fix the bug",
) -> wi.WorkItemState:
    return wc.create_work_item(
        title=title,
        goal=goal,
        acceptance_criteria=list(criteria),
        delivery_target=delivery_target,
        mode="linear",
        stages=stages,
        start=start,
    )


def action_spec(
    type: str = "research",
    objective: str = "Find the cause",
    *,
    workspace_mode: str | None = "read",
    **extra: Any,
) -> dict[str, Any]:
    """A valid planned-Action payload (coordinator.md 4.3), camelCase like a Coordinator."""
    spec: dict[str, Any] = {
        "type": type,
        "objective": objective,
        "approach": "Read the code and run the tests",
        "expectedOutcome": "A verified answer with evidence",
    }
    if workspace_mode is not None:
        spec["workspaceMode"] = workspace_mode
    return spec | extra


def plan(wc: WorkCenter, item_id: Any, *specs: dict[str, Any], **kwargs: Any) -> wi.WorkItemState:
    """Plan Actions on a dynamic item at its current version (one research Action by default)."""
    item = wc.work_item(item_id)
    return wc.plan_actions(
        item_id, expected_version=item.version, actions=list(specs) or [action_spec()], **kwargs
    )


def current(wc: WorkCenter, item_id: Any) -> act.ActionState:
    item = wc.work_item(item_id)
    assert item.current_action_id is not None
    return wc.action(item.current_action_id)


def actions_by_sequence(wc: WorkCenter, item_id: Any) -> list[act.ActionState]:
    item = wc.work_item(item_id)
    return sorted(wc.actions(item).values(), key=lambda a: a.sequence)


# --- runs ------------------------------------------------------------------------


def claim(wc: WorkCenter, worker: str = WORKER, **kwargs: Any) -> Claim:
    claimed = wc.claim_next(worker, **kwargs)
    assert claimed is not None, "nothing was claimable"
    return claimed


def assert_renew_refused(wc: WorkCenter, claimed: Claim) -> None:
    """A refused renewal returns False and writes nothing."""
    count = wc.event_count()
    assert wc.renew_lease(claimed) is False
    assert wc.event_count() == count


def assert_nothing_claimable(wc: WorkCenter) -> None:
    count = wc.event_count()
    assert wc.claim_next("another-worker") is None
    assert wc.event_count() == count


def checks(
    criteria: Sequence[str] = CRITERIA, status: str = "passed", **per_criterion: str
) -> list[dict[str, str]]:
    return [
        {"criterion": c, "status": per_criterion.get(c, status), "evidence": f"proof of {c}"}
        for c in criteria
    ]


def completion(
    run_id: Any, criteria: Sequence[str] = CRITERIA, summary: str = "Done"
) -> dict[str, Any]:
    """A completion whose every criterion is proven by Run ``run_id``."""
    return {
        "summary": summary,
        "acceptanceResults": [
            {"criterion": c, "status": "passed", "evidenceRunIds": [str(run_id)]} for c in criteria
        ],
        "evidenceRunIds": [str(run_id)],
    }


def report(
    outcome: str = "completed",
    *,
    criteria: Sequence[str] = CRITERIA,
    check_status: str = "passed",
    **fields: Any,
) -> dict[str, Any]:
    """A run report that passes every normalisation step (for a non-review Action).

    Keyword fields override or add camelCase keys (``reviewDecision=...``).
    """
    base: dict[str, Any] = {
        "outcome": outcome,
        "summary": f"{outcome} summary",
        "evidence": ["ran pytest: 12 passed"],
        "acceptanceChecks": checks(criteria, check_status),
    }
    if outcome == "waiting":
        base["waitingReason"] = "Which database should I use?"
    if outcome in ("failed", "retryable"):
        base["error"] = "tool crashed"
    return base | fields


def run_of(wc: WorkCenter, claimed: Claim) -> act.Run:
    run = wc.action(claimed.action_id).run(claimed.run_id)
    assert run is not None
    return run


def item_events(wc: WorkCenter, item_id: Any, after: int = 0) -> list[str]:
    """Names of the WorkItem's events after version ``after``."""
    return [type(e).__name__ for e in wc.history(item_id) if e.originator_version > after]


def action_events(wc: WorkCenter, action_id: Any, after: int = 0) -> list[str]:
    return [type(e).__name__ for e in wc.action_history(action_id) if e.originator_version > after]


def stored_details(wc: WorkCenter) -> dict[str, tuple[int, bytes]]:
    """The detail view's rows as stored, by item id: position and DTO, or the empty
    marker of a DTO built when read (ADR-0073, ADR-0076)."""
    rows = wc.details._rows("SELECT work_item_id, position, dto FROM dv_details", ())
    return {str(r[0]): (int(r[1]), bytes(r[2])) for r in rows}


def stored_detail(wc: WorkCenter, item_id: Any) -> bytes:
    """The item's stored DTO, or its marker."""
    rows = wc.details._rows("SELECT dto FROM dv_details WHERE work_item_id = ?", (item_id.hex,))
    assert rows, "the view has no row for the item"
    return bytes(rows[0][0])


def detail_built(wc: WorkCenter, item_id: Any, now: datetime) -> dict[str, Any]:
    """The item's detail DTO built from its current states with ``now`` as its time: what
    the view stores, or builds from a marker, as of an event at ``now``."""
    item = wc.work_item(item_id)
    data = detail_json(
        item, wc.actions(item), wc.ledger(item_id), now=now, conversation=wc.conversation(item_id)
    )
    return dict(orjson.loads(data))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test marked ``sqlite_only`` has no PostgreSQL case: its PostgreSQL param is
    deselected (it cannot happen there, see the mark's reason), not run and skipped.

    A test whose id names an object's address (``<object object at 0x...>``) is refused:
    the id differs between processes, and the suite runs in two (ADR-0102)."""
    by_address = [item.nodeid for item in items if re.search(r" at 0x[0-9a-f]+", item.nodeid)]
    if by_address:
        raise pytest.UsageError(
            "test ids that name an object's address differ between test processes;"
            f" give the parametrisation ids: {', '.join(by_address[:5])}"
        )
    kept: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        callspec = getattr(item, "callspec", None)
        on_postgres = callspec is not None and callspec.params.get("store") == "postgresql"
        (dropped if on_postgres and item.get_closest_marker("sqlite_only") else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
