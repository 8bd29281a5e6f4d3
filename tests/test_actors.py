"""Who caused each event is recorded when the command decides it (ADR-0017): one
test per kind of actor through ``audit`` (API, CLI text and JSON), the upcast of
events stored without one, and refusals of a bad actor that write nothing."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import orjson
import pytest
from click.testing import CliRunner
from conftest import (
    BOOT_ID,
    CRITERIA,
    WORKER,
    FakeClock,
    action_spec,
    budget_commands,
    claim,
    completion,
    create_dynamic,
    create_linear,
    plan,
    refused,
    report,
)
from eventsourcing.persistence import StoredEvent
from eventsourcing.utils import get_topic

from workcenter.adapters.cli import cli
from workcenter.adapters.compression import inflate
from workcenter.adapters.worker import run_worker
from workcenter.application import Actor, WorkCenter
from workcenter.domain import actor as actors
from workcenter.domain import work_item as wi
from workcenter.domain.errors import CommandRefused, InvalidInput
from workcenter.projections.audit import AuditRow

WORKER_ID = f"{WORKER}@{BOOT_ID}"


def _json_rows(db: Path, item_id: UUID, *args: str) -> list[dict[str, Any]]:
    result = CliRunner().invoke(cli, ["--db", str(db), "audit", str(item_id), "--json", *args])
    assert result.exit_code == 0, result.output
    # stdout alone: a cut audit says so on stderr (ADR-0136).
    rows: list[dict[str, Any]] = json.loads(result.stdout)["events"]
    return rows


def _text(db: Path, item_id: UUID, *args: str) -> str:
    result = CliRunner().invoke(cli, ["--db", str(db), "audit", str(item_id), *args])
    assert result.exit_code == 0, result.output
    return " ".join(result.output.split())  # the console wraps long lines


def _only(rows: list[AuditRow], type: str) -> AuditRow:
    (row,) = [r for r in rows if r.type == type]
    return row


def test_a_user_is_recorded_on_what_the_user_decides(db_path: Path, wc: WorkCenter) -> None:
    item = wc.create_work_item(
        title="T", goal="G", acceptance_criteria=list(CRITERIA), actor="user:alice"
    )
    wc.start(item.id, actor=actors.user("bob"))
    rows = wc.audit(item.id)
    created = _only(rows, "WorkItemCreated")
    assert (created.actor, created.actor_id, created.worker) == ("user", "alice", None)
    assert {r.actor_id for r in rows if r.type == "LedgerOpened"} == {"alice"}
    assert _only(rows, "WorkItemStarted").actor_id == "bob"
    # The default is the user.
    other = create_dynamic(wc)
    assert {(r.actor, r.actor_id) for r in wc.audit(other.id)} == {("user", "user")}

    (as_json,) = _json_rows(db_path, item.id, "--type", "WorkItemCreated")
    assert (as_json["actor"], as_json["actor_id"], as_json["caused_by"]) == ("user", "alice", None)
    assert "by user alice" in _text(db_path, item.id, "--type", "WorkItemCreated")


def test_history_text_shows_each_events_actor_in_its_own_column(
    db_path: Path, wc: WorkCenter
) -> None:
    title = "A title long enough that it would be cut if the actor led the payload"
    item = wc.create_work_item(title=title, goal="G", actor="user:alice")
    result = CliRunner().invoke(
        cli, ["--db", str(db_path), "history", str(item.id)], env={"COLUMNS": "10000"}
    )
    assert result.exit_code == 0, result.output
    (created,) = [line for line in result.output.splitlines() if "WorkItemCreated" in line]
    cells = [cell.strip() for cell in created.split("│")]
    assert "user alice" in cells
    assert title in created and '"actor"' not in created


def test_the_coordinator_stand_ins_are_the_coordinators(
    db_path: Path, wc: WorkCenter, clock: FakeClock
) -> None:
    item = plan(wc, create_dynamic(wc).id)
    claimed = claim(wc)
    wc.finish_run(claimed, report())
    wc.complete(
        item.id,
        expected_version=wc.work_item(item.id).version,
        completion=completion(claimed.run_id),
    )
    rows = wc.audit(item.id)
    for name in ("ActionPlanned", "ActionAdded", "WorkItemCompleted"):
        assert (_only(rows, name).actor, _only(rows, name).actor_id) == (
            "coordinator",
            "coordinator",
        ), name
    # Only the store names a turn (its turns' decisions are recorded under their ids):
    # given, a named Coordinator, or the system, made a command look like a turn's
    # decision or a budget's stop in the audit (found by acceptance testing, ADR-0142).
    second = create_dynamic(wc, title="Second")
    for given in (
        Actor(kind="coordinator", id="turn-7"),
        Actor(kind="system", id="budget"),
        Actor(kind="user", id="u").because_of(Actor(kind="system", id="budget")),
        "coordinator:3f2a6b1c\u20101111-4222-8333-444455556666",  # a turn's look-alike
    ):
        with refused(wc, InvalidInput, match="recorded by"):
            plan(wc, second.id, actor=given)

    (as_json,) = _json_rows(db_path, item.id, "--type", "WorkItemCompleted")
    assert as_json["actor"] == "coordinator"
    assert "by coordinator" in _text(db_path, item.id, "--type", "ActionPlanned")


def test_a_worker_is_recorded_as_name_at_boot(
    db_path: Path, wc: WorkCenter, clock: FakeClock
) -> None:
    item = plan(wc, create_dynamic(wc).id, action_spec(maxAttempts=3))
    claimed = claim(wc)
    assert claimed.actor == actors.worker(WORKER, BOOT_ID)
    clock.advance(5)
    assert wc.renew_lease(claimed)
    wc.finish_run(claimed, report("retryable"))
    # A bare RunRef is by the worker that claimed the Run, as recorded at the claim.
    again = claim(wc, "w2")
    wc.interrupt(again.ref, reason="shutting down")
    rows = wc.audit(item.id)
    for name in ("RunClaimed", "LeaseRenewed", "RunFinished"):
        row = next(r for r in rows if r.type == name and r.run_id == claimed.run_id)
        assert (row.actor, row.actor_id, row.worker, row.boot_id) == (
            "worker",
            WORKER_ID,
            WORKER,
            BOOT_ID,
        ), name
    interrupted = _only(rows, "RunInterrupted")
    assert (interrupted.actor, interrupted.actor_id) == ("worker", f"w2@{BOOT_ID}")
    # The mirror written with the claim is part of the same decision.
    claimed_row = next(r for r in rows if r.type == "RunClaimed")
    mirror = next(r for r in rows if r.position == claimed_row.position + 1)
    assert (mirror.type, mirror.actor_id) == ("ActionStatusRecorded", WORKER_ID)

    as_json = _json_rows(db_path, item.id, "--run", str(claimed.run_id), "--type", "RunFinished")
    assert (as_json[0]["actor"], as_json[0]["worker"], as_json[0]["boot_id"]) == (
        "worker",
        WORKER,
        BOOT_ID,
    )
    assert f"by worker {WORKER}@{BOOT_ID[:8]}" in _text(db_path, item.id, "--type", "RunFinished")


def test_recovery_is_the_operators(db_path: Path, wc: WorkCenter, clock: FakeClock) -> None:
    item = plan(wc, create_dynamic(wc).id, action_spec(maxAttempts=3))
    claimed = claim(wc)
    clock.advance(61)
    assert wc.recover() == [claimed.run_id]
    rows = wc.audit(item.id)
    interrupted = _only(rows, "RunInterrupted")
    assert (interrupted.actor, interrupted.actor_id) == ("operator", "operator")
    assert {r.actor for r in rows if r.position > interrupted.position} == {"operator"}
    second = claim(wc)
    clock.advance(61)
    assert wc.recover(actor="operator:ops-oncall") == [second.run_id]
    last = wc.audit(item.id, type="RunInterrupted")[-1]
    assert last.actor_id == "ops-oncall"

    assert _json_rows(db_path, item.id, "--type", "RunInterrupted")[0]["actor"] == "operator"
    assert "by operator" in _text(db_path, item.id, "--type", "RunInterrupted")


def test_a_budget_stop_is_the_systems_caused_by_the_worker_that_ran_into_it(
    db_path: Path, wc: WorkCenter
) -> None:
    item = wc.create_work_item(
        title="T",
        goal="G",
        acceptance_criteria=list(CRITERIA),
        delivery_target="response",
        start=True,
        limits={"max_action_attempts": 1},
    )
    plan(wc, item.id, action_spec(maxAttempts=5))
    wc.finish_run(claim(wc), report("retryable"))
    assert wc.claim_next(WORKER) is None  # the ledger has no attempt left: a stop
    rows = wc.audit(item.id)
    worker = actors.worker(WORKER, BOOT_ID)
    for name in ("ExecutionStopped", "BudgetStopRecorded"):
        row = _only(rows, name)
        assert (row.actor, row.actor_id, row.caused_by) == ("system", "budget", str(worker)), name
    stopped = _only(rows, "ExecutionStopped")
    status = next(r for r in rows if r.position > stopped.position and r.type == "StatusChanged")
    assert (status.actor, status.caused_by) == ("system", str(worker))
    event = wc.store.events.get(wc.ledger(item.id).id)
    assert list(event)[-1].actor == actors.BUDGET.because_of(worker)

    (as_json,) = _json_rows(db_path, item.id, "--type", "ExecutionStopped")
    assert (as_json["actor"], as_json["actor_id"]) == ("system", "budget")
    assert as_json["caused_by"] == f"worker {WORKER_ID}"
    text = _text(db_path, item.id, "--type", "ExecutionStopped")
    assert f"by system budget (caused by worker {WORKER_ID})" in text


def test_every_stored_event_carries_its_actor(wc: WorkCenter) -> None:
    plan(wc, create_dynamic(wc).id)
    wc.finish_run(claim(wc), report())
    stored = wc.store.recorder.select_notifications(start=1, limit=1_000)
    assert stored
    for notification in stored:
        actor = orjson.loads(inflate(notification.state))["actor"]
        assert actor["kind"] in ("user", "coordinator", "worker"), notification.topic
        assert "caused_by" not in actor  # no cause, no bytes spent on a null


def test_an_event_stored_without_an_actor_is_upcast_to_the_unknown_actor(
    db_path: Path, wc: WorkCenter
) -> None:
    item = create_dynamic(wc)
    at = wc.clock.now() + timedelta(seconds=1)
    old = {
        "originator_id": str(item.id),
        "originator_version": item.version + 1,
        "timestamp": at.isoformat(),
        "title": "Renamed before actors were recorded",
    }
    stored = StoredEvent(
        originator_id=item.id,
        originator_version=item.version + 1,
        topic=get_topic(wi.TitleChanged),
        state=orjson.dumps(old),
    )
    wc.store.recorder.insert_events([stored])
    event = wc.store.mapper.to_domain_event(stored)
    assert event.actor == actors.LEGACY == Actor(kind="unknown", id="legacy")
    with WorkCenter.open(db_path) as fresh:
        assert fresh.work_item(item.id).title == "Renamed before actors were recorded"
        row = fresh.audit(item.id)[-1]
        assert (row.type, row.actor, row.actor_id, row.worker) == (
            "TitleChanged",
            "unknown",
            "legacy",
            None,
        )
    (as_json,) = _json_rows(db_path, item.id, "--type", "TitleChanged")
    assert (as_json["actor"], as_json["actor_id"]) == ("unknown", "legacy")


BAD_ACTORS: list[Any] = [
    "robot:r2",
    "user:",
    "user: padded ",
    "user:" + "x" * 201,
    "user:bell\x07",
    "worker:no-boot",
    "unknown:legacy",
    42,
    Actor(kind="system", id="budget", caused_by=Actor(kind="worker", id="nameless")),
]


@pytest.mark.parametrize("bad", BAD_ACTORS)
def test_a_bad_actor_is_refused_and_writes_nothing(
    wc: WorkCenter, clock: FakeClock, bad: Any
) -> None:
    item = plan(wc, create_dynamic(wc).id, action_spec(maxAttempts=3))
    version = wc.work_item(item.id).version
    action_id = item.plan[0].action_id
    commands = [
        lambda: wc.create_work_item(title="T", goal="G", actor=bad),
        lambda: wc.cancel(item.id, actor=bad),
        lambda: wc.update_contract(item.id, expected_version=version, goal="New", actor=bad),
        lambda: wc.plan_actions(item.id, expected_version=version, actions=[{}], actor=bad),
        lambda: wc.claim_next(WORKER, actor=bad),
        lambda: wc.recover(actor=bad),
        lambda: wc.reserve_request(item.id, request={}, actor=bad),
        lambda: wc.extend_budget(
            item.id,
            expected_version=wc.ledger(item.id).version,
            additions={"max_requests": 1},
            actor=bad,
        ),
        lambda: budget_commands(wc).record_coordinator_failure(item.id, turn_id="t", actor=bad),
        lambda: wc.start(item.id, actor=bad),
        lambda: wc.resume(
            item.id,
            expected_version=version,
            expected_ledger_version=wc.ledger(item.id).version,
            actor=bad,
        ),
        lambda: wc.retry(item.id, action_id, expected_version=version, actor=bad),
        lambda: wc.guide(item.id, action_id, expected_version=version, guidance="g", actor=bad),
        lambda: wc.complete(item.id, expected_version=version, completion={}, actor=bad),
        lambda: wc.settle_request(item.id, "r", usage=None, actor=bad),
        lambda: budget_commands(wc).reserve_coordinator_request(
            item.id, turn_id="t", request={}, actor=bad
        ),
        lambda: budget_commands(wc).settle_coordinator_turn(item.id, "t", usage=None, actor=bad),
    ]
    for command in commands:
        with refused(wc, InvalidInput, "actor"):
            command()
    claimed = claim(wc)
    for command in (
        lambda: wc.renew_lease(claimed, actor=bad),
        lambda: wc.finish_run(claimed, report(), actor=bad),
        lambda: wc.interrupt(claimed.ref, actor=bad),
    ):
        with refused(wc, InvalidInput, "actor"):
            command()
    assert wc.action(claimed.action_id).status == "running"


def test_a_bad_worker_name_is_refused_before_a_claim(wc: WorkCenter) -> None:
    plan(wc, create_dynamic(wc).id)
    with refused(wc, InvalidInput, "actor"):
        wc.claim_next("bad\nname")


def test_the_worker_loop_records_its_own_recovery_as_its_worker(
    db_path: Path, wc: WorkCenter, clock: FakeClock
) -> None:
    item = plan(wc, create_dynamic(wc).id, action_spec(maxAttempts=3))
    claimed = claim(wc)  # boot-1, which then dies
    clock.advance(61)  # its lease runs out
    with WorkCenter.open(db_path, clock=clock, boot_id="boot-2") as restarted:
        run_worker(restarted, lambda _: report(), worker=WORKER, max_runs=0)
        row = restarted.audit(item.id, run_id=claimed.run_id, type="RunInterrupted")[0]
    assert (row.actor, row.actor_id) == ("worker", f"{WORKER}@boot-2")


def _input(wc: WorkCenter, action_id: UUID, text: str, **kw: Any) -> Any:
    action = wc.action(action_id)
    return wc.add_input(
        action.work_item_id,
        action_id,
        expected_version=wc.work_item(action.work_item_id).version,
        expected_generation=action.generation,
        text=text,
        **kw,
    )


def test_input_is_the_users_and_its_consumption_the_runs_worker(
    db_path: Path, wc: WorkCenter
) -> None:
    item = plan(wc, create_dynamic(wc).id)
    claimed = claim(wc)
    _input(wc, claimed.action_id, "first")
    _input(wc, claimed.action_id, "second", actor="user:alice")
    first, second = wc.pending_input(claimed)
    wc.consume_input(claimed, [first.id])
    # A bare RunRef is by the worker that claimed the Run; an explicit actor is recorded.
    wc.consume_input(claimed.ref, [second.id], actor=actors.OPERATOR)
    rows = wc.audit(item.id)
    queued = [r for r in rows if r.type == "InputQueued"]
    assert [(r.actor, r.actor_id) for r in queued] == [("user", "user"), ("user", "alice")]
    consumed = [r for r in rows if r.type == "InputConsumed"]
    assert [(r.actor, r.actor_id) for r in consumed] == [
        ("worker", WORKER_ID),
        ("operator", "operator"),
    ]
    # Both are rows of the Run, under the generation it ran.
    assert {(r.run_id, r.generation) for r in queued + consumed} == {(claimed.run_id, 1)}

    # Input to a ready Action is a new generation, the user's too.
    ready = plan(wc, create_dynamic(wc).id)
    _input(wc, ready.plan[0].action_id, "check Windows", actor="user:bob")
    (reset,) = wc.audit(ready.id, type="ActionReset")
    assert (reset.actor, reset.actor_id) == ("user", "bob")
    (as_json,) = _json_rows(db_path, item.id, "--type", "InputQueued", "--limit", "1")
    assert (as_json["actor"], as_json["actor_id"]) == ("user", "alice")


def test_defer_and_a_graceful_interrupt_are_the_runs_worker(db_path: Path, wc: WorkCenter) -> None:
    item = plan(wc, create_dynamic(wc).id, action_spec(maxAttempts=3))
    deferred = claim(wc)
    wc.defer(deferred)
    by_ref = claim(wc, "w2")
    wc.defer(by_ref.ref)
    interrupted = claim(wc)
    wc.interrupt(interrupted, reason="stopping", progress={"summary": "half done"})
    rows = wc.audit(item.id)
    assert [(r.run_id, r.actor_id, r.generation) for r in rows if r.type == "RunDeferred"] == [
        (deferred.run_id, WORKER_ID, 1),
        (by_ref.run_id, f"w2@{BOOT_ID}", 1),
    ]
    stopped = _only(rows, "RunInterrupted")
    assert (stopped.actor, stopped.actor_id) == ("worker", WORKER_ID)
    assert stopped.payload["progress"]["summary"] == "half done"
    # The mirror of the deferral is part of the same decision.
    first = next(r for r in rows if r.type == "RunDeferred")
    after = [r for r in rows if r.position > first.position and r.aggregate == "work_item"]
    assert after[0].actor_id == WORKER_ID
    assert f"by worker {WORKER}@{BOOT_ID[:8]}" in _text(db_path, item.id, "--type", "RunDeferred")


@pytest.mark.parametrize("bad", BAD_ACTORS)
def test_a_bad_actor_on_the_input_and_defer_commands_writes_nothing(
    wc: WorkCenter, bad: Any
) -> None:
    plan(wc, create_dynamic(wc).id)
    claimed = claim(wc)
    _input(wc, claimed.action_id, "queued")
    (queued,) = wc.pending_input(claimed)
    for command in (
        lambda: _input(wc, claimed.action_id, "more", actor=bad),
        lambda: wc.consume_input(claimed, [queued.id], actor=bad),
        lambda: wc.defer(claimed, actor=bad),
        lambda: wc.interrupt(claimed, progress={"summary": "s"}, actor=bad),
    ):
        with refused(wc, InvalidInput, "actor"):
            command()
    assert wc.action(claimed.action_id).status == "running"
    assert wc.pending_input(claimed) == (queued,)


def test_a_run_command_given_neither_a_claim_nor_a_run_ref_is_refused(wc: WorkCenter) -> None:
    plan(wc, create_dynamic(wc).id)
    claim(wc)
    for command in (
        lambda: wc.finish_run("not a claim", report()),  # type: ignore[arg-type]
        lambda: wc.interrupt(None),  # type: ignore[arg-type]
        lambda: wc.renew_lease(42),  # type: ignore[arg-type]
    ):
        with refused(wc, InvalidInput, "a Claim or a RunRef"):
            command()


@pytest.mark.parametrize("agent", ["coordinator", "worker:w1@boot-1"])
def test_no_agent_extends_a_budget_or_resumes(wc: WorkCenter, agent: str) -> None:
    """resource-ledger.md 3: extend and resume are a user's (or an operator's) commands,
    with no model or tool path: the Coordinator and a worker are refused, and nothing is
    written (ADR-0081)."""
    item = create_linear(wc)
    ledger = wc.ledger(item.id)
    with refused(wc, CommandRefused, "only a user or an operator extends"):
        wc.extend_budget(
            item.id, expected_version=ledger.version, additions={"max_requests": 1}, actor=agent
        )
    cancelled = wc.cancel(item.id)
    with refused(wc, CommandRefused, "only a user or an operator"):
        wc.resume(
            item.id,
            expected_version=cancelled.version,
            expected_ledger_version=wc.ledger(item.id).version,
            actor=agent,
        )
    resumed = wc.resume(
        item.id,
        expected_version=cancelled.version,
        expected_ledger_version=wc.ledger(item.id).version,
        actor="operator:ops",
    )
    assert resumed.status != "cancelled"


@pytest.mark.parametrize(
    ("bad", "said"),
    [
        ("worker:w1", "actor 'worker:w1': a worker actor id is name@boot"),
        ("agent:bot", "actor 'agent:bot': kind must be one of"),
        ("user:" + "x" * 100_000, "actor 'user:" + "x" * 215 + "...': actor id must be at most"),
        ("agent:" + "x" * 100_000, "actor 'agent:" + "x" * 214 + "...': kind must be one of"),
    ],
)
def test_a_refused_actor_is_said_back_whole_in_quotes_and_clipped(bad: str, said: str) -> None:
    with pytest.raises(InvalidInput) as refusal:
        actors.parse(bad)
    assert str(refusal.value).startswith(said)
    assert len(str(refusal.value)) < 400


def test_history_masks_what_the_audit_masks_unless_raw(db_path: Path, wc: WorkCenter) -> None:
    """`history` printed secrets and home paths that `audit` masks (found by acceptance
    testing); as the audit, it shows payloads as stored only with --raw."""
    secret = "sk-ABCDEFGHIJKLMNOPQRSTUVWX1234"
    goal = f"use key {secret} in /root/projects/x"
    item = wc.create_work_item(title="Secret", goal=goal, actor="user:alice")
    for extra in ([], ["--json"], ["--at", "1", "--json"]):
        shown = CliRunner().invoke(
            cli, ["--db", str(db_path), "history", str(item.id), *extra], env={"COLUMNS": "10000"}
        )
        assert shown.exit_code == 0, shown.output
        assert secret not in shown.output and "/root/projects" not in shown.output, extra
        assert "user alice" in shown.output or '"alice"' in shown.output
    raw = CliRunner().invoke(
        cli, ["--db", str(db_path), "history", str(item.id), "--raw", "--json"]
    )
    assert raw.exit_code == 0 and goal in raw.output
