"""The demo is the product's smoke test: the Coordinator must carry the item to done
with every criterion passed; under a token budget too small for it the item must stop
with nothing sent past the budget, and after an extend, a resume and a user message
the Coordinator must plan again. Also the CLI's read, budget and resume verbs."""

from __future__ import annotations

import gc
import json
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from click.testing import CliRunner, Result
from demo_stops import SMALL_BUDGET, stopped_demo

from workcenter.adapters.cli import cli
from workcenter.adapters.demo import EXTENSION_TOKENS, HUMAN_ANSWER
from workcenter.adapters.providers.scripted_coordinator import MATRIX_QUESTION
from workcenter.application import WorkCenter


def _assistant(detail: dict[str, Any]) -> list[tuple[str, str | None]]:
    """(status, decision) of the Coordinator's messages, in order."""
    messages = detail["conversation"]["messages"]
    return [(m["status"], m["decision"]) for m in messages if m["role"] == "assistant"]


def test_demo_json_shows_the_item_done_with_every_criterion_passed(tmp_path: Path) -> None:
    db = tmp_path / "demo.db"
    result = CliRunner().invoke(cli, ["--db", str(db), "demo", "--json"])
    assert result.exit_code == 0, result.output
    detail = json.loads(result.output)
    assert detail["item"]["status"] == "done" and detail["item"]["mode"] == "dynamic"
    criteria = detail["goal_progress"]["criteria"]
    assert len(criteria) == 3
    assert {c["status"] for c in criteria} == {"passed"}
    assert detail["goal_progress"]["delivery"]["status"] == "passed"
    runs = [run for action in detail["actions"] for run in action["runs"]]
    assert {"retryable", "failed", "completed"} <= {run["status"] for run in runs}
    assert detail["item"]["final_result"]["responses"]


def test_the_coordinator_plans_reacts_asks_once_and_completes(tmp_path: Path) -> None:
    result = _invoke(str(tmp_path / "demo.db"), "demo", "--json")
    assert result.exit_code == 0, result.output
    detail = json.loads(result.stdout)
    talk = detail["conversation"]
    assert _assistant(detail) == [
        ("completed", "create_actions"),  # woken by the start: diagnose, read-only
        ("completed", "create_actions"),  # diagnose settled: implement
        ("completed", "guide_actions"),  # implement failed: guided once
        ("completed", "request_human"),  # implement settled: the matrix is the human's call
        ("completed", "create_actions"),  # the human's answer: the verification
        ("completed", "complete"),  # verified: every criterion proven
    ]
    questions = [m["question"] for m in talk["messages"] if m["question"]]
    assert questions == [MATRIX_QUESTION], "the human is asked once"
    (user,) = [m for m in talk["messages"] if m["role"] == "user"]
    assert user["text"] == HUMAN_ANSWER
    assert [(t["user_originated"], t["automatic"]) for t in talk["turns"]].count((True, False)) == 1
    assert {t["status"] for t in talk["turns"]} == {"decided"}
    assert {e["status"] for e in talk["mailbox"]} == {"acked"}
    assert [e["kind"] for e in talk["mailbox"]] == [
        "work_item_started",
        *["action_settled"] * 3,
        "message",
        "action_settled",
    ]
    by_type = {a["type"]: a for a in detail["actions"]}
    assert by_type["diagnose"]["workspace_mode"] == "read"
    assert by_type["implement"]["generation"] == 2
    assert HUMAN_ANSWER in by_type["test"]["brief"]["objective"]


def test_read_verbs_answer_in_json_after_the_demo(tmp_path: Path) -> None:
    db = str(tmp_path / "demo.db")
    runner = CliRunner()
    assert runner.invoke(cli, ["--db", db, "demo"]).exit_code == 0
    listed = json.loads(runner.invoke(cli, ["--db", db, "list", "--json"]).output)
    assert [row["status"] for row in listed] == ["done"]
    item_id = listed[0]["id"]
    shown = json.loads(runner.invoke(cli, ["--db", db, "show", item_id, "--json"]).output)
    assert shown["id"] == item_id and shown["status"] == "done"
    history = json.loads(runner.invoke(cli, ["--db", db, "history", item_id, "--json"]).output)
    types = [e["type"] for e in history["events"]]
    assert types[0] == "WorkItemCreated" and types[-1] == "WorkItemCompleted"
    at = json.loads(
        runner.invoke(cli, ["--db", db, "history", item_id, "--at", "1", "--json"]).output
    )
    assert at["state"]["status"] == "draft" and len(at["events"]) == 1


