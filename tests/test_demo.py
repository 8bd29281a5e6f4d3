"""The demo is the product's smoke test: it must end done with every criterion passed."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from workcenter.adapters.cli import cli


def test_demo_json_shows_the_item_done_with_every_criterion_passed(tmp_path: Path) -> None:
    db = tmp_path / "demo.db"
    result = CliRunner().invoke(cli, ["--db", str(db), "demo", "--json"])
    assert result.exit_code == 0, result.output
    detail = json.loads(result.output)
    assert detail["item"]["status"] == "done"
    criteria = detail["goal_progress"]["criteria"]
    assert len(criteria) == 3
    assert {c["status"] for c in criteria} == {"passed"}
    assert detail["goal_progress"]["delivery"]["status"] == "passed"
    runs = [run for action in detail["actions"] for run in action["runs"]]
    assert "retryable" in {run["status"] for run in runs}
    assert "waiting" in {run["status"] for run in runs}
    assert detail["item"]["final_result"]["responses"]


def test_read_verbs_answer_in_json_after_the_demo(tmp_path: Path) -> None:
    db = str(tmp_path / "demo.db")
    runner = CliRunner()
    assert runner.invoke(cli, ["--db", db, "demo"]).exit_code == 0
    listed = json.loads(runner.invoke(cli, ["--db", db, "list", "--json"]).output)
    assert [row["status"] for row in listed] == ["done"]
    item_id = listed[0]["id"]
    shown = json.loads(runner.invoke(cli, ["--db", db, "show", item_id, "--json"]).output)
    assert shown["item"]["id"] == item_id
    history = json.loads(runner.invoke(cli, ["--db", db, "history", item_id, "--json"]).output)
    types = [e["type"] for e in history["events"]]
    assert types[0] == "WorkItemCreated" and types[-1] == "WorkItemCompleted"
    at = json.loads(
        runner.invoke(cli, ["--db", db, "history", item_id, "--at", "1", "--json"]).output
    )
    assert at["state"]["status"] == "draft" and len(at["events"]) == 1


def test_unknown_item_is_a_clear_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli, ["--db", str(tmp_path / "x.db"), "show", "00000000-0000-0000-0000-000000000000"]
    )
    assert result.exit_code != 0


def test_worker_verb_runs_an_executor_until_idle(tmp_path: Path) -> None:
    from workcenter.application import WorkCenter

    db = str(tmp_path / "w.db")
    with WorkCenter.open(db) as wc:
        item = wc.create_work_item(
            title="t", goal="g", acceptance_criteria=["c"], delivery_target="response", start=True
        )
        wc.plan_actions(
            item.id,
            expected_version=item.version,
            actions=[
                {
                    "type": "research",
                    "objective": f"o{i}",
                    "approach": "a",
                    "expectedOutcome": "e",
                    "workspaceMode": "read",
                }
                for i in range(3)
            ],
        )
    result = CliRunner().invoke(
        cli,
        [
            "--db",
            db,
            "worker",
            "--executor",
            "workcenter.adapters.executors:echo",
            "--exit-when-idle",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    stats = json.loads(result.output)
    assert stats["claimed"] == 3 and stats["outcomes"] == {"completed": 3}


def test_worker_verb_refuses_a_bad_executor(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli, ["--db", str(tmp_path / "w.db"), "worker", "--executor", "no_colon_here"]
    )
    assert result.exit_code == 2 and "module:callable" in result.output
