"""The CLI's ``--actor``: a verb that writes records who caused it, and `audit` shows it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result
from conftest import plan
from demo_stops import stopped_demo

from workcenter.adapters.cli import cli
from workcenter.application import WorkCenter


def _invoke(db: str, *args: str) -> Result:
    return CliRunner().invoke(cli, ["--db", db, *args])


def _events(db: str) -> int:
    with WorkCenter.open(db) as wc:
        return wc.event_count()


def _extend(db: str, item_id: str, control_version: int, *more: str) -> Result:
    return _invoke(
        db,
        "budget",
        "extend",
        item_id,
        "--expected-version",
        str(control_version),
        "--tokens",
        "5000",
        *more,
    )


def _audit(db: str, item_id: str) -> list[dict[str, Any]]:
    result = _invoke(db, "audit", item_id, "--json", "--limit", "10000")
    assert result.exit_code == 0, result.output
    events: list[dict[str, Any]] = json.loads(result.stdout)["events"]
    return events


def test_extend_and_resume_are_recorded_as_the_named_actor(tmp_path: Path) -> None:
    db = str(tmp_path / "demo.db")
    detail = stopped_demo(db)
    item_id, budget = detail["item"]["id"], detail["budget"]
    before = len(_audit(db, item_id))

    extended = _extend(db, item_id, budget["control_version"], "--actor", "user:alice", "--json")
    assert extended.exit_code == 0, extended.output
    after = json.loads(extended.stdout)
    resumed = _invoke(
        db,
        "resume",
        item_id,
        "--expected-version",
        str(after["item_version"]),
        "--expected-ledger-version",
        str(after["control_version"]),
        "--actor",
        "operator:ops",
    )
    assert resumed.exit_code == 0, resumed.output

    new = _audit(db, item_id)[before:]
    by_type = {row["type"]: (row["actor"], row["actor_id"]) for row in new}
    assert by_type["BudgetExtended"] == ("user", "alice")
    assert by_type["WorkItemResumed"] == ("operator", "ops")
    text = _invoke(db, "audit", item_id, "--limit", "10000")
    assert "user alice" in text.stdout and "operator ops" in text.stdout


def test_a_bad_actor_is_refused_and_writes_nothing(tmp_path: Path) -> None:
    db = str(tmp_path / "demo.db")
    detail = stopped_demo(db)
    item_id, budget = detail["item"]["id"], detail["budget"]
    before = _events(db)

    for bad in ("robot:r2", "worker:no-boot", "unknown:legacy", ""):
        result = _extend(db, item_id, budget["control_version"], "--actor", bad)
        assert result.exit_code == 2, (bad, result.output)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and "actor" in lines[0], (bad, result.stderr)
        assert "Traceback" not in result.output
    assert _events(db) == before, "a refused command wrote events"


def test_a_message_is_recorded_as_the_named_user(tmp_path: Path) -> None:
    db = str(tmp_path / "wc.db")
    with WorkCenter.open(db, create=True) as wc:
        item = wc.create_work_item(
            title="Fix the parser",
            goal="The parser accepts trailing commas",
            acceptance_criteria=("Trailing commas parse",),
            mode="dynamic",
            start=True,
        )
    before = len(_audit(db, str(item.id)))

    posted = _invoke(
        db, "message", str(item.id), "Please start with the tests", "--actor", "user:bob"
    )
    assert posted.exit_code == 0, posted.output

    new = _audit(db, str(item.id))[before:]
    assert new and {(row["actor"], row["actor_id"]) for row in new} == {("user", "bob")}


def test_an_actor_the_store_records_by_itself_cannot_be_given(tmp_path: Path) -> None:
    """``--actor coordinator:<a turn's id>`` made a cancel look like that turn's decision
    in the audit, and ``system:budget`` like a budget's stop (found by acceptance
    testing, ADR-0142): both are refused, nothing written. A plan made outside a turn
    stays the plain ``coordinator``."""
    db = str(tmp_path / "w.db")
    with WorkCenter.open(db) as wc:
        item = wc.create_work_item(title="t", goal="g", acceptance_criteria=["c"], start=True)
    before = _events(db)
    turn = "ed6befbf-577e-4420-bbce-6b232e6cc45e"
    for actor in (f"coordinator:{turn}", "system:budget", "system"):
        result = _invoke(
            db, "cancel", str(item.id), "--expected-version", str(item.version), "--actor", actor
        )
        assert result.exit_code == 2, result.output
        assert "recorded by" in result.output and "Traceback" not in result.output
    assert _events(db) == before
    with WorkCenter.open(db) as wc:
        assert plan(wc, item.id, actor="coordinator").version > item.version