def test_the_completion_cites_the_runs_goal_progress_names(tmp_path: Path) -> None:
    db = str(tmp_path / "demo.db")
    assert _invoke(db, "demo").exit_code == 0
    with WorkCenter.open(db) as wc:
        (row,) = wc.list_work_items()
        item = wc.work_item(row["id"])
        progress = wc.goal_progress(item.id)
        events = wc.history(item.id)
    assert item.final_result is not None
    cited = {r.criterion: set(r.evidence_run_ids) for r in item.final_result.acceptance_results}
    assert cited == {c.criterion: set(c.evidence_run_ids) for c in progress.criteria}
    completed = next(e for e in events if type(e).__name__ == "WorkItemCompleted")
    assert completed.actor is not None and completed.actor.kind == "coordinator"


def test_unknown_item_is_a_clear_error(tmp_path: Path) -> None:
    WorkCenter.open(tmp_path / "x.db").close()
    result = CliRunner().invoke(
        cli, ["--db", str(tmp_path / "x.db"), "show", "00000000-0000-0000-0000-000000000000"]
    )
    assert result.exit_code == 2
    assert result.stderr == "NotFound: WorkItem 00000000-0000-0000-0000-000000000000 not found\n"


def test_worker_verb_runs_an_executor_until_idle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = str(tmp_path / "w.db")
    # Once its store is open, the worker freezes what it holds (ADR-0110): observed here,
    # not done, so this test process keeps collecting its own garbage.
    frozen: list[int] = []
    monkeypatch.setattr(gc, "freeze", lambda: frozen.append(1))
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
    assert frozen == [1]


def test_worker_verb_refuses_a_bad_executor(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli, ["--db", str(tmp_path / "w.db"), "worker", "--executor", "no_colon_here"]
    )
    assert result.exit_code == 2 and "module:callable" in result.output


# --- the budget: the demo under a small limit, budget show/extend, resume ---------------


def _invoke(db: str, *args: str) -> Result:
    return CliRunner().invoke(cli, ["--db", db, *args])


def _events(db: str) -> int:
    with WorkCenter.open(db) as wc:
        return wc.event_count()


def test_demo_with_default_limits_meters_every_request(tmp_path: Path) -> None:
    result = _invoke(str(tmp_path / "demo.db"), "demo", "--json")
    assert result.exit_code == 0, result.output
    detail = json.loads(result.stdout)
    budget = detail["budget"]
    assert detail["item"]["status"] == "done" and budget["stop_reason"] is None
    runs = sum(len(action["runs"]) for action in detail["actions"])
    turns = len(detail["conversation"]["turns"])
    assert detail["provider_calls"] == budget["breakdown"]["actions"]["requests"] == runs
    assert detail["coordinator_calls"] == budget["breakdown"]["coordinator"]["requests"] == turns
    usage = budget["usage"]
    assert usage["requests"] == usage["reported_requests"] == runs + turns
    assert usage["unknown_requests"] == 0
    assert usage["charged_tokens"] == usage["total_tokens"] > 0
    assert budget["breakdown"]["actions"]["output_tokens"] == 200 * runs


