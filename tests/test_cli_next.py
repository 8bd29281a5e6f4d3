"""`show` in text says what to run next on an item a user must act on, and the command
it names works as given (ADR-0136: before it, only a dynamic item waiting for a plan
was told, found by acceptance testing)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from uuid import UUID

from click.testing import CliRunner, Result
from conftest import FakeClock, claim, create_dynamic, create_linear, plan, report

from workcenter.adapters.cli import cli
from workcenter.application import WorkCenter

WIDE = {"COLUMNS": "10000"}


def invoke(db: Path, *args: str) -> Result:
    result = CliRunner().invoke(cli, ["--db", str(db), *args], env=WIDE)
    assert result.exit_code == 0, result.output
    return result


def hinted(db: Path, item_id: object, says: str) -> list[str]:
    """The command `show` names in its line saying ``says``, as words to run."""
    output = invoke(db, "show", str(item_id)).stdout
    (line,) = [line for line in output.splitlines() if says in line]
    command = re.search(r"`(workcenter [^`]*)`", line)
    assert command is not None, line
    words = shlex.split(command.group(1))
    assert words[:3] == ["workcenter", "--db", str(db)]  # the store the user named
    return words[3:]


def status(db: Path, item_id: UUID) -> str:
    with WorkCenter.open(db) as wc:
        return wc.work_item(item_id).status


def test_a_draft_is_told_its_start(db_path: Path) -> None:
    with WorkCenter.open(db_path) as wc:
        item = create_linear(wc, start=False)
    invoke(db_path, *hinted(db_path, item.id, "a draft: start it with"))
    assert status(db_path, item.id) == "ready"


def test_a_failed_action_is_told_its_retry(db_path: Path) -> None:
    with WorkCenter.open(db_path) as wc:
        item = create_linear(wc, stages=("implement",))
        wc.finish_run(claim(wc), report("failed"))
        assert wc.work_item(item.id).status == "needs_attention"
    invoke(db_path, *hinted(db_path, item.id, "action 1 failed:"))
    assert status(db_path, item.id) == "ready"


def test_a_waiting_action_is_told_its_question_and_how_to_answer(db_path: Path) -> None:
    with WorkCenter.open(db_path) as wc:
        item = plan(wc, create_dynamic(wc).id)
        wc.finish_run(claim(wc), report("waiting"))
    words = hinted(db_path, item.id, "waits for an answer (Which database should I use?)")
    assert words[-2:] == ["--answer", "TEXT"]
    invoke(db_path, *words[:-1], "PostgreSQL")
    assert status(db_path, item.id) == "ready"


def test_a_budget_stop_is_told_the_extend_it_needs_then_the_resume(db_path: Path) -> None:
    with WorkCenter.open(db_path) as wc:
        item = plan(wc, create_dynamic(wc, limits={"max_requests": 1}).id)
        claimed = claim(wc)
        request = {"messages": [{"role": "user", "content": "hi"}]}
        assert wc.reserve_request(item.id, request=request, run=claimed).allowed
        assert not wc.reserve_request(item.id, request=request, run=claimed).allowed
        assert wc.ledger(item.id).stop_reason is not None
    words = hinted(db_path, item.id, "stopped by its budget (work_item_requests_exhausted)")
    assert words[:2] == ["budget", "extend"] and "--requests" in words
    extended = invoke(db_path, *words)
    resume = re.search(r"`workcenter --db \S+ (resume [^`]*)`", extended.stdout)
    assert resume is not None, extended.stdout
    invoke(db_path, *shlex.split(resume.group(1)))
    with WorkCenter.open(db_path) as wc:
        assert wc.ledger(item.id).stop_reason is None


def test_a_cancelled_item_is_told_its_resume(db_path: Path) -> None:
    with WorkCenter.open(db_path) as wc:
        item = create_linear(wc)
        wc.cancel(item.id)
    invoke(db_path, *hinted(db_path, item.id, "cancelled:"))
    assert status(db_path, item.id) == "ready"


def test_an_item_at_work_or_done_gets_no_line(db_path: Path) -> None:
    with WorkCenter.open(db_path) as wc:
        running = create_linear(wc, stages=("implement",))
        claimed = claim(wc)
        done = create_linear(wc, stages=("implement",))
        wc.finish_run(claim(wc), report())
    for item_id in (running.id, done.id):
        output = invoke(db_path, "show", str(item_id)).stdout
        assert "`workcenter" not in output, output
    assert claimed.work_item_id == running.id


def test_a_running_action_says_who_holds_its_run_and_until_when(db_path: Path) -> None:
    """Only the audit said it: an Action whose remote worker went away looked like any
    running one until its lease ended (found by acceptance testing, ADR-0140)."""
    with WorkCenter.open(db_path) as wc:
        item = create_linear(wc, stages=("implement",))
        held = wc.claim_next("remote-7", lease_seconds=90)
        assert held is not None
        run = wc.action(held.action_id).run(held.run_id)
        assert run is not None
    output = invoke(db_path, "show", str(item.id)).stdout
    until = run.expires_at.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert f"held by remote-7@{run.owner_boot_id}, lease until {until} (epoch 1)" in output


def test_a_lapsed_lease_is_said_as_such(db_path: Path) -> None:
    """``show`` printed a lease "until" a time already past, as if live (found by
    acceptance testing, ADR-0142)."""
    with WorkCenter.open(db_path, clock=FakeClock()) as wc:  # T0: long ago
        item = create_linear(wc, stages=("implement",))
        held = wc.claim_next("gone-3", lease_seconds=60)
        assert held is not None
    output = invoke(db_path, "show", str(item.id)).stdout
    until = held.expires_at.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert f"held by gone-3@{held.boot_id}, lease lapsed at {until} (epoch 1)" in output
    assert "it ends at the next recovery" in " ".join(output.split())
