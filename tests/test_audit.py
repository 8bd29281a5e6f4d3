"""The audit: one row per event of a WorkItem, its Actions and its ledger, read from
the event store (read-models.md 3), ``audit --at`` reconstruction, and ``progress``."""

from __future__ import annotations

import json
import sqlite3
from datetime import timedelta
from pathlib import Path
from typing import Any

from click.testing import CliRunner
from conftest import (
    BOOT_ID,
    CRITERIA,
    WORKER,
    FakeClock,
    action_spec,
    claim,
    completion,
    create_dynamic,
    plan,
    report,
)

from workcenter.adapters.cli import cli
from workcenter.application import WorkCenter
from workcenter.domain.runs import RECOVERED_REASON


def _cli(db: Path, *args: str) -> Any:
    result = CliRunner().invoke(cli, ["--db", str(db), *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_audit_merges_the_item_action_ledger_and_conversation_streams(wc: WorkCenter) -> None:
    item = plan(wc, create_dynamic(wc).id)
    claimed = claim(wc)
    wc.finish_run(claimed, report())
    rows = wc.audit(item.id)
    positions = [r.position for r in rows]
    assert positions == sorted(positions) and len(set(positions)) == len(positions)
    # Every event of the four streams is there, exactly once (the start and the
    # Run's outcome woke the Coordinator).
    ledger = wc.ledger(item.id)
    conversation = wc.conversation(item.id)
    assert conversation is not None
    expected = item_count = wc.work_item(item.id).version
    expected += wc.action(claimed.action_id).version + ledger.version + conversation.version
    assert len(rows) == expected
    kinds = {(r.aggregate, r.aggregate_id) for r in rows}
    assert kinds == {
        ("work_item", item.id),
        ("action", claimed.action_id),
        ("ledger", ledger.id),
        ("conversation", conversation.id),
    }
    assert [r.version for r in rows if r.aggregate == "work_item"] == list(range(1, item_count + 1))
    assert rows[0].type == "WorkItemCreated" and rows[0].work_item_id == item.id
    opened = next(r for r in rows if r.type == "LedgerOpened")
    assert opened.payload["work_item_id"] == str(item.id)


def test_causes_worker_coordinator_operator_and_user(wc: WorkCenter, clock: FakeClock) -> None:
    item = create_dynamic(wc)
    plan(wc, item.id)
    claimed = claim(wc)
    clock.advance(10)
    assert wc.renew_lease(claimed)
    clock.advance(10)
    wc.finish_run(claimed, report())
    wc.complete(
        item.id,
        expected_version=wc.work_item(item.id).version,
        completion=completion(claimed.run_id),
    )
    rows = wc.audit(item.id)
    by_type: dict[str, list[Any]] = {}
    for row in rows:
        by_type.setdefault(row.type, []).append(row)

    assert {r.actor for r in by_type["WorkItemCreated"]} == {"user"}
    assert by_type["WorkItemCreated"][0].payload["started"] is True  # no WorkItemStarted
    assert {r.actor for r in by_type["ActionPlanned"] + by_type["ActionAdded"]} == {"coordinator"}
    assert {r.actor for r in by_type["WorkItemCompleted"]} == {"coordinator"}
    for name in ("RunClaimed", "LeaseRenewed", "RunFinished"):
        (row,) = by_type[name]
        assert (row.actor, row.worker, row.boot_id) == ("worker", WORKER, BOOT_ID), name
        assert (row.action_id, row.run_id, row.generation) == (
            claimed.action_id,
            claimed.run_id,
            1,
        )
    # Mirrors written with the claim take the claim's cause.
    claim_position = by_type["RunClaimed"][0].position
    mirror = next(r for r in rows if r.position == claim_position + 1)
    assert (mirror.type, mirror.actor, mirror.worker) == ("ActionStatusRecorded", "worker", WORKER)
    assert mirror.action_id == claimed.action_id


def test_recovery_is_the_operator_and_a_new_generation_is_recorded(
    wc: WorkCenter, clock: FakeClock
) -> None:
    item = plan(wc, create_dynamic(wc).id, action_spec(maxAttempts=5))
    claimed = claim(wc)
    clock.advance(61)
    assert wc.recover() == [claimed.run_id]
    (interrupted,) = wc.audit(item.id, type="RunInterrupted")
    assert interrupted.actor == "operator"
    assert interrupted.payload["reason"] == RECOVERED_REASON
    assert interrupted.run_id == claimed.run_id

    again = claim(wc, "w2")
    wc.finish_run(again, report("waiting"))
    current = wc.work_item(item.id)
    wc.guide(
        item.id,
        again.action_id,
        expected_version=current.version,
        guidance="Use postgres",
    )
    (reset,) = wc.audit(item.id, type="ActionReset")
    assert (reset.actor, reset.generation) == ("user", 2)
    third = claim(wc, "w3")
    (row,) = wc.audit(item.id, run_id=third.run_id, type="RunClaimed")
    assert (row.worker, row.generation) == ("w3", 2)


def test_filters_and_limit(wc: WorkCenter) -> None:
    item = plan(wc, create_dynamic(wc).id, action_spec(objective="a"), action_spec(objective="b"))
    first = claim(wc)
    wc.finish_run(first, report())
    every = wc.audit(item.id)
    assert [r.position for r in wc.audit(item.id, limit=3)] == [r.position for r in every[-3:]]
    only_action = wc.audit(item.id, action_id=first.action_id)
    assert only_action and all(r.action_id == first.action_id for r in only_action)
    # The mirrors on the WorkItem name the Action too.
    assert {r.aggregate for r in only_action} == {"action", "work_item"}
    only_run = wc.audit(item.id, run_id=first.run_id)
    assert {r.type for r in only_run} >= {"RunClaimed", "RunFinished"}
    assert all(r.run_id == first.run_id for r in only_run)
    assert [r.type for r in wc.audit(item.id, type="WorkItemCreated")] == ["WorkItemCreated"]
    other = create_dynamic(wc, title="Other")
    assert {r.work_item_id for r in wc.audit(other.id)} == {other.id}


def test_a_runs_audit_holds_what_its_requests_were_charged(wc: WorkCenter) -> None:
    """``audit --run`` showed a Run's reservation (its estimate) but not its settlement
    (what it was charged): settlements named no Run (found by acceptance testing,
    ADR-0142)."""
    item = plan(wc, create_dynamic(wc).id)
    held = claim(wc)
    admission = wc.reserve_request(item.id, request={"max_tokens": 99}, run=held)
    assert admission.allowed and admission.request_id is not None
    wc.settle_request(item.id, admission.request_id, usage={"total_tokens": 350})
    rows = wc.audit(item.id, run_id=held.run_id)
    assert {"RequestReserved", "RequestSettled"} <= {r.type for r in rows}
    (settled,) = [r for r in rows if r.type == "RequestSettled"]
    assert (settled.run_id, settled.action_id) == (held.run_id, held.action_id)
    unfenced = wc.reserve_request(item.id, request={"max_tokens": 9}, kind="coordinator")
    assert unfenced.request_id is not None
    wc.settle_request(item.id, unfenced.request_id, usage={"total_tokens": 5})
    last = wc.audit(item.id, type="RequestSettled")[-1]
    assert (last.run_id, last.action_id) == (None, None)  # no Run's: a Coordinator request


def test_a_cut_audit_says_older_events_were_left(db_path: Path, wc: WorkCenter) -> None:
    """The newest --limit events alone read as the whole history (found by acceptance
    testing, ADR-0136): a line on stderr says older ones were left; none when not."""
    item = plan(wc, create_dynamic(wc).id)
    wc.finish_run(claim(wc), report())
    every = wc.audit(item.id)
    for args, cut in ((("--limit", "3"), True), (("--limit", str(len(every))), False)):
        for form in ((), ("--json",)):
            result = CliRunner().invoke(
                cli, ["--db", str(db_path), "audit", str(item.id), *args, *form]
            )
            assert result.exit_code == 0, result.output
            said = "showing the newest 3 events; there are older ones" in result.stderr
            assert said is cut, (args, form, result.stderr)
            if form:
                positions = [e["position"] for e in json.loads(result.stdout)["events"]]
                assert positions == [r.position for r in every][-int(args[1]) :]


def test_the_audit_is_read_from_the_event_store_with_no_copy(
    db_path: Path, wc: WorkCenter, clock: FakeClock
) -> None:
    item = plan(wc, create_dynamic(wc).id)
    claimed = claim(wc)
    clock.advance(5)
    wc.renew_lease(claimed)
    wc.finish_run(claimed, report())
    tables = {
        name
        for (name,) in sqlite3.connect(db_path).execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'"
        )
    }
    assert not {t for t in tables if t.startswith("audit")}
    assert "audit" not in wc.projections.views
    rows = wc.audit(item.id)
    # One row per stored event of the item's streams, in notification order.
    item_events = len(wc.history(item.id)) + len(wc.action_history(claimed.action_id))
    conversation = wc.conversation(item.id)
    assert conversation is not None
    assert len(rows) == item_events + wc.ledger(item.id).version + conversation.version
    # Fresh right after a write even with inline projections off: there is no view to lag.
    with WorkCenter.open(db_path, clock=clock, inline_projections=False) as other:
        other.cancel(item.id)
        assert other.audit(item.id)[-1].type == "WorkItemCancelled"
        assert len(other.audit(item.id)) > len(rows)


def test_payloads_are_sanitised_unless_raw(db_path: Path, wc: WorkCenter) -> None:
    item = create_dynamic(wc, goal="Deploy with token=hunter2secret to the cluster")
    rows = _cli(db_path, "audit", str(item.id), "--json", "--type", "WorkItemCreated")["events"]
    assert "hunter2secret" not in rows[0]["summary"] and "payload" not in rows[0]
    raw = _cli(db_path, "audit", str(item.id), "--json", "--raw", "--type", "WorkItemCreated")
    assert "hunter2secret" in raw["events"][0]["payload"]["goal"]


def test_audit_at_version_reproduces_show(db_path: Path, wc: WorkCenter, clock: FakeClock) -> None:
    """Record ``show --json --state`` during a scenario; ``audit --at V`` gives it back later."""
    shown: list[dict[str, Any]] = []

    def record() -> None:
        clock.advance(1)
        shown.append(_cli(db_path, "show", str(item.id), "--json", "--state"))

    item = create_dynamic(wc)
    record()
    plan(wc, item.id, action_spec(objective="a"), action_spec(objective="b"))
    record()
    first = claim(wc)
    record()
    wc.finish_run(first, report())
    record()
    second = claim(wc)
    wc.finish_run(second, report("waiting"))
    record()
    wc.guide(
        item.id,
        second.action_id,
        expected_version=wc.work_item(item.id).version,
        guidance="Answer: sqlite",
    )
    record()
    third = claim(wc)
    wc.finish_run(third, report())
    record()
    wc.complete(
        item.id,
        expected_version=wc.work_item(item.id).version,
        completion=completion(third.run_id),
    )
    record()

    versions = [s["item"]["version"] for s in shown]
    assert versions == sorted(set(versions))  # every point is a distinct version
    for expected in shown:
        version = expected["item"]["version"]
        got = _cli(db_path, "audit", str(item.id), "--at", str(version), "--json")
        assert got["state"]["item"] == expected["item"], version
        # No Action-only write (a renewal) followed these points, so the Actions agree too.
        assert got["state"]["actions"] == expected["actions"], version
        assert all(e["position"] <= got["state"]["position"] for e in got["events"])
        items = [e for e in got["events"] if e["aggregate"] == "work_item"]
        assert items[-1]["version"] == version


def test_audit_at_time(db_path: Path, wc: WorkCenter, clock: FakeClock) -> None:
    item = plan(wc, create_dynamic(wc).id)
    planned = wc.work_item(item.id)
    before_claim = clock.advance(30)
    clock.advance(30)
    claimed = claim(wc)
    got = _cli(db_path, "audit", str(item.id), "--at-time", before_claim.isoformat(), "--json")
    assert got["state"]["item"]["version"] == planned.version
    (action,) = got["state"]["actions"]
    assert (action["status"], action["runs"]) == ("ready", [])
    now = _cli(db_path, "audit", str(item.id), "--at-time", clock.now().isoformat(), "--json")
    assert now["state"]["actions"][0]["current_run_id"] == str(claimed.run_id)
    early = CliRunner().invoke(
        cli, ["--db", str(db_path), "audit", str(item.id), "--at-time", "2000-01-01T00:00:00"]
    )
    assert early.exit_code == 2 and "no state" in early.output


def test_the_text_trail_says_its_times_are_utc(db_path: Path, wc: WorkCenter) -> None:
    """A time without its zone was read as local time under another TZ (found by
    acceptance testing, ADR-0138)."""
    item = create_dynamic(wc)
    shown = CliRunner().invoke(cli, ["--db", str(db_path), "audit", str(item.id)])
    assert shown.exit_code == 0, shown.output
    assert " 2026-01-01T12:00:00Z  work_item v1  WorkItemCreated" in shown.stdout


def test_audit_at_a_time_before_a_later_event_stamped_earlier(
    db_path: Path, wc: WorkCenter, clock: FakeClock
) -> None:
    """A clock stepped back stamps a later event earlier than the one before it: the
    state at a time is the history up to the first event after it, not up to the last
    event stamped before it, which gave a state of events written after the time asked
    (found by acceptance testing, ADR-0138)."""
    item = plan(wc, create_dynamic(wc).id)
    planned = wc.work_item(item.id)
    clock.advance(60)
    claimed = claim(wc)  # at T0 + 60 s
    clock.advance(-3600)  # stepped back an hour
    assert wc.renew_lease(claimed)  # stamped T0 - 1 h, after the claim
    asked = (clock.now() + timedelta(seconds=3600 - 30)).isoformat()  # before the claim
    got = _cli(db_path, "audit", str(item.id), "--at-time", asked, "--json")
    assert got["state"]["item"]["version"] == planned.version
    (action,) = got["state"]["actions"]
    assert (action["status"], action["runs"]) == ("ready", [])


def test_progress_explains_proof_stale_and_conflicting_runs(
    db_path: Path, wc: WorkCenter, clock: FakeClock
) -> None:
    item = plan(
        wc,
        create_dynamic(wc).id,
        action_spec(objective="read"),
        action_spec(objective="write", workspace_mode="shared"),
        action_spec(objective="check"),
    )
    reader = claim(wc)
    clock.advance(1)
    wc.finish_run(reader, report())  # proof, until the writer ends after it started
    clock.advance(1)
    writer = claim(wc)
    clock.advance(1)
    wc.finish_run(writer, report())
    clock.advance(1)
    checker = claim(wc)
    clock.advance(1)
    wc.finish_run(
        checker,
        report(check_status="passed", acceptanceChecks=None)
        | {
            "acceptanceChecks": [
                {"criterion": CRITERIA[0], "status": "failed", "evidence": "3 tests fail"},
                {"criterion": CRITERIA[1], "status": "passed", "evidence": "docs ok"},
            ]
        },
    )
    data = _cli(db_path, "progress", str(item.id), "--json")
    explanation = data["explanation"]
    roles = {r["run_id"]: r["roles"] for r in explanation["runs"]}
    assert roles[str(reader.run_id)] == ["stale"]
    assert "proof" in roles[str(writer.run_id)]
    assert "conflicting" in roles[str(checker.run_id)]
    assert explanation["stale_run_ids"] == [str(reader.run_id)]
    assert str(checker.run_id) in explanation["conflicting_run_ids"]
    assert set(explanation["proof_run_ids"]) == set(data["goal_progress"]["proof_run_ids"])
    text = CliRunner().invoke(cli, ["--db", str(db_path), "progress", str(item.id)])
    assert text.exit_code == 0 and "stale" in text.output


def test_guiding_a_running_action_records_the_new_generation_and_the_ended_run(
    wc: WorkCenter,
) -> None:
    item = plan(wc, create_dynamic(wc).id)
    claimed = claim(wc)
    wc.guide(
        item.id,
        claimed.action_id,
        expected_version=wc.work_item(item.id).version,
        guidance="Look at the importer first",
    )
    (reset,) = wc.audit(item.id, type="ActionReset")
    assert (reset.actor, reset.generation, reset.run_id) == ("user", 2, claimed.run_id)
    (claim_row,) = wc.audit(item.id, type="RunClaimed")
    assert claim_row.generation == 1
