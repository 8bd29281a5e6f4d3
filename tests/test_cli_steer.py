"""Steering one WorkItem from the command line as from the dashboard: ``create``,
``cancel``, ``retry`` (an answer too) and ``guide``, each under the version the user saw;
an Action named by its number as ``show`` prints it or by its id. Every refusal is one
line on stderr, exit 2, and writes nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from uuid import UUID

from click.testing import CliRunner, Result
from conftest import action_spec, claim, create_dynamic, plan, report

from workcenter.adapters.cli import cli
from workcenter.application import WorkCenter


def invoke(db: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["--db", str(db), *args])


def as_json(result: Result) -> Any:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def refused(db: Path, name: str, *args: str) -> str:
    """The verb's refusal: one line naming the error, exit 2, no event written."""
    with WorkCenter.open(db) as wc:
        before = wc.event_count()
    result = invoke(db, *args)
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{name}: "), result.stderr
    with WorkCenter.open(db) as wc:
        assert wc.event_count() == before, "a refused verb wrote events"
    return lines[0]


def test_create_a_draft_then_start_it_as_the_cli_suggests(tmp_path: Path) -> None:
    db = tmp_path / "steer.db"
    assert invoke(db, "init").exit_code == 0
    made = invoke(
        db, "create", "--title", "Fix the upload", "--goal", "Uploads never time out",
        "--criterion", "100 uploads pass", "--criterion", "The cause is written down",
        "--delivery-target", "response", "--mode", "linear", "--stage", "triage",
        "--stage", "implement", "--max-tokens", "50000", "--max-action-attempts", "4",
    )  # fmt: skip
    assert made.exit_code == 0, made.output
    assert "draft (version 1)" in made.stdout
    hint = made.stdout.split("`")[1].split()
    assert hint[:3] == ["workcenter", "--db", str(db)]
    started = invoke(db, *hint[3:])
    assert "started: WorkItem is ready" in started.stdout, started.output
    with WorkCenter.open(db) as wc:
        [row] = wc.list_work_items()
        item = wc.work_item(row["id"])
        assert (item.title, item.acceptance_criteria, item.mode) == (
            "Fix the upload",
            ("100 uploads pass", "The cause is written down"),
            "linear",
        )
        assert item.stages == ("triage", "implement")
        limits = wc.ledger(item.id).limits
        assert (limits.max_tokens, limits.max_action_attempts) == (50_000, 4)


def test_create_started_as_json_and_a_bad_one_refused(tmp_path: Path) -> None:
    db = tmp_path / "steer.db"
    assert invoke(db, "init").exit_code == 0
    body = as_json(
        invoke(db, "create", "--title", "Plan it", "--goal", "g", "--criterion", "c", "--start",
               "--json")
    )  # fmt: skip
    assert (body["item"]["status"], body["item"]["mode"]) == ("running", "dynamic")
    refusal = refused(db, "InvalidInput", "create", "--title", "  ", "--goal", "g")
    assert "title" in refusal
    refused(db, "InvalidInput", "create", "--title", "t", "--goal", "g", "--max-tokens", "0")
    refused(db, "InvalidInput", "create", "--title", "t", "--goal", "g", "--stage", "x")


def test_a_create_a_script_sends_again_with_its_request_id_makes_one_item(
    tmp_path: Path,
) -> None:
    db = tmp_path / "steer.db"
    assert invoke(db, "init").exit_code == 0
    args = ("create", "--title", "Once", "--goal", "g", "--request-id", "job-42", "--json")
    first = as_json(invoke(db, *args))["item"]
    assert as_json(invoke(db, *args))["item"] == first
    with WorkCenter.open(db) as wc:
        assert [row["id"] for row in wc.list_work_items()] == [UUID(first["id"])]
    refused(db, "RequestIdUsed", "create", "--title", "Twice", "--goal", "g", "--request-id",
            "job-42")  # fmt: skip
    assert "--request-id" in refused(
        db, "InvalidInput", "create", "--title", "t", "--goal", "g", "--request-id", " "
    )


def test_cancel_under_the_version_seen(tmp_path: Path) -> None:
    db = tmp_path / "steer.db"
    assert invoke(db, "init").exit_code == 0
    with WorkCenter.open(db) as wc:
        item = create_dynamic(wc)
        plan(wc, item.id)
        seen = wc.work_item(item.id).version
        wc.cancel(item.id)
        wc.resume(
            item.id,
            expected_version=wc.work_item(item.id).version,
            expected_ledger_version=wc.ledger(item.id).version,
        )
    refused(db, "VersionConflict", "cancel", str(item.id), "--expected-version", str(seen))
    with WorkCenter.open(db) as wc:
        now = wc.work_item(item.id).version
    done = invoke(db, "cancel", str(item.id)[:8], "--expected-version", str(now), "--reason", "no")
    assert done.exit_code == 0 and "cancelled: WorkItem is cancelled" in done.stdout, done.output
    with WorkCenter.open(db) as wc:
        now = wc.work_item(item.id).version
    refused(db, "CommandRefused", "guide", str(item.id), "1", "x", "--expected-version", str(now))