def test_demo_under_a_small_token_budget_stops_and_sends_nothing_past_it(tmp_path: Path) -> None:
    db = str(tmp_path / "demo.db")
    detail = stopped_demo(db)

    item, budget = detail["item"], detail["budget"]
    assert item["status"] == "needs_attention"
    assert item["stopped"] == "work_item_tokens_exhausted"
    assert item["final_result"] is None
    assert budget["stop_reason"]["code"] == "work_item_tokens_exhausted"
    usage = budget["usage"]
    assert detail["provider_calls"] + detail["coordinator_calls"] == usage["requests"] >= 2
    assert usage["charged_tokens"] <= SMALL_BUDGET
    assert (
        usage["charged_tokens"] + budget["stop_reason"]["details"]["estimated_next_tokens"]
        > SMALL_BUDGET
    )

    item_id = UUID(item["id"])
    with WorkCenter.open(db) as wc:
        assert wc.ledger(item_id).request_count == usage["requests"]
        types = [type(e).__name__ for e in wc.history(item_id)]
        assert "WorkItemCompleted" not in types
        conversation = wc.conversation(item_id)
        assert conversation is not None
        last = conversation.messages[-1]
        assert last.status == "failed" and "work_item_tokens_exhausted" in (last.error or "")


def test_the_demo_recovers_from_the_stop_and_completes_the_item(tmp_path: Path) -> None:
    db = str(tmp_path / "demo.db")
    result = _invoke(db, "demo", "--max-tokens", str(SMALL_BUDGET), "--json")
    assert result.exit_code == 0, result.output
    detail = json.loads(result.stdout)
    item, budget, talk = detail["item"], detail["budget"], detail["conversation"]
    assert item["stopped"] is None and budget["stop_reason"] is None
    assert budget["limits"]["max_tokens"] == SMALL_BUDGET + EXTENSION_TOKENS
    turns = _assistant(detail)
    assert turns[:5] == [
        ("completed", "create_actions"),
        ("completed", "create_actions"),
        ("failed", None),  # its request was refused by the budget: never sent
        ("completed", "request_human"),  # woken by the resume: asks before spending again
        ("completed", "create_actions"),  # the user's message: it plans again
    ]
    # Then the rest of the work runs, on the raised budget, to the Coordinator's complete.
    assert turns[-1] == ("completed", "complete")
    assert ("failed", None) not in turns[3:]
    assert "work_item_resumed" in [e["kind"] for e in talk["mailbox"]]
    assert {e["status"] for e in talk["mailbox"]} == {"acked"}
    assert item["status"] == "done"
    assert budget["usage"]["charged_tokens"] <= SMALL_BUDGET + EXTENSION_TOKENS
    with WorkCenter.open(db) as wc:
        types = [type(e).__name__ for e in wc.history(UUID(item["id"]))]
    stop, resumed = types.index("BudgetStopRecorded"), types.index("WorkItemResumed")
    assert stop < resumed < types.index("WorkItemCompleted")


def test_demo_prints_the_stop_and_the_recovery_clearly(tmp_path: Path) -> None:
    result = _invoke(str(tmp_path / "demo.db"), "demo", "--max-tokens", str(SMALL_BUDGET))
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "stopped by its budget: work_item_tokens_exhausted" in out
    assert "budget extend" in out, "what a user would run"
    raised = out.index("the demo does that now: the budget raised to")
    planned = out.index("coordinator (your message) create_actions", raised)
    assert planned < out.index(
        "goal progress: 3/3 criteria passed, delivery passed; WorkItem is done"
    )


