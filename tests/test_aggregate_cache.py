"""A save leaves the states it wrote in the aggregate cache (ADR-0020), so the next
command's load replays nothing: the library caches only the aggregates it is given,
and the store gives it events."""

from __future__ import annotations

from conftest import claim, create_dynamic, plan, report

from workcenter.application import WorkCenter
from workcenter.domain import resource_ledger as rl


def test_a_save_leaves_its_states_in_the_aggregate_cache(wc: WorkCenter) -> None:
    cache = wc.store.repository.cache
    assert cache is not None
    item = create_dynamic(wc)
    planned = plan(wc, item.id)
    (entry,) = planned.plan
    assert cache.get(item.id) == planned
    assert cache.get(entry.action_id).version == wc.action(entry.action_id).version
    assert cache.get(rl.ledger_id_for(item.id)) == wc.ledger(item.id)
    claimed = claim(wc)
    finished = wc.finish_run(claimed, report())
    assert cache.get(entry.action_id) == finished
    # What the cache serves is what a fresh fold of the stream gives.
    assert wc.action(entry.action_id) == wc.action(entry.action_id, version=finished.version)