def test_retry_a_failed_action_by_its_number_and_answer_a_waiting_one(tmp_path: Path) -> None:
    db = tmp_path / "steer.db"
    assert invoke(db, "init").exit_code == 0
    with WorkCenter.open(db) as wc:
        item = create_dynamic(wc)
        plan(wc, item.id, action_spec(objective="a"), action_spec(objective="b"))
        first = claim(wc)
        wc.finish_run(first, report("failed"))
        second = claim(wc)
        wc.finish_run(second, report("waiting", waitingReason="Which database?"))
        version = str(wc.work_item(item.id).version)
    item_id = str(item.id)
    refused(db, "NotFound", "retry", item_id, "7", "--expected-version", version)
    refused(db, "InvalidInput", "retry", item_id, "2", "--expected-version", version)
    refused(
        db, "CommandRefused", "retry", item_id, "1", "--expected-version", version,
        "--expected-generation", "2",
    )  # fmt: skip
    retried = as_json(invoke(db, "retry", item_id, "1", "--expected-version", version, "--json"))
    assert retried["action_id"] == str(first.action_id)
    with WorkCenter.open(db) as wc:
        version = str(wc.work_item(item.id).version)
    answered = invoke(
        db, "retry", item_id, str(second.action_id)[:8], "--expected-version", version,
        "--answer", "PostgreSQL",
    )  # fmt: skip
    assert "answered: WorkItem is" in answered.stdout, answered.output
    with WorkCenter.open(db) as wc:
        assert wc.action(first.action_id).status == "ready"
        waiting = wc.action(second.action_id)
        assert (waiting.status, waiting.context[-1].text) == ("ready", "PostgreSQL")


def test_guide_a_ready_action(tmp_path: Path) -> None:
    db = tmp_path / "steer.db"
    assert invoke(db, "init").exit_code == 0
    with WorkCenter.open(db) as wc:
        item = plan(wc, create_dynamic(wc).id)
        [entry] = item.plan
    guided = invoke(
        db, "guide", str(item.id), "1", "Read the parser first",
        "--expected-version", str(item.version), "--expected-generation", "1",
    )  # fmt: skip
    assert "guided: WorkItem is ready" in guided.stdout, guided.output
    with WorkCenter.open(db) as wc:
        action = wc.action(entry.action_id)
        assert (action.generation, action.context[-1].text) == (2, "Read the parser first")
    refused(
        db, "CommandRefused", "guide", str(item.id), "1", "again",
        "--expected-version", str(item.version), "--expected-generation", "1",
    )  # fmt: skip
    with WorkCenter.open(db) as wc:
        now = str(wc.work_item(item.id).version)
    refused(db, "InvalidInput", "guide", str(item.id), "1", "   ", "--expected-version", now)


def test_input_to_a_ready_action_and_to_a_running_one(tmp_path: Path) -> None:
    db = tmp_path / "steer.db"
    assert invoke(db, "init").exit_code == 0
    with WorkCenter.open(db) as wc:
        item = plan(
            wc, create_dynamic(wc).id, action_spec(objective="a"), action_spec(objective="b")
        )
        first, second = (e.action_id for e in item.plan)
        running = claim(wc)
        assert running.action_id == first
        version = str(wc.work_item(item.id).version)
    item_id = str(item.id)
    ready = invoke(
        db, "input", item_id, "2", "Check Windows too", "--expected-version", version,
        "--expected-generation", "1",
    )  # fmt: skip
    assert "input sent to Action 2: its generation 2 is ready" in ready.stdout, ready.output
    with WorkCenter.open(db) as wc:
        version = str(wc.work_item(item.id).version)
    refused(
        db, "NotFound", "input", item_id, "1", "x", "--expected-version", version,
        "--expected-generation", "1", "--run", "abcdef12",
    )  # fmt: skip
    queued = as_json(
        invoke(
            db, "input", item_id, "1", "Use the staging data", "--expected-version", version,
            "--expected-generation", "1", "--run", str(running.run_id)[:8], "--json",
        )
    )  # fmt: skip
    assert queued["action"]["status"] == "running"
    with WorkCenter.open(db) as wc:
        assert [i.text for i in wc.pending_input(running)] == ["Use the staging data"]
        assert wc.action(second).context[-1].text == "Check Windows too"
    refused(
        db, "CommandRefused", "input", item_id, "1", "late", "--expected-version", version,
        "--expected-generation", "7",
    )  # fmt: skip
    with WorkCenter.open(db) as wc:
        other = claim(wc)  # Action 2's Run: live, but not Action 1's
        version = str(wc.work_item(item.id).version)
    refusal = refused(
        db, "CommandRefused", "input", item_id, "1", "x", "--expected-version", version,
        "--expected-generation", "1", "--run", str(other.run_id),
    )  # fmt: skip
    assert refusal.endswith(f"Run {other.run_id} is not a Run of Action 1"), refusal


