"""Decision provenance, the replay check of every Coordinator decision, and the audit
bundle (ADR-0060, ADR-0061): a scenario with every decision kind and every refusal
kind, replayed the same; a reply edited by SQL, and a rule tightened since, found."""

from __future__ import annotations

import base64
import json
import sqlite3
import subprocess
import sys
import zlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from uuid import UUID

import orjson
import postgres
import pytest
from click.testing import CliRunner
from conftest import (
    BOOT_ID,
    CRITERIA,
    FakeClock,
    action_spec,
    claim,
    completion,
    create_dynamic,
    report,
)
from coordinator_fakes import answer_text, create_actions, decision

from workcenter.adapters import audit_bundle
from workcenter.adapters.cli import cli
from workcenter.adapters.compression import inflate
from workcenter.adapters.providers.scripted import ScriptedProvider, Step
from workcenter.application import WorkCenter
from workcenter.domain import action as act
from workcenter.domain import conversation as conv
from workcenter.domain import work_item as wi
from workcenter.domain.errors import DecisionInvalid, NotFound
from workcenter.service_layer.handlers.coordinator import response_hash
from workcenter.service_layer.handlers.coordinator_rules import DomainRules, ParsedReply

ALL_VERDICTS = {"applied", "refused_parse", "refused_apply", "fenced"}
ALL_KINDS = {"answer", "create_actions", "guide_actions", "request_human", "complete"}


@pytest.fixture
def wc(db_path: Path, clock: FakeClock) -> Iterator[WorkCenter]:
    center = WorkCenter.open(db_path, clock=clock, boot_id=BOOT_ID)
    yield center
    center.close()


def drain(wc: WorkCenter, *script: Step, **kwargs: Any) -> None:
    wc.coordinate_once(ScriptedProvider(script, **kwargs))


def message(wc: WorkCenter, item_id: UUID, *script: Step, **kwargs: Any) -> None:
    wc.post_user_message(item_id, "What now?")
    drain(wc, *script, **kwargs)


def every_kind(wc: WorkCenter, clock: FakeClock) -> UUID:
    """One item through every decision kind and every refusal kind."""
    item = wc.create_work_item(
        title="Every kind",
        goal="Ship the feature",
        acceptance_criteria=list(CRITERIA),
        delivery_target="response",
        start=True,
        limits={"max_coordinator_failures": 10},
    )
    drain(wc, create_actions(action_spec()))  # create_actions, automatic
    action_id = wc.work_item(item.id).plan[0].action_id
    wc.finish_run(claim(wc), report("failed"))
    clock.advance(60)  # the passing Run starts after this failure
    guide = {"actionId": str(action_id), "instruction": "Read the log first"}
    drain(wc, decision("guide_actions", guidance=[guide]))  # guide_actions
    message(wc, item.id, answer_text("Working on it"))  # answer
    message(wc, item.id, "nonsense", "still nonsense")  # refused at parse, twice
    running = claim(wc)
    wc.post_user_message(item.id, "Plan the review")

    def finish_meanwhile(request: Any) -> str:
        wc.finish_run(running, report())
        return answer_text("I will wait")

    drain(wc, respond=finish_meanwhile)  # fenced: a Run finished while it thought
    run_id = wc.action(action_id).result_run_id
    unproven = completion(run_id) | {"evidenceRunIds": [], "acceptanceResults": []}
    message(wc, item.id, decision("complete", completion=unproven))  # refused at apply
    message(wc, item.id, decision("request_human", question="Ship it now?"))  # request_human
    message(wc, item.id, decision("complete", completion=completion(run_id)))  # complete
    assert wc.work_item(item.id).status == "done"
    return item.id


