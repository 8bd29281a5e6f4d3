"""Defects an acceptance session on the embedded SQLite default found (ADR-0090): each
test failed on the code before its fix, and every refusal leaves the store as it was."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import uuid
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from conftest import action_spec, claim, create_dynamic, plan, refused, run_of

from workcenter.adapters.cli import cli
from workcenter.adapters.persistence import StoreUnavailable
from workcenter.adapters.worker import run_worker
from workcenter.application import Claim, WorkCenter
from workcenter.domain.errors import InvalidInput


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


def one_line_error(result: Result, name: str) -> str:
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{name}: "), result.stderr
    return lines[0]


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --- a file: URI names a file, so it is not taken for a store in memory ---------------


def test_a_file_uri_is_refused_and_creates_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    for verb in (["list"], ["projections", "status"], ["demo"], ["init"]):
        line = one_line_error(invoke("--db", "file:py.db", *verb), "StoreUnavailable")
        assert "give the file's path" in line
    with pytest.raises(StoreUnavailable, match="give the file's path"):
        WorkCenter.open("file:py.db", create=False)
    with pytest.raises(StoreUnavailable):
        WorkCenter.open(f"file:{tmp_path / 'abs.db'}?mode=rwc")
    assert list(tmp_path.iterdir()) == []


def test_a_file_uri_never_writes_into_another_applications_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    foreign = tmp_path / "other.db"
    conn = sqlite3.connect(foreign)
    conn.execute("CREATE TABLE notes (body TEXT)")
    conn.commit()
    conn.close()
    before = digest(foreign)
    with WorkCenter.open(tmp_path / "source.db"):
        pass
    one_line_error(invoke("--db", "file:other.db", "demo"), "StoreUnavailable")
    plain_copy = CliRunner().invoke(
        cli,
        ["--db", str(tmp_path / "source.db"), "rekey", "--to", "file:other.db"],
        env={"WORKCENTER_NEW_CIPHER_KEY": ""},
    )
    one_line_error(plain_copy, "StoreUnavailable")
    assert digest(foreign) == before


def test_stores_in_memory_still_open() -> None:
    for name in (":memory:", "file:acceptance?mode=memory&cache=shared"):
        with WorkCenter.open(name) as wc:
            assert wc.event_count() == 0


@pytest.mark.parametrize("name", [":memory:", "file::memory:?cache=shared"])
@pytest.mark.parametrize("given", ["--db", "WORKCENTER_DB"])
def test_the_cli_refuses_a_store_in_memory_but_for_the_demo(name: str, given: str) -> None:
    """``create --db :memory:`` said "created" and named a next command that found
    nothing; ``init`` said the store existed (found by acceptance testing, ADR-0145)."""
    args, env = (["--db", name], {}) if given == "--db" else ([], {"WORKCENTER_DB": name})
    for verb in (["create", "--title", "t", "--goal", "g"], ["init", "--json"], ["list"]):
        refused = CliRunner().invoke(cli, [*args, *verb], env=env)
        assert refused.exit_code == 2, refused.output
        assert refused.output.startswith("InvalidInput: a store in memory ends with this")
    demo = CliRunner().invoke(cli, [*args, "demo", "--json"], env=env)
    assert demo.exit_code == 0, demo.output


# --- a report that is not JSON is refused, and the worker gives its Run back ----------

NOT_JSON: dict[str, Any] = {
    "an object": {"x": object()},
    "a set": {"x": {1, 2}},
    "bytes": {"x": b"raw"},
    "a tuple key": {(1, 2): "x"},
}


@pytest.mark.parametrize("outputs", NOT_JSON.values(), ids=NOT_JSON.keys())
def test_a_report_holding_a_value_json_cannot_carry_is_refused(
    wc: WorkCenter, outputs: dict[Any, Any]
) -> None:
    item = create_dynamic(wc)
    plan(wc, item.id, action_spec())
    claimed = claim(wc)
    with refused(wc, InvalidInput, "not JSON"):
        wc.finish_run(claimed, {"outcome": "completed", "summary": "done", "outputs": outputs})
    assert run_of(wc, claimed).status == "running"


def reports_an_object(claim: Claim) -> Any:
    return {"outcome": "completed", "summary": "done", "outputs": {"x": object()}}


def test_the_worker_interrupts_a_run_whose_report_is_not_json(db_path: Path) -> None:
    with WorkCenter.open(db_path) as wc:
        item = create_dynamic(wc)
        plan(wc, item.id, action_spec())
    result = invoke(
        "--db", str(db_path), "worker", "--executor", f"{__name__}:reports_an_object",
        "--exit-when-idle", "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    stats = json.loads(result.stdout)
    with WorkCenter.open(db_path) as wc:
        (action,) = wc.actions(wc.work_item(item.id)).values()
    assert stats["errors"] == stats["interrupted"] == stats["claimed"] == len(action.runs) > 1
    assert {run.status for run in action.runs} == {"interrupted"}
    assert all("malformed executor report" in (run.end_reason or "") for run in action.runs)


# --- a limit past 2^53 - 1 is refused, not an overflow -------------------------------


def test_a_list_limit_past_the_integer_bound_is_refused(wc: WorkCenter) -> None:
    create_dynamic(wc)
    for limit in (2**53, 2**63, 2**64):
        with refused(wc, InvalidInput, "at most 9007199254740991"):
            wc.list_work_items(limit=limit)
    assert len(wc.list_work_items(limit=2**53 - 1)) == 1


def test_list_limit_past_the_bound_is_a_usage_error(db_path: Path) -> None:
    with WorkCenter.open(db_path) as wc:
        create_dynamic(wc)
    for limit in ("9223372036854775807", "9007199254740992"):
        result = invoke("--db", str(db_path), "list", "--limit", limit)
        assert result.exit_code == 2 and isinstance(result.exception, SystemExit)
        assert "1<=x<=9007199254740991" in result.stderr
    result = invoke("--db", str(db_path), "list", "--limit", "9007199254740991", "--json")
    assert result.exit_code == 0 and len(json.loads(result.stdout)) == 1


# --- seconds that are not finite are a usage error, not a traceback or a busy loop ----

SECONDS_OPTIONS = [
    ["worker", "--exit-when-idle", "--poll"],
    ["worker", "--exit-when-idle", "--lease"],
    ["worker", "--exit-when-idle", "--no-runs", "--poll"],
    ["coordinate", "--poll"],
    ["coordinate", "--lease"],
    ["projections", "run", "--poll"],
    ["projections", "run", "--report"],
    ["serve", "--poll"],
]


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e308"])
@pytest.mark.parametrize("option", SECONDS_OPTIONS, ids=" ".join)
def test_seconds_must_be_a_finite_number(db_path: Path, option: list[str], value: str) -> None:
    with WorkCenter.open(db_path):
        pass
    before = digest(db_path)
    result = invoke("--db", str(db_path), *option, value)
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit), result.output
    assert "Invalid value for" in result.stderr
    assert digest(db_path) == before


@pytest.mark.parametrize(
    "arguments",
    [
        {"lease_seconds": float("nan")},
        {"lease_seconds": float("inf")},
        {"poll_seconds": float("nan")},
        {"poll_seconds": 1e308},
        {"poll_seconds": 0},
        {"poll_seconds": True},
    ],
    ids=repr,
)
def test_run_worker_refuses_seconds_out_of_bounds_before_it_claims(
    wc: WorkCenter, arguments: dict[str, Any]
) -> None:
    item = create_dynamic(wc)
    plan(wc, item.id, action_spec())
    with refused(wc, InvalidInput, "_seconds must be a number"):
        run_worker(wc, reports_an_object, worker="w", exit_when_idle=True, **arguments)


# --- a start that writes nothing says so, whatever version it was given ---------------


def test_start_with_an_older_version_of_a_started_item_says_nothing_was_written(
    db_path: Path,
) -> None:
    with WorkCenter.open(db_path) as wc:
        item = create_dynamic(wc, start=False)
        started = wc.start(item.id, expected_version=item.version)
        plan(wc, item.id, action_spec())
        after = wc.work_item(item.id)
        count = wc.event_count()
    assert after.version > started.version
    command = ["--db", str(db_path), "start", str(item.id)]
    seen = ["--expected-version", str(started.version)]
    result = invoke(*command, *seen, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["changed"] is False
    text = invoke(*command, *seen)
    assert text.stdout.startswith("already started (nothing written)"), text.output
    with WorkCenter.open(db_path) as wc:
        assert wc.event_count() == count


# --- a caller's plan is clamped as the Coordinator's is; stages of a dynamic item ------


@pytest.mark.parametrize(
    ("field", "kept"),
    [
        ({"maxAttempts": 0}, (1, "read")),
        ({"maxAttempts": 6}, (5, "read")),
        ({"maxAttempts": "3"}, (2, "read")),  # not an integer: the default
        ({"maxAttempts": True}, (2, "read")),
        ({"maxAttempts": 3.0}, (2, "read")),
        ({"maxAttempts": 4, "workspaceMode": "bogus"}, (4, "shared")),
        ({"maxAttempts": 5, "workspaceMode": "read"}, (5, "read")),
    ],
    ids=repr,
)
def test_a_planned_action_is_clamped_as_the_coordinators_are(
    wc: WorkCenter, field: dict[str, Any], kept: tuple[int, str]
) -> None:
    item = create_dynamic(wc)
    plan(wc, item.id, action_spec() | field)
    (action,) = wc.actions(wc.work_item(item.id)).values()
    assert (action.max_attempts, action.workspace_mode) == kept


def test_stages_given_to_a_dynamic_item_are_refused(wc: WorkCenter) -> None:
    with refused(wc, InvalidInput, "stages are for linear WorkItems"):
        wc.create_work_item(
            title="t", goal="g", acceptance_criteria=["c"], mode="dynamic", stages=["implement"]
        )


def test_an_empty_list_of_stages_is_no_stage_for_a_dynamic_item(wc: WorkCenter) -> None:
    item = wc.create_work_item(
        title="t", goal="g", acceptance_criteria=["c"], mode="dynamic", stages=[]
    )
    assert wc.work_item(item.id).mode == "dynamic"


# --- a worker's name is its own, never silently the default ---------------------------


def test_an_empty_worker_name_is_refused(db_path: Path) -> None:
    with WorkCenter.open(db_path) as wc:
        item = create_dynamic(wc)
        plan(wc, item.id, action_spec())
        count = wc.event_count()
        with refused(wc, InvalidInput, "worker is required"):
            run_worker(wc, reports_an_object, worker="  ", exit_when_idle=True)
    for name, why in (("", "empty"), (" ", "blank")):
        result = invoke(
            "--db", str(db_path), "worker", "--executor", f"{__name__}:reports_an_object",
            "--name", name, "--exit-when-idle",
        )  # fmt: skip
        assert (
            one_line_error(result, "InvalidInput")
            == f"InvalidInput: worker is required (it is {why})"
        )
    with WorkCenter.open(db_path) as wc:
        assert wc.event_count() == count


# --- an LLM request handed to the budget encodes as JSON ------------------------------


@pytest.mark.parametrize(
    "request_",
    [
        {"messages": [], "x": object()},
        {"messages": [], "temperature": float("nan")},
        {"messages": [], "stop": {"a", "b"}},
        {"messages": [{"role": "user", "content": float("inf")}]},
    ],
    ids=["an object", "NaN", "a set", "infinity"],
)
def test_a_request_that_is_not_json_is_refused(wc: WorkCenter, request_: dict[str, Any]) -> None:
    item = create_dynamic(wc)
    with refused(wc, InvalidInput, "the request holds"):
        wc.reserve_request(item.id, request=request_)


def test_a_large_request_is_still_admitted_at_its_cost(wc: WorkCenter) -> None:
    item = create_dynamic(wc)
    text = "x" * 2_000_000  # past a run report's ceiling; the budget charges it instead
    admission = wc.reserve_request(
        item.id, request={"messages": [{"role": "user", "content": text}], "max_tokens": 10}
    )
    assert admission.allowed


# --- ids in a plan that name no Action of the item, and flags that are not booleans ---


def test_a_plan_superseding_an_unknown_action_is_refused_as_malformed(wc: WorkCenter) -> None:
    item = plan(wc, create_dynamic(wc).id)
    stranger = uuid.uuid4()
    with refused(wc, InvalidInput, f"supersedeActionIds must name .*unknown: {stranger}"):
        plan(wc, item.id, action_spec(objective="b"), supersede_action_ids=[stranger])


@pytest.mark.parametrize("at_open", ["x", 1, None])
def test_recover_coordinator_takes_only_a_boolean(wc: WorkCenter, at_open: object) -> None:
    create_dynamic(wc)
    with refused(wc, InvalidInput, "at_open must be true or false"):
        wc.recover_coordinator(at_open=at_open)  # type: ignore[arg-type]


# --- a text view says where it shortened a text; --json has it whole -------------------


def test_history_marks_where_it_shortened_an_events_data(db_path: Path) -> None:
    goal = "Ship the feature " + "and keep every old caller working " * 10
    with WorkCenter.open(db_path) as wc:
        item = create_dynamic(wc, goal=goal.strip())
    shown = invoke("--db", str(db_path), "history", str(item.id))
    assert shown.exit_code == 0, shown.output
    created = next(line for line in shown.stdout.splitlines() if "WorkItemCreated" in line)
    assert created.rstrip(" │").endswith("…")
    whole = json.loads(invoke("--db", str(db_path), "history", str(item.id), "--json").stdout)
    assert goal.strip() in json.dumps(whole["events"][0]["data"])


# --- a refusal names what is wrong -----------------------------------------------------


def test_an_empty_store_path_is_named_as_empty_not_as_a_directory() -> None:
    line = one_line_error(invoke("--db", "", "list"), "StoreUnavailable")
    assert "path is empty" in line
    with pytest.raises(StoreUnavailable, match="path is empty"):
        WorkCenter.open("")


@pytest.mark.parametrize(
    ("outputs", "says"),
    [({str(i): i for i in range(1_001)}, "an object of"), (list(range(1_001)), "a list of")],
    ids=["object", "list"],
)
def test_a_report_past_its_entries_names_what_holds_too_many(
    wc: WorkCenter, outputs: Any, says: str
) -> None:
    item = create_dynamic(wc)
    plan(wc, item.id, action_spec())
    claimed = claim(wc)
    with refused(wc, InvalidInput, f"holds {says} more than 1000 entries"):
        wc.finish_run(claimed, {"outcome": "completed", "summary": "done", "outputs": outputs})


@pytest.mark.parametrize(
    ("title", "why"),
    [("", "it is empty"), ("   ", "it is blank"), ("\u200b\u2060 ", "it shows nothing")],
    ids=["empty", "blank", "invisible"],
)
def test_a_required_text_given_blank_says_how_it_is_blank(
    wc: WorkCenter, title: str, why: str
) -> None:
    with refused(wc, InvalidInput, rf"title is required \({why}\)"):
        wc.create_work_item(title=title, goal="g", acceptance_criteria=["c"])


def test_audit_takes_a_limit_within_the_bound_list_takes(db_path: Path) -> None:
    """``audit --limit`` took any number, ``list --limit`` at most 2^53 - 1 as
    docs/limits.md says (found by acceptance testing, ADR-0145)."""
    with WorkCenter.open(db_path) as wc:
        item = wc.create_work_item(title="t", goal="g")
    for verb in (["audit", str(item.id)], ["list"]):
        said = CliRunner().invoke(cli, ["--db", str(db_path), *verb, "--limit", str(2**53)])
        assert said.exit_code == 2 and "9007199254740991" in said.output, said.output


def test_a_negative_lock_timeout_is_refused(db_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``SQLITE_LOCK_TIMEOUT=-5`` was taken, and SQLite waited for no lock (found by
    acceptance testing, ADR-0145)."""
    WorkCenter.open(db_path).close()
    said = CliRunner().invoke(
        cli, ["--db", str(db_path), "list"], env={"SQLITE_LOCK_TIMEOUT": "-5"}
    )
    assert said.exit_code == 2, said.output
    assert said.output.startswith("InvalidInput: SQLITE_LOCK_TIMEOUT must be"), said.output
    monkeypatch.setenv("SQLITE_LOCK_TIMEOUT", "-1")
    with pytest.raises(InvalidInput, match="SQLITE_LOCK_TIMEOUT"):
        WorkCenter.open(db_path)
