"""`audit events`: the whole event sequence as JSON Lines, resumed from a position
(found by acceptance testing, ADR-0145: an export to a warehouse had no way to page
through every event with its data; it read every item's trail again each time)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import BACKENDS, create_linear

from workcenter import run_worker
from workcenter.adapters.cli import cli
from workcenter.adapters.executors import echo
from workcenter.application import WorkCenter

SECRET = "api_key=sk-live-0123456789abcdefghijklmnop"


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def export(location: str, *args: str) -> tuple[list[dict[str, Any]], str | None, Any]:
    """The lines printed, the anchor stderr says to go on from, and the result."""
    result = CliRunner().invoke(cli, ["--db", location, "audit", "events", *args])
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    found = re.search(r"--after ([0-9a-f]{64}@\d+)$", result.stderr.strip())
    return lines, found.group(1) if found else None, result


def test_pages_resumed_from_their_last_position_hold_every_event_once(
    location: str, wc: WorkCenter
) -> None:
    for _ in range(3):
        create_linear(wc)
    wc.create_work_item(title="t", goal=f"deploy with {SECRET}")
    run_worker(wc, echo, worker="w1", exit_when_idle=True, poll_seconds=0.01)
    seen: list[dict[str, Any]] = []
    after = "0"
    while True:
        lines, after_next, result = export(location, "--after", after, "--limit", "7")
        assert result.exit_code == 0, result.output
        assert after_next is not None, result.stderr
        seen += lines
        if not lines:
            assert "(the head)" in result.stderr
            break
        assert after_next.endswith(f"@{lines[-1]['position']}")
        after = after_next
    positions = [line["position"] for line in seen]
    assert positions == sorted(set(positions)) and positions[-1] == wc.event_count()
    trails = [row.position for item in wc.list_work_items() for row in wc.audit(item["id"])]
    assert sorted(trails) == positions  # every event, each once, each of an item
    assert {line["work_item_id"] for line in seen} == {str(i["id"]) for i in wc.list_work_items()}
    kinds = {line["aggregate"] for line in seen}
    assert kinds >= {"work_item", "action", "ledger"}, kinds
    text = json.dumps(seen)
    assert "sk-live-0123456789" not in text and all(line["masked"] for line in seen)
    raw, _, _ = export(location, "--raw")
    assert SECRET in json.dumps(raw) and not any(line["masked"] for line in raw)
    assert [line["position"] for line in raw] == positions


def test_a_position_past_the_head_is_refused(location: str, wc: WorkCenter) -> None:
    create_linear(wc)
    lines, _, result = export(location, "--after", str(wc.event_count() + 1))
    assert result.exit_code == 2 and not lines
    assert "past the head of the event sequence" in result.stderr


def test_the_trail_takes_an_actions_number_as_show_prints_it(location: str, wc: WorkCenter) -> None:
    """``audit --action 1`` was refused where `retry`, `guide` and `input` take the
    number (found by acceptance testing, ADR-0145)."""
    item = create_linear(wc)
    first = wc.work_item(item.id).plan[0].action_id
    result = CliRunner().invoke(
        cli, ["--db", location, "audit", str(item.id), "--action", "1", "--json"]
    )
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)["events"]
    assert rows and {row["action_id"] for row in rows} == {str(first)}


def test_an_export_resumed_on_a_restored_older_backup_is_refused(tmp_path: Path) -> None:
    """Resumed by position alone after a restore of an older backup, an export went on
    silently once new events passed its position: the events between were another
    history's (found by acceptance testing, ADR-0145). The anchor it resumes from tells."""
    db, backup = tmp_path / "s.db", tmp_path / "backup.db"
    with WorkCenter.open(db) as wc:
        create_linear(wc)
    shutil.copy(db, backup)
    with WorkCenter.open(db) as wc:
        for _ in range(3):
            create_linear(wc)
    _, anchor, result = export(str(db))
    assert result.exit_code == 0 and anchor is not None, result.output
    position = int(anchor.rpartition("@")[2])
    for side in ("-wal", "-shm"):
        Path(f"{db}{side}").unlink(missing_ok=True)
    shutil.copy(backup, db)  # restored: the older history
    with WorkCenter.open(db) as wc:
        while wc.event_count() <= position:
            create_linear(wc)
    lines, _, refused = export(str(db), "--after", anchor)
    assert refused.exit_code == 2 and not lines, refused.output
    assert "is not the one the export read" in refused.stderr
    # A bare position cannot tell: it goes on, as the README says.
    assert export(str(db), "--after", str(position))[2].exit_code == 0
    unchanged, _, result = export(str(db), "--after", export(str(db), "--limit", "2")[1] or "")
    assert result.exit_code == 0 and unchanged, result.output
