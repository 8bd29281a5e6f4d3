"""The Coordinator's verbs: message, coordinate, conversation, and the worker running
Coordinator steps beside Runs."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from conftest import claim, completion, create_dynamic, create_linear, plan, report

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
    reply = talk["messages"][1]
    assert reply["finished_at"] > reply["at"]  # the reply's own time, after its turn began
    shown = run(db_path, "conversation", item_id)
    assert shown.exit_code == 0 and "What now?" in shown.stdout
    assert f"{reply['finished_at']} coordinator" in shown.stdout
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


def test_a_failed_turn_is_said_on_stderr_and_once_exits_1(db_path: Path, item_id: str) -> None:
    """A model server that cannot be reached failed every turn, said on stdout with
    status 0: a script or a monitor saw nothing wrong (found by acceptance testing,
    ADR-0142)."""
    run(db_path, "message", item_id, "Hello")
    away = {"WORKCENTER_LLM_BASE_URL": "http://127.0.0.1:9/v1", "WORKCENTER_LLM_MODEL": "m"}
    failed = run(db_path, "coordinate", "--once", "--provider", "openai", env=away)
    assert failed.exit_code == 1, failed.output
    assert failed.stdout == ""
    assert failed.stderr.startswith(f"failed {item_id} turn "), failed.stderr
    assert "Traceback" not in failed.stderr


def test_a_done_items_left_wake_is_not_said_to_be_waiting(db_path: Path) -> None:
    """A wake left when the item was completed outside a turn was said "waiting for the
    Coordinator" for ever: it wakes for open items only (found by acceptance testing,
    ADR-0142)."""
    with WorkCenter.open(db_path) as wc:
        item = create_dynamic(wc)
        plan(wc, item.id)
        claimed = claim(wc)
        wc.finish_run(claimed, report())  # nothing left to run: the Coordinator is woken
        shown = run(db_path, "conversation", str(item.id))
        assert "wake(s) waiting" in shown.stdout  # open: the wake is due
        done = completion(claimed.run_id)
        wc.complete(item.id, expected_version=wc.work_item(item.id).version, completion=done)
        talk = wc.conversation(item.id)
        assert talk is not None and talk.open_entries(), "the wake is left as it was"
    shown = run(db_path, "conversation", str(item.id))
    assert shown.exit_code == 0 and "wake(s) waiting" not in shown.stdout, shown.stdout


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


def test_an_empty_executor_is_no_executor_and_claims_nothing(db_path: Path) -> None:
    """An unset variable in a service file (``--executor "$EXECUTOR"``) must not start a
    worker whose every Run fails and spends its attempts."""
    with WorkCenter.open(db_path) as wc:
        create_linear(wc)
    before = events(db_path)
    for empty in ("", "  "):
        result = run(db_path, "worker", "--executor", empty, "--exit-when-idle", "--no-coordinator")
        assert result.exit_code == 2 and "--executor is required" in result.output, result.output
    assert events(db_path) == before


def test_sigterm_fails_the_turn_in_hand_as_a_shutdown_not_counted(
    db_path: Path, item_id: str
) -> None:
    """coordinator.md 6.2: a shutdown fails the turn as interrupted, not counted. A
    service manager stops with SIGTERM: the command treats it as Ctrl-C, prints its
    JSON and exits 143, instead of dying with the turn left thinking (counted as a
    failure once its lease ran out)."""
    with socket.socket() as hanging:  # a model server that accepts and never answers
        hanging.bind(("127.0.0.1", 0))
        hanging.listen()
        env = os.environ | {
            "WORKCENTER_DB": str(db_path),
            "WORKCENTER_LLM_BASE_URL": f"http://127.0.0.1:{hanging.getsockname()[1]}/v1",
            "WORKCENTER_LLM_MODEL": "m",
            "WORKCENTER_LLM_TIMEOUT": "60",
        }
        command = "from workcenter.adapters.cli import main; main()"
        process = subprocess.Popen(
            [sys.executable, "-c", command, "coordinate", "--provider", "openai", "--json"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        hanging.settimeout(30)
        connection, _ = hanging.accept()  # the turn's request: the turn is thinking
        with connection:
            process.send_signal(signal.SIGTERM)
            out, err = process.communicate(timeout=30)
    assert process.returncode == 143, out + err
    assert json.loads(out) == {"steps": []}  # the step in hand did not end: it was stopped
    with WorkCenter.open(db_path, create=False) as wc:
        state = wc.conversation(item_id)  # type: ignore[arg-type]
        assert state is not None and state.thinking_turn() is None
        assert [t.status for t in state.turns.values()] == ["failed"]
        assert wc.ledger(item_id).coordinator_failures == 0  # type: ignore[arg-type]