def test_budget_show_reports_limits_usage_attempts_and_versions(tmp_path: Path) -> None:
    db = str(tmp_path / "demo.db")
    item_id = stopped_demo(db)["item"]["id"]

    shown = json.loads(_invoke(db, "budget", "show", item_id, "--json").stdout)
    assert shown["limits"]["max_tokens"] == SMALL_BUDGET
    assert shown["limits"]["max_requests"] == 200
    assert shown["stop_reason"]["code"] == "work_item_tokens_exhausted"
    # The stop, then the Coordinator's failed turn counted on the ledger.
    assert shown["control_version"] < shown["ledger_version"]
    assert {row["type"]: row["attempts"] for row in shown["action_attempts"]} == {
        "diagnose": 1,
        "implement": 1,
    }
    assert {row["original_max_attempts"] for row in shown["action_attempts"]} == {2}
    assert {row["effective_max_attempts"] for row in shown["action_attempts"]} == {2}
    assert set(shown["usage"]) >= {
        "requests",
        "charged_tokens",
        "reserved_requests",
        "unknown_requests",
        "input_tokens",
        "output_tokens",
        "cache_read_tokens",
        "cache_write_tokens",
        "total_tokens",
    }

    # What a resume needs first (ADR-0096): room for the request the stop refused, and
    # the Coordinator failure its refusal counted, if that spent the failures too.
    charged, limit = shown["usage"]["charged_tokens"], shown["limits"]["max_tokens"]
    asked = shown["stop_reason"]["details"]["estimated_next_tokens"]
    assert shown["resume_needs"]["max_tokens"] == max(charged + asked - limit, charged - limit + 1)

    table = _invoke(db, "budget", "show", item_id)
    assert table.exit_code == 0 and "work_item_tokens_exhausted" in table.stdout
    flags = f"--tokens {shown['resume_needs']['max_tokens']}"
    assert f"refused until `budget extend` adds at least {flags}" in " ".join(table.stdout.split())
    # The stop's details in words, what is known only (raw JSON with nulls was printed).
    assert f"(estimated next tokens {asked})" in " ".join(table.stdout.split())
    assert "null" not in table.stdout


def test_budget_extend_and_resume_undo_the_stop(tmp_path: Path) -> None:
    db = str(tmp_path / "demo.db")
    detail = stopped_demo(db)
    item_id, budget = detail["item"]["id"], detail["budget"]

    extended = _invoke(
        db,
        "budget",
        "extend",
        item_id,
        "--expected-version",
        str(budget["control_version"]),
        "--tokens",
        "5000",
        "--action-attempts",
        "1",
        "--json",
    )
    assert extended.exit_code == 0, extended.output
    after = json.loads(extended.stdout)
    assert after["limits"]["max_tokens"] == SMALL_BUDGET + 5000
    assert after["limits"]["max_action_attempts"] == 4
    assert after["action_attempts_extension"] == 1
    assert after["stop_reason"] is not None, "extend clears no stop"
    assert after["control_version"] > budget["control_version"]

    resumed = _invoke(
        db,
        "resume",
        item_id,
        "--expected-version",
        str(after["item_version"]),
        "--expected-ledger-version",
        str(after["control_version"]),
        "--json",
    )
    assert resumed.exit_code == 0, resumed.output
    state = json.loads(resumed.stdout)
    assert state["item"]["stopped"] is None
    assert state["item"]["status"] not in ("needs_attention", "cancelled", "done")
    assert state["budget"]["stop_reason"] is None
    assert state["budget"]["usage"] == after["usage"], "resume resets no usage"


def _assert_refused(db: str, args: list[str], error: str) -> None:
    before = _events(db)
    result = _invoke(db, *args)
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{error}: "), result.stderr
    assert _events(db) == before, "a refused command wrote events"


def test_budget_and_resume_refusals_exit_non_zero_and_write_nothing(tmp_path: Path) -> None:
    db = str(tmp_path / "demo.db")
    detail = stopped_demo(db)
    item_id, budget = detail["item"]["id"], detail["budget"]
    version = str(budget["control_version"])

    # The stop came after ledger version 1: an extend based on it must refresh first.
    _assert_refused(
        db,
        ["budget", "extend", item_id, "--expected-version", "1", "--tokens", "5"],
        "VersionConflict",
    )
    _assert_refused(
        db,
        ["budget", "extend", item_id, "--expected-version", version, "--tokens", "0"],
        "InvalidInput",
    )
    missing = "00000000-0000-0000-0000-000000000000"
    _assert_refused(db, ["budget", "show", missing], "NotFound")
    _assert_refused(
        db, ["budget", "extend", missing, "--expected-version", "1", "--tokens", "5"], "NotFound"
    )
    before = _events(db)
    bare = _invoke(db, "budget", "extend", item_id, "--expected-version", version)
    assert bare.exit_code == 2 and "--tokens" in bare.stderr
    assert _events(db) == before

    # Too little: it says what more a resume needs, where it printed a resume the ledger
    # then refused (found by acceptance testing, ADR-0135).
    small = _invoke(db, "budget", "extend", item_id, "--expected-version", version, "--tokens", "1")
    assert small.exit_code == 0, small.output
    assert "a resume is refused until `budget extend` adds at least --tokens" in small.stdout
    assert "workcenter resume" not in small.stdout
    shown = _invoke(db, "budget", "show", item_id, "--json")
    version = str(json.loads(shown.stdout)["control_version"])

    # An extend moves the control version: a resume based on the version before it conflicts.
    extended = _invoke(
        db, "budget", "extend", item_id, "--expected-version", version, "--tokens", "5000"
    )
    assert extended.exit_code == 0, extended.output
    assert "still stopped" in extended.stdout
    item_version = str(budget["item_version"])
    _assert_refused(
        db,
        [
            "resume",
            item_id,
            "--expected-version",
            item_version,
            "--expected-ledger-version",
            version,
        ],
        "VersionConflict",
    )