def test_every_kind_is_recorded_and_replays_the_same(wc: WorkCenter, clock: FakeClock) -> None:
    item_id = every_kind(wc, clock)
    turns = wc.maintenance.decisions(item_id)
    verdicts = {t["verdict"]["kind"] for t in turns}
    kinds = {t["decision"]["kind"] for t in turns if t["verdict"]["kind"] == "applied"}
    assert verdicts == ALL_VERDICTS and kinds == ALL_KINDS
    first = turns[0]
    assert first["wake"]["kind"] == "work_item_started" and not first["wake"]["user_message"]
    assert first["request"]["item_version"] >= first["fence"]["item_version"]
    assert len(first["request"]["hash"]) == 64 and first["request"]["size"] > 100
    assert first["attempts"][0]["requests"] == 1 and first["attempts"][0]["charged"] > 0
    effects = [e["type"] for e in first["effects"]]
    assert "ActionPlanned" in effects and "ActionAdded" in effects
    assert first["created"] == [str(wc.work_item(item_id).plan[0].action_id)]
    fenced = next(t for t in turns if t["verdict"]["kind"] == "fenced")
    assert "changed while" in fenced["verdict"]["reason"] and not fenced["effects"]
    invalid = next(t for t in turns if t["verdict"]["kind"] == "refused_parse")
    assert [a["verdict"] for a in invalid["attempts"]] == ["refused_parse"] * 2
    # The effects are the events of the decision's write, by position.
    positions = {p: e for p, e in wc._reads.read_streams([item_id])}
    for turn in turns:
        for effect in turn["effects"]:
            if effect["stream"] == "work_item":
                assert type(positions[effect["position"]]).__name__ == effect["type"]
    replayed = wc.maintenance.replay_decisions(item_id)
    assert replayed.same, [r.differences for _, r in replayed.differing]
    assert {r.recorded for _, r in replayed.results} == ALL_VERDICTS
    judged = [a for t in turns for a in t["attempts"] if a["verdict"] in ALL_VERDICTS]
    assert len(replayed.results) == len(judged)


def test_provenance_masks_secrets(wc: WorkCenter) -> None:
    item = create_dynamic(wc)
    drain(wc, create_actions(action_spec()))
    wc.post_user_message(item.id, "use api_key=sk-live-abcdef1234567890 from /home/bob/x")
    drain(wc, answer_text("Noted"))
    shown = json.dumps(wc.maintenance.decisions(item.id))
    assert "sk-live-abcdef1234567890" not in shown and "/home/bob" not in shown
    assert "api_key=***" in shown


class OnePerPlan(DomainRules):
    """A rule tightened since: a plan may hold one Action only."""

    def parse_reply(
        self,
        text: str,
        turn: conv.Turn,
        item: wi.WorkItemState,
        actions: Mapping[UUID, act.ActionState],
    ) -> ParsedReply:
        parsed = super().parse_reply(text, turn, item, actions)
        decision = getattr(parsed, "decision")  # noqa: B009
        if decision.kind == "create_actions" and len(decision.actions or ()) > 1:
            raise DecisionInvalid("rule one-action-per-plan: plan one Action at a time")
        return parsed


def test_a_tightened_rule_makes_an_accepted_decision_differ_naming_the_rule(
    wc: WorkCenter,
) -> None:
    item = create_dynamic(wc)
    drain(wc, create_actions(action_spec(), action_spec("implement", "Fix it")))
    assert len(wc.work_item(item.id).plan) == 2
    assert wc.maintenance.replay_decisions(item.id).same
    report_ = wc.maintenance.replay_decisions(item.id, rules=OnePerPlan())
    [(_, replayed)] = report_.results
    assert not replayed.same and replayed.cause == "rules"
    assert (replayed.recorded, replayed.today) == ("applied", "refused_parse")
    assert "one-action-per-plan" in replayed.differences[0]


def _edit_reply(db: Path, old: str, new: str, *, rehash: bool = False) -> None:
    """Change a stored reply's text by SQL, as someone with the file could (and, with
    ``rehash``, its response hash to match)."""
    with sqlite3.connect(db) as c:
        for rowid, topic, state in c.execute("SELECT rowid, topic, state FROM stored_events"):
            if not topic.endswith("ProviderTurnResponded"):
                continue
            data = inflate(state)
            if old.encode() not in data:
                continue
            edited = json.loads(data)
            edited["response"] = edited["response"].replace(old, new)
            if rehash:
                edited["response_hash"] = response_hash(edited["response"])
            c.execute(
                "UPDATE stored_events SET state = ? WHERE rowid = ?",
                (zlib.compress(json.dumps(edited).encode()), rowid),
            )
            return
    raise AssertionError(f"no stored reply holds {old!r}")


def test_a_reply_edited_by_sql_differs_and_breaks_the_chain(
    db_path: Path, clock: FakeClock
) -> None:
    with WorkCenter.open(db_path, clock=clock) as wc:
        item = create_dynamic(wc)
        drain(wc, create_actions(action_spec(objective="Find the cause")))
        assert wc.maintenance.replay_decisions().same
    _edit_reply(db_path, "Find the cause", "Delete the repository")
    with WorkCenter.open(db_path, clock=clock) as wc:
        replayed = wc.maintenance.replay_decisions(item.id)
        assert not replayed.same
        [(_, differs)] = replayed.differing
        assert differs.cause == "history"
        assert "does not match its response hash" in differs.differences[0]
        assert any("Delete the repository" in d for d in differs.differences)
        assert not wc.maintenance.verify_history().ok
        assert not wc.maintenance.verify_history(item.id).ok
    result = CliRunner().invoke(
        cli, ["audit", "decisions", "--replay", "--json", "--db", str(db_path)]
    )
    assert result.exit_code == 1, result.output
    assert json.loads(result.output)["differs"] == 1


