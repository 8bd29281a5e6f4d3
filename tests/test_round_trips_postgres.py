"""Round trips per command kind on PostgreSQL, counted on the connection (ADR-0051).

Each command kind has a ceiling: the count measured when its write went to the
server in two round trips (the pipelined insert with every read the write needs,
then its rows and the commit) and a cached aggregate's load in one. A change that
sends a command back above its ceiling fails here. Before ADR-0051 the counts
were create 18, claim 30, renew 16, reserve 16, settle 16, finish 25; before
ADR-0069 (the detail view's reads sent with the insert) create 3, claim 9, finish 5;
before ADR-0074 (a claim's BEGIN, view check and first candidate in one exchange) a
claim 6, 8 by a process that had not seen its Action; before ADR-0078 (a renewal and
a finish decided on the states the worker's claim left in its cache, unread) a
renewal 2 and a finish 2.
"""

from __future__ import annotations

import postgres
import pytest
from conftest import create_dynamic, create_linear
from eventsourcing.persistence import IntegrityError

from workcenter.adapters import round_trips
from workcenter.adapters.postgres_recorder import OneCommitPostgresRecorder
from workcenter.application import WorkCenter

# A write whose rows were all built before the lock is one round trip (ADR-0070): the
# server chains, checks and moves the views' positions; a finish's DTO is built from the
# ledger the worker's own reserve and settle left in its cache.
CEILINGS = {"create": 1, "claim": 4, "renew": 1, "reserve": 3, "settle": 3, "finish": 1}
# The two-exchange write (ADR-0051), the way back when the server's check fails: the
# detail view's reads of other streams and of a lagging gap go with the insert
# (ADR-0069), a write is two round trips however it is built.
TWO_EXCHANGE_CEILINGS = {
    "create": 2,
    "claim": 5,
    "renew": 2,
    "reserve": 4,
    "settle": 4,
    "finish": 2,
}
# A claim by a process that has not seen the Action (another process created it): the
# work queue's candidate names its WorkItem, so the Action, the item and the ledger are
# one statement (ADR-0074; 8 before, 16 before ADR-0069).
COLD_CLAIM = 4


@pytest.fixture
def backend() -> str:
    postgres.require_server()
    return "postgresql"


def test_each_command_kind_stays_within_its_round_trips(wc: WorkCenter) -> None:
    counts = round_trips.per_command(wc, rounds=3)
    assert set(counts) == set(CEILINGS)
    over = {kind: count for kind, count in counts.items() if count > CEILINGS[kind]}
    assert not over, f"round trips above the ceiling: {over} (ceilings {CEILINGS})"
    # The write itself: one round trip, however many statements it sends.
    assert counts["create"] == 1
    assert wc.store.recorder.fallbacks == 0  # type: ignore[attr-defined]


def test_the_two_exchange_write_stays_within_its_round_trips(
    wc: WorkCenter, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(OneCommitPostgresRecorder, "one_exchange", False)
    counts = round_trips.per_command(wc, rounds=3)
    over = {k: n for k, n in counts.items() if n > TWO_EXCHANGE_CEILINGS[k]}
    assert not over, f"above the ceiling: {over} (ceilings {TWO_EXCHANGE_CEILINGS})"
    assert counts["create"] == 2


def test_a_claim_of_an_action_created_elsewhere_loads_it_in_one_statement(
    wc: WorkCenter, location: str
) -> None:
    for _ in range(3):
        create_linear(wc)
    datastore_of = lambda center: center.store.factory.datastore  # noqa: E731
    with WorkCenter.open(location, create=False) as worker:  # its caches are empty
        with round_trips.traced(datastore_of(worker)) as counts:
            claimed = worker.claim_next("cold-worker")
        assert claimed is not None
        assert counts.trips <= COLD_CLAIM, counts.trips


def test_the_counter_counts_exchanges_not_statements(wc: WorkCenter) -> None:
    """One statement alone is one round trip; three in a pipeline with one sync are one."""
    datastore = wc.store.factory.datastore  # type: ignore[attr-defined]
    with round_trips.traced(datastore) as counts, datastore.get_connection() as conn:
        conn.execute("SELECT 1")
        assert counts.trips == 1
        with conn.pipeline() as pipeline:
            for _ in range(3):
                conn.execute("SELECT 1")
            pipeline.sync()
        assert counts.trips == 3  # the sync, and the sync that ends the pipeline
        conn.execute("SELECT 1")
        assert counts.trips == 4


def test_a_refused_pipelined_write_writes_nothing_and_leaves_the_connection_usable(
    wc: WorkCenter,
) -> None:
    item = create_dynamic(wc)
    head = wc.store.recorder.max_notification_id()
    stale = wc._repository.events(item.id)[-1:]  # type: ignore[attr-defined]
    # The same version again: the optimistic insert's unique violation, at the first sync.
    for _ in range(3):  # more than once: each pooled connection is left usable
        with pytest.raises(IntegrityError):
            wc.store.events.put(stale)
    assert wc.store.recorder.max_notification_id() == head
    create_dynamic(wc)
    assert wc.store.recorder.max_notification_id() > head
    assert wc.maintenance.verify_history().ok


def test_lock_holds_are_collected_only_when_asked(wc: WorkCenter) -> None:
    recorder = wc.store.recorder
    assert recorder.lock_holds is None  # type: ignore[attr-defined]
    recorder.lock_holds = []  # type: ignore[attr-defined]
    create_dynamic(wc)
    holds = recorder.lock_holds  # type: ignore[attr-defined]
    assert len(holds) == 1
    held, before = holds[0]
    assert 0 < held < 10 and 0 < before < 10