def test_resume_is_refused_while_a_budget_is_spent_or_nothing_is_stopped(tmp_path: Path) -> None:
    db = str(tmp_path / "spent.db")
    with WorkCenter.open(db) as wc:
        item = wc.create_work_item(
            title="t", goal="g", acceptance_criteria=["c"], start=True, limits={"max_requests": 1}
        )
        running = wc.create_work_item(title="r", goal="g", acceptance_criteria=["c"], start=True)
        running_ledger = wc.ledger(running.id)
        assert wc.reserve_request(item.id, request={}).allowed
        assert not wc.reserve_request(item.id, request={}).allowed
        stopped, ledger = wc.work_item(item.id), wc.ledger(item.id)
        running_ledger = wc.ledger(running.id)
    assert stopped.stopped == "work_item_requests_exhausted"

    _assert_refused(
        db,
        [
            "resume",
            str(item.id),
            "--expected-version",
            str(stopped.version),
            "--expected-ledger-version",
            str(ledger.version),
        ],
        "CommandRefused",
    )
    _assert_refused(
        db,
        [
            "resume",
            str(running.id),
            "--expected-version",
            str(running.version),
            "--expected-ledger-version",
            str(running_ledger.version),
        ],
        "CommandRefused",
    )


def test_a_refused_budget_makes_no_store(tmp_path: Path) -> None:
    """Refused before the store is made: a refused command writes nothing, no file
    either (a demo with a budget past 2^53 - 1 left an empty store behind)."""
    for budget in ("0", str(2**53), "99999999999999999999999"):
        result = CliRunner().invoke(
            cli, ["--db", str(tmp_path / "x.db"), "demo", "--max-tokens", budget]
        )
        assert result.exit_code == 2, result.output
        assert "--max-tokens" in result.output
    assert list(tmp_path.iterdir()) == []


def test_the_demo_refuses_a_store_with_open_work_and_runs_beside_finished_work(
    tmp_path: Path,
) -> None:
    """ADR-0136: the demo's scripted worker and Coordinator claim whatever is due in the
    store, so a demo run on a deployment's store failed its real items with the script
    (found by acceptance testing). Refused, writing nothing; a store whose items are all
    done or cancelled (an earlier demo's) runs it again."""
    db = tmp_path / "shared.db"
    with WorkCenter.open(db) as wc:
        real = wc.create_work_item(
            title="production job",
            goal="ship it",
            acceptance_criteria=["shipped"],
            delivery_target="response",
            mode="linear",
            start=True,
        )
        before = wc.event_count()
    refused = CliRunner().invoke(cli, ["--db", str(db), "demo"])
    assert refused.exit_code == 2, refused.output
    assert (
        f"CommandRefused: the store holds 1 WorkItem(s) not done or cancelled (the first {real.id})"
        in refused.output
    )
    with WorkCenter.open(db) as wc:
        assert wc.event_count() == before
        wc.cancel(real.id)
    for _ in range(2):  # beside a cancelled item, and beside the first demo's done one
        ran = CliRunner().invoke(cli, ["--db", str(db), "demo", "--json"])
        assert ran.exit_code == 0, ran.output
        assert json.loads(ran.output)["item"]["status"] == "done"