def test_a_decision_whose_planned_action_was_deleted_differs_by_history(
    wc: WorkCenter, db_path: Path, clock: FakeClock
) -> None:
    """An Action's stream deleted in the database: the replay raised a KeyError's
    traceback (found by acceptance testing, ADR-0134)."""
    item_id = every_kind(wc, clock)
    first = wc.work_item(item_id).plan[0].action_id
    with sqlite3.connect(db_path) as c:
        c.execute("DELETE FROM stored_events WHERE originator_id = ?", (first.hex,))
    replayed = wc.maintenance.replay_decisions(item_id)
    assert not replayed.same
    assert {differs.cause for _, differs in replayed.differing} == {"history"}


def test_a_reply_edited_with_its_hash_is_blamed_on_the_broken_chain(
    db_path: Path, clock: FakeClock
) -> None:
    with WorkCenter.open(db_path, clock=clock) as wc:
        item = create_dynamic(wc)
        drain(wc, create_actions(action_spec(objective="Find the cause")))
    _edit_reply(db_path, "Find the cause", "Delete the repository", rehash=True)
    with WorkCenter.open(db_path, clock=clock) as wc:
        [(_, differs)] = wc.maintenance.replay_decisions(item.id).differing
    assert differs.cause == "history"
    assert not any("response hash" in d for d in differs.differences)
    assert "the hash chain breaks at position" in differs.differences[-1]


def test_the_cli_prints_provenance_and_replays(db_path: Path, clock: FakeClock) -> None:
    with WorkCenter.open(db_path, clock=clock) as wc:
        item_id = every_kind(wc, clock)
    runner = CliRunner()
    shown = runner.invoke(cli, ["audit", "decisions", str(item_id)[:8], "--db", str(db_path)])
    assert shown.exit_code == 0, shown.output
    assert "fenced" in shown.output and "refused_apply" in shown.output
    data = runner.invoke(cli, ["audit", "decisions", str(item_id), "--json", "--db", str(db_path)])
    assert len(json.loads(data.output)["turns"]) == 8
    replay = runner.invoke(cli, ["audit", "decisions", "--replay", "--db", str(db_path)])
    assert replay.exit_code == 0, replay.output
    assert "0 differ" in replay.output
    usage = runner.invoke(cli, ["audit", "decisions", "--db", str(db_path)])
    assert usage.exit_code == 2


# --- the bundle ----------------------------------------------------------------------


def _export(db_path: Path, item_id: UUID, to: Path) -> None:
    result = CliRunner().invoke(
        cli, ["audit", "export", str(item_id), "--to", str(to), "--db", str(db_path)]
    )
    assert result.exit_code == 0, result.output


def test_an_untouched_bundle_verifies_without_the_store(
    db_path: Path, clock: FakeClock, tmp_path: Path
) -> None:
    with WorkCenter.open(db_path, clock=clock) as wc:
        item_id = every_kind(wc, clock)
        events = len(wc.audit(item_id, limit=None))
    bundle = tmp_path / "item.jsonl"
    _export(db_path, item_id, bundle)
    head = json.loads(bundle.read_bytes().splitlines()[0])
    assert head["format"] == "workcenter-audit-bundle" and head["version"] == 1
    assert head["events"] == events
    db_path.unlink()  # no store any more
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "item.jsonl").write_bytes(bundle.read_bytes())
    # A fresh process in a fresh directory: nothing of the store is at hand.
    command = "from workcenter.adapters.cli import main; main()"
    verified = subprocess.run(
        [sys.executable, "-c", command, "audit", "verify", "--bundle", "item.jsonl", "--json"],
        cwd=elsewhere,
        capture_output=True,
        text=True,
        check=False,
    )
    assert verified.returncode == 0, verified.stdout + verified.stderr
    data = json.loads(verified.stdout)
    assert data["ok"] and data["links"]["events"] == events
    assert data["replay"]["turns"] == 9 and data["replay"]["differs"] == 0
    assert not (elsewhere / "workcenter.db").exists()