def test_found_by_acceptance_testing_of_the_verbs(tmp_path: Path) -> None:
    """A digit that is not ASCII is no Action number (it was a traceback); a cancel of
    a cancelled item says it wrote nothing; a linear retry names the Action its work goes
    on in; a pasted page given as an id is said back clipped."""
    db = tmp_path / "steer.db"
    assert invoke(db, "init").exit_code == 0
    with WorkCenter.open(db) as wc:
        item = wc.create_work_item(
            title="t", goal="g", acceptance_criteria=["c"], delivery_target="response",
            mode="linear", stages=["implement"], start=True,
        )  # fmt: skip
        wc.finish_run(claim(wc), report("failed"))
        version = str(wc.work_item(item.id).version)
    item_id = str(item.id)
    for number in ("\u00b2", "\u2460", "\u0661"):  # superscript 2, circled 1, Arabic-Indic 1
        refused(db, "InvalidInput", "retry", item_id, number, "--expected-version", version)
    retried = invoke(db, "retry", item_id, "1", "--expected-version", version)
    said, went_on = retried.stdout.splitlines()
    assert said.startswith("retried: WorkItem is ready"), retried.output
    assert went_on == "its work goes on as Action 2 (ready)"
    refusal = refused(db, "NotFound", "cancel", "a" * 5_000, "--expected-version", "1")
    assert len(refusal) < 200, refusal
    with WorkCenter.open(db) as wc:
        version = str(wc.work_item(item.id).version)
    assert (
        "cancelled: WorkItem is cancelled"
        in invoke(db, "cancel", item_id, "--expected-version", version).stdout
    )
    with WorkCenter.open(db) as wc:
        version = str(wc.work_item(item.id).version)
    again = as_json(invoke(db, "cancel", item_id, "--expected-version", version, "--json"))
    assert again["changed"] is False
    said = invoke(db, "cancel", item_id, "--expected-version", version).stdout
    assert said.startswith("already cancelled (nothing written)"), said


def test_resume_suggests_commands_on_the_store_given(tmp_path: Path) -> None:
    db = tmp_path / "steer.db"
    assert invoke(db, "init").exit_code == 0
    with WorkCenter.open(db) as wc:
        item = plan(wc, create_dynamic(wc).id)
        wc.cancel(item.id)
        versions = [str(wc.work_item(item.id).version), str(wc.ledger(item.id).version)]
    resumed = invoke(
        db, "resume", str(item.id), "--expected-version", versions[0],
        "--expected-ledger-version", versions[1],
    )  # fmt: skip
    assert resumed.exit_code == 0, resumed.output
    assert f"workcenter --db {db} coordinate" in resumed.stdout
    assert f"workcenter --db {db} message" in resumed.stdout


def test_a_create_makes_no_store_and_names_the_options(tmp_path: Path) -> None:
    """A create on a path without a store is refused, as every verb but `init` and
    `demo` refuses one: it made an empty store, also when refused, and one made by a
    scheduled create while a backup was being restored (found by acceptance testing,
    ADR-0145). Its refusals named the Python API's arguments ("limits.max_tokens"), not
    the options the user gave, and come before the store's."""
    db = tmp_path / "new.db"

    def said(*args: str) -> str:
        result = invoke(db, "create", "--title", "t", "--goal", "g", *args)
        assert result.exit_code == 2, result.output
        line: str = result.stderr.strip()
        assert line.startswith("InvalidInput: ") and "\n" not in line, line
        return line

    assert "title is required" in said("--title", " ")
    assert "--max-tokens must be a positive integer, not 0" in said("--max-tokens", "0")
    assert "each --criterion must be at most 1000 characters" in said("--criterion", "c" * 1_001)
    assert said("--delivery-target", "x").startswith("InvalidInput: --delivery-target must be")
    assert list(tmp_path.iterdir()) == []
    unmade = invoke(db, "create", "--title", "t", "--goal", "g")
    assert unmade.exit_code == 2 and "StoreUnavailable: no Workcenter store" in unmade.stderr
    assert "(`workcenter init` makes one)" in unmade.stderr
    assert list(tmp_path.iterdir()) == []
    assert invoke(db, "init").exit_code == 0
    made = as_json(
        invoke(db, "create", "--title", "t", "--goal", "g", "--criterion", "c", "--json")
    )
    item_id = made["item"]["id"]
    with WorkCenter.open(db) as wc:
        ledger = wc.ledger(UUID(item_id))
    extend = ("budget", "extend", item_id, "--expected-version", str(ledger.version))
    refusal = refused(db, "InvalidInput", *extend, "--tokens", "-5")
    assert "--tokens must be a positive integer, not -5" in refusal
