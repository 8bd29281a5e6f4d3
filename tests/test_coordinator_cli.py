"""The Coordinator's verbs: message, coordinate, conversation, and the worker running
Coordinator steps beside Runs."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from conftest import create_dynamic

from workcenter.adapters.cli import cli
from workcenter.application import WorkCenter


@pytest.fixture
def item_id(db_path: Path) -> Iterator[str]:
    with WorkCenter.open(db_path) as wc:
        yield str(create_dynamic(wc).id)


def run(db_path: Path, *args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(cli, ["--db", str(db_path), *args], env=env)


def as_json(result: Result) -> Any:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def events(db_path: Path) -> int:
    with WorkCenter.open(db_path, create=False) as wc:
        return wc.event_count()


def test_a_message_is_answered_by_coordinate_and_shown_by_conversation(
    db_path: Path, item_id: str
) -> None:
    posted = as_json(
        run(db_path, "message", item_id[:8], "What now?", "--client-id", "k", "--json")
    )
    assert posted["duplicate"] is False
    before = events(db_path)
    again = as_json(run(db_path, "message", item_id, "What now?", "--client-id", "k", "--json"))
    assert again == {**posted, "duplicate": True}
    assert events(db_path) == before
    steps = as_json(run(db_path, "coordinate", "--once", "--json"))["steps"]
    assert [s["turn_id"] for s in steps if s["status"] == "decided"] == [posted["turn_id"]]
    talk = as_json(run(db_path, "conversation", item_id, "--json"))
    assert [m["role"] for m in talk["messages"]] == ["user", "assistant"]
    assert talk["messages"][1]["decision"] == "create_actions"  # the scripted Coordinator
    shown = run(db_path, "conversation", item_id)
    assert shown.exit_code == 0 and "What now?" in shown.stdout
    with WorkCenter.open(db_path, create=False) as wc:
        (planned,) = wc.work_item(item_id).plan  # type: ignore[arg-type]
        assert wc.action(planned.action_id).type == "diagnose"  # one stage at a time


def test_refusals_are_one_line_and_write_nothing(db_path: Path, item_id: str) -> None:
    before = events(db_path)
    for args, error in (
        (("message", item_id, "   "), "InvalidInput"),
        (("coordinate", "--once", "--provider", "bogus"), "InvalidInput"),
        (("coordinate", "--once", "--provider", "openai"), "InvalidInput"),
    ):
        result = run(
            db_path, *args, env={"WORKCENTER_LLM_BASE_URL": "", "WORKCENTER_LLM_MODEL": ""}
        )
        assert result.exit_code == 2, result.output
        assert result.stderr.startswith(f"{error}: "), result.stderr
    # A configured server makes openai the default; without a model it is refused.
    server = {"WORKCENTER_LLM_BASE_URL": "http://127.0.0.1:9/v1", "WORKCENTER_LLM_MODEL": ""}
    chosen = run(db_path, "coordinate", "--once", env=server)
    assert chosen.exit_code == 2 and "WORKCENTER_LLM_MODEL" in chosen.stderr
    assert events(db_path) == before
    nothing = run(db_path, "worker", "--no-runs", "--no-coordinator")
    assert nothing.exit_code == 2 and "nothing to do" in nothing.output


def test_the_worker_runs_coordinator_steps_beside_runs(db_path: Path, item_id: str) -> None:
    run(db_path, "message", item_id, "Hello")
    stats = as_json(
        run(db_path, "worker", "--no-runs", "--exit-when-idle", "--poll", "0.01", "--json")
    )
    assert stats["coordinator_steps"] == {"decided": 2}  # the start's wake and the message
    assert stats["claimed"] == 0
    quiet = as_json(
        run(
            db_path,
            "worker",
            "--executor",
            "workcenter.adapters.executors:echo",
            "--no-coordinator",
            "--exit-when-idle",
            "--json",
        )
    )
    assert quiet["coordinator_steps"] == {}