def _flip_state_byte(line: bytes) -> bytes:
    record = json.loads(line)
    state = bytearray(base64.b64decode(record["state"]))
    state[len(state) // 2] ^= 0x01
    record["state"] = base64.b64encode(bytes(state)).decode()
    return json.dumps(record).encode()


def test_one_byte_changed_fails_at_that_event(
    db_path: Path, clock: FakeClock, tmp_path: Path
) -> None:
    with WorkCenter.open(db_path, clock=clock) as wc:
        item_id = every_kind(wc, clock)
    bundle = tmp_path / "item.jsonl"
    _export(db_path, item_id, bundle)
    lines = bundle.read_bytes().splitlines()
    target = 7
    position = json.loads(lines[target])["position"]
    lines[target] = _flip_state_byte(lines[target])
    bundle.write_bytes(b"\n".join(lines) + b"\n")
    verdict = audit_bundle.verify(bundle)
    assert not verdict.ok and verdict.replay is None
    broken = verdict.links.broken
    assert broken is not None and (broken.kind, broken.position) == ("digest", position)
    result = CliRunner().invoke(cli, ["audit", "verify", "--bundle", str(bundle)])
    assert result.exit_code == 1
    assert f"BROKEN at position {position}" in result.output


def test_a_bundle_with_an_event_removed_or_rehashed_fails(
    db_path: Path, clock: FakeClock, tmp_path: Path
) -> None:
    with WorkCenter.open(db_path, clock=clock) as wc:
        item_id = every_kind(wc, clock)
    bundle = tmp_path / "item.jsonl"
    _export(db_path, item_id, bundle)
    lines = bundle.read_bytes().splitlines()
    cut = tmp_path / "cut.jsonl"
    cut.write_bytes(b"\n".join(lines[:-1]) + b"\n")  # the last event dropped
    verdict = audit_bundle.verify(cut)
    broken = verdict.links.broken
    assert not verdict.ok and broken is not None
    # After the last event left, whose own position is intact (it was named as broken).
    last = orjson.loads(lines[-2])["position"]
    assert (broken.kind, broken.previous_position) == ("truncated", last)
    assert f"events after position {last} were removed" in broken.message
    not_json = tmp_path / "bad.jsonl"
    not_json.write_bytes(b"\n".join([lines[0], b"{oops"]))
    with pytest.raises(audit_bundle.bundle.BundleInvalid, match="line 2"):
        audit_bundle.verify(not_json)


def test_on_postgresql_the_replay_and_the_bundle_hold_too(clock: FakeClock, tmp_path: Path) -> None:
    with postgres.fresh_schema("wcaudit") as url, WorkCenter.open(url, clock=clock) as wc:
        item_id = every_kind(wc, clock)
        replayed = wc.maintenance.replay_decisions()
        assert replayed.same and {r.recorded for _, r in replayed.results} == ALL_VERDICTS
        bundle = tmp_path / "item.jsonl"
        audit_bundle.export(wc, item_id, bundle)
    verdict = audit_bundle.verify(bundle)
    assert verdict.ok, verdict.json()
    assert verdict.replay is not None and len(verdict.replay.results) == len(replayed.results)


def test_the_api_serves_each_turns_provenance(wc: WorkCenter, clock: FakeClock) -> None:
    from http_client import client
    from test_http_api import problem

    item_id = every_kind(wc, clock)
    api = client(wc)
    body = api.get(f"/api/work-items/{item_id}/decisions").json()
    assert [t["verdict"]["kind"] for t in body["turns"]] == [
        t["verdict"]["kind"] for t in wc.maintenance.decisions(item_id)
    ]
    fenced = next(t for t in body["turns"] if t["verdict"]["kind"] == "fenced")
    one = api.get(f"/api/work-items/{item_id}/decisions", params={"turn": fenced["turn_id"]})
    assert one.json()["turns"] == [fenced]
    # A turn id that is no id is the caller's mistake, not a filter that matched nothing.
    for junk in ("zz", fenced["turn_id"][:-1]):
        problem(
            api.get(f"/api/work-items/{item_id}/decisions", params={"turn": junk}),
            422,
            "InvalidInput",
        )
    absent = api.get(f"/api/work-items/{item_id}/decisions", params={"turn": str(UUID(int=9))})
    assert absent.status_code == 200 and absent.json()["turns"] == []
    assert api.get(f"/api/work-items/{UUID(int=7)}/decisions").status_code == 404


def test_an_export_of_no_item_writes_nothing(wc: WorkCenter, tmp_path: Path) -> None:
    target = tmp_path / "none.jsonl"
    with pytest.raises(NotFound):
        audit_bundle.export(wc, UUID(int=7), target)
    assert list(tmp_path.iterdir()) == []
    result = CliRunner().invoke(
        cli, ["audit", "verify", "--bundle", str(tmp_path / "missing.jsonl")]
    )
    assert result.exit_code == 2 and "InvalidInput" in result.output
