"""What a command costs the database: its cached aggregates are brought up to date in
one read transaction (and read what a load of each, one by one, reads), and the work
queue writes an item's update time once per save."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import BOOT_ID, FakeClock, claim, create_linear, refused, report

from workcenter.adapters.sql_counts import SqlCounts, traced
from workcenter.application import WorkCenter
from workcenter.domain import resource_ledger as rl
from workcenter.domain.errors import NotFound


def fresh_states(db_path: Path, clock: FakeClock, action_id: object) -> tuple[object, ...]:
    """The Action, its item and the ledger as a store with an empty cache loads them."""
    reader = WorkCenter.open(db_path, clock=clock, boot_id="reader")
    try:
        action = reader._repository.action(action_id)  # type: ignore[arg-type]
        item = reader._repository.work_item(action.work_item_id)
        return action, item, reader._repository.ledger(item.id)
    finally:
        reader.close()


def test_states_read_together_include_another_process_writes(
    wc: WorkCenter, db_path: Path, clock: FakeClock
) -> None:
    item = create_linear(wc)
    action_id = item.plan[0].action_id
    wc._repository.run_states(action_id, with_ledger=True)  # all three cached here
    other = WorkCenter.open(db_path, clock=clock, boot_id="boot-2")
    try:
        claimed = claim(other)
        other.renew_lease(claimed)
    finally:
        other.close()
    together = wc._repository.run_states(action_id, with_ledger=True)
    assert together == fresh_states(db_path, clock, action_id)
    assert together[0].status == "running"


def test_a_claim_reads_in_two_transactions_and_its_finish_in_none(wc: WorkCenter) -> None:
    create_linear(wc)
    with traced(wc.store.factory.datastore) as counts:  # type: ignore[attr-defined]
        claimed = claim(wc)
    # The ready Actions with the view's position; then the Action, item and ledger.
    assert counts.begins - counts.commits == 2, counts.statements
    with traced(wc.store.factory.datastore) as counts:  # type: ignore[attr-defined]
        wc.finish_run(claimed, report())
    # Decided on the states the claim left in this process's cache (ADR-0078): the
    # write's transaction alone (one read transaction before).
    assert (counts.begins, counts.commits) == (1, 1), counts.statements


def test_an_uncached_action_is_loaded_then_its_item_and_ledger_together(
    wc: WorkCenter, db_path: Path, clock: FakeClock
) -> None:
    """A claim of an Action this process has not seen: the Action from its newest
    snapshot, then its WorkItem and ledger in one read (ADR-0069)."""
    item = create_linear(wc)
    action_id = item.plan[0].action_id
    other = WorkCenter.open(db_path, clock=clock, boot_id=BOOT_ID)
    try:
        with traced(other.store.factory.datastore) as counts:  # type: ignore[attr-defined]
            states = other._repository.run_states(action_id, with_ledger=True)
        assert states == fresh_states(db_path, clock, action_id)
        assert counts.begins == 2, counts.statements
    finally:
        other.close()


def test_ids_of_other_aggregates_are_not_found(wc: WorkCenter) -> None:
    item = create_linear(wc)
    wc._repository.run_states(item.plan[0].action_id, with_ledger=True)
    for wrong in (item.id, rl.ledger_id_for(item.id)):
        with refused(wc, NotFound):
            wc._repository.run_states(wrong, with_ledger=True)


@pytest.mark.parametrize("with_ledger", [True, False])
def test_together_gives_the_same_states_as_loading_each(
    wc: WorkCenter, db_path: Path, clock: FakeClock, with_ledger: bool
) -> None:
    item = create_linear(wc)
    claimed = claim(wc)
    wc.renew_lease(claimed)
    action, loaded_item, ledger = wc._repository.run_states(
        claimed.action_id, with_ledger=with_ledger
    )
    expected = fresh_states(db_path, clock, claimed.action_id)
    assert (action, loaded_item) == expected[:2]
    assert ledger == (expected[2] if with_ledger else None)
    assert loaded_item.id == item.id


def _item_writes(counts: SqlCounts) -> list[str]:
    return [s for s in counts.statements if "wq_items" in s and not s.startswith("SELECT")]


def test_the_work_queue_writes_an_items_row_once_per_save(wc: WorkCenter, clock: FakeClock) -> None:
    """An item's row is written once per save, whatever its events change (ADR-0038,
    ADR-0087): a create's row is inserted with its status, a claim's status and update
    time are one statement."""
    with traced(wc.store.factory.datastore) as counts:  # type: ignore[attr-defined]
        item = create_linear(wc)  # created, started, an Action added: three item events
    assert len(_item_writes(counts)) == 1, _item_writes(counts)
    assert _item_writes(counts)[0].startswith("INSERT INTO wq_items")
    [row] = [r for r in wc.work_queue.dump()["wq_items"] if r[0] == item.id.hex]
    stored = wc.work_item(item.id)
    assert (row[2], row[5]) == (stored.status, stored.updated_at.timestamp())
    clock.advance(5)
    with traced(wc.store.factory.datastore) as counts:  # type: ignore[attr-defined]
        claimed = claim(wc)  # the Action's status mirrored and the item's: two item events
    assert len(_item_writes(counts)) == 1, _item_writes(counts)
    [row] = [r for r in wc.work_queue.dump()["wq_items"] if r[0] == item.id.hex]
    stored = wc.work_item(item.id)
    assert (row[2], row[5]) == ("running", stored.updated_at.timestamp())
    clock.advance(5)
    with traced(wc.store.factory.datastore) as counts:  # type: ignore[attr-defined]
        assert wc.renew_lease(claimed)
    assert _item_writes(counts) == []  # no item event


def test_together_refuses_a_cached_state_of_another_kind(wc: WorkCenter) -> None:
    item = create_linear(wc)
    action_id = item.plan[0].action_id
    repo = wc._repository
    assert repo.together({action_id: "action", item.id: "item"}) is not None
    assert repo.together({action_id: "item"}) is None  # an Action's id asked as an item's
    assert repo.together({item.id: "ledger"}) is None
