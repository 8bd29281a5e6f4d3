"""An operator's schema change on the store's tables while its processes run (ADR-0107).

docs/deployment.md lets table-locking maintenance (``ALTER TABLE`` among it) run while
workers run (ADR-0105). A column added to the event or snapshot table, then dropped,
must leave every read of a process that was already running working: a stream loaded
that is not in the process's cache (snapshots first, then events), a claim, and a page
of the log (a claim's catch-up of the work queue, the projection runner's subscription).
"""

from __future__ import annotations

from collections.abc import Iterator

import postgres
import pytest
from conftest import create_linear

from workcenter.adapters.executors import echo
from workcenter.application import WorkCenter


@pytest.fixture
def backend() -> str:
    return "postgresql"


@pytest.fixture
def worker(location: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[WorkCenter]:
    """A worker process's store: its own connections (two, each soon used by every read
    below), cache and prepared statements."""
    monkeypatch.setenv("POSTGRES_POOL_SIZE", "2")
    monkeypatch.setenv("POSTGRES_MAX_OVERFLOW", "0")
    center = WorkCenter.open(location, create=False, inline_projections=False)
    yield center
    center.close()


def work(wc: WorkCenter, worker: WorkCenter) -> None:
    """What a running worker and runner read, each statement prepared on their
    connections once run (psycopg prepares the library's reads at once)."""
    item = create_linear(wc, stages=("implement",))
    assert worker.work_item(item.id).id == item.id  # not in its cache: the library's load
    assert worker.store.recorder.select_notifications(1, 5)  # a page of the log
    claim = worker.claim_next("w1")
    assert claim is not None and claim.work_item_id == item.id
    worker.finish_run(claim, echo(claim))


@pytest.mark.parametrize("table", ["workcenter_events", "workcenter_snapshots"])
def test_a_column_added_then_dropped_breaks_no_read_of_a_running_process(
    wc: WorkCenter, worker: WorkCenter, location: str, table: str
) -> None:
    for _ in range(4):
        work(wc, worker)
    schema = location.rsplit("schema=", 1)[1]
    with postgres.connect() as conn:
        conn.execute(f'ALTER TABLE "{schema}".{table} ADD COLUMN operators_note text')
    # Before ADR-0107: NotSupportedError "cached plan must not change result type".
    for _ in range(4):
        work(wc, worker)
    with postgres.connect() as conn:
        conn.execute(f'ALTER TABLE "{schema}".{table} DROP COLUMN operators_note')
    for _ in range(4):
        work(wc, worker)
