"""Issue 8, the CLI and the worker as users and operators meet them: a malformed executor
report, storage errors, read verbs that must not create or alter files, stop signals, and
the rough edges of the command line. Each test fails on the code before the fix."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from click.testing import CliRunner, Result
from conftest import action_spec, create_dynamic, create_linear, plan
from demo_stops import SMALL_BUDGET, stopped_demo

from workcenter.adapters.cli import cli
from workcenter.adapters.cli_common import resolve_id
from workcenter.adapters.persistence import APPLICATION_ID, StoreUnavailable
from workcenter.adapters.providers.scripted import Failure, ScriptedProvider
from workcenter.application import Claim, WorkCenter
from workcenter.domain.errors import InvalidInput, NotFound, ProviderFailed

ROOT = Path(__file__).resolve().parents[1]
WORKCENTER = [sys.executable, "-c", "from workcenter.adapters.cli import main; main()"]


def invoke(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(cli, list(args), env=env)


def one_line_error(result: Result, name: str) -> str:
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{name}: "), result.stderr
    return lines[0]


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def files_in(directory: Path) -> set[str]:
    return {p.name for p in directory.iterdir()}


@pytest.fixture
def store(db_path: Path) -> Iterator[tuple[str, UUID]]:
    """A store holding one running item with one ready Action."""
    with WorkCenter.open(db_path) as wc:
        item = create_dynamic(wc)
        plan(wc, item.id, action_spec())
    yield str(db_path), item.id


# --- 3: the worker and a malformed executor report --------------------------------


def returns_42(claim: Claim) -> Any:
    return 42


def returns_none(claim: Claim) -> Any:
    return None


def bad_outcome(claim: Claim) -> Any:
    return {"outcome": "splendid", "summary": "done"}


def wrong_shape(claim: Claim) -> Any:
    return {"outcome": ["completed"]}


def raises(claim: Claim) -> Any:
    raise RuntimeError("the model timed out")


@pytest.mark.parametrize("executor", ["returns_42", "returns_none", "bad_outcome", "wrong_shape"])
def test_worker_reports_a_malformed_report_interrupts_the_run_and_goes_on(
    store: tuple[str, UUID], executor: str
) -> None:
    db, item_id = store
    result = invoke(
        "--db", db, "worker", "--executor", f"{__name__}:{executor}", "--exit-when-idle", "--json"
    )
    assert result.exit_code == 0, result.output
    stats = json.loads(result.stdout)
    with WorkCenter.open(db) as wc:
        (action,) = wc.actions(wc.work_item(item_id)).values()
        ready_left = wc.claim_next("probe", lease_seconds=60)
    # Every attempt was claimed, reported as an error and given back; none is left running
    # and the worker did not quit while the Action could still be retried.
    assert stats["claimed"] == len(action.runs) == action.max_attempts > 1
    assert stats["errors"] == stats["interrupted"] == stats["claimed"]
    assert {run.status for run in action.runs} == {"interrupted"}
    assert all("malformed executor report" in (run.end_reason or "") for run in action.runs)
    assert ready_left is None
    assert result.stderr.count("\n") == stats["errors"]  # one line per error


def check_status_is_a_list(claim: Claim) -> Any:
    checks = [
        {"criterion": c, "status": ["passed"], "evidence": "e"} for c in claim.acceptance_criteria
    ]
    return {
        "outcome": "completed",
        "summary": "done",
        "evidence": ["e"],
        "acceptanceChecks": checks,
    }


def test_worker_records_a_report_whose_check_status_is_a_list_and_goes_on(
    db_path: Path,
) -> None:
    """A check whose status is a list is dropped like one whose status is unknown (it once
    escaped as TypeError and killed the worker with its Run running): the report is
    recorded as a failed Run, saying why, and the worker takes the next Action."""
    with WorkCenter.open(db_path) as wc:
        item = create_dynamic(wc)
        plan(wc, item.id, action_spec(), action_spec("test", "Run it"))
    result = invoke(
        "--db", str(db_path), "worker", "--executor", f"{__name__}:check_status_is_a_list",
        "--exit-when-idle", "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert result.exception is None and result.stderr == ""
    stats = json.loads(result.stdout)
    assert (stats["claimed"], stats["finished"], stats["errors"]) == (2, 2, 0)
    assert stats["outcomes"] == {"failed": 2}
    with WorkCenter.open(db_path) as wc:
        runs = [r for a in wc.actions(wc.work_item(item.id)).values() for r in a.runs]
    assert [run.status for run in runs] == ["failed", "failed"]
    errors = [run.result.error if run.result else None for run in runs]
    assert all("one check per criterion" in (error or "") for error in errors), errors


def test_worker_text_output_counts_errors_in_its_summary(store: tuple[str, UUID]) -> None:
    db, _ = store
    result = invoke("--db", db, "worker", "--executor", f"{__name__}:raises", "--exit-when-idle")
    assert result.exit_code == 0, result.output
    summary = result.stdout.strip().splitlines()[-1]
    claimed = int(summary.split(",")[0].removeprefix("claimed "))
    assert claimed > 1 and f"interrupted {claimed}, lost 0, errors {claimed}" in summary
    assert all(line.startswith("error ") for line in result.stderr.strip().splitlines())


# --- 9 and 10: opening the store ----------------------------------------------------


def test_read_verbs_never_create_a_store(tmp_path: Path) -> None:
    for verb in (["list"], ["show", "abcd1234"], ["projections", "status"]):
        line = one_line_error(invoke("--db", str(tmp_path / "typo.db"), *verb), "StoreUnavailable")
        assert "no Workcenter store at" in line
    assert files_in(tmp_path) == set()


def test_an_empty_file_is_not_a_store_to_read(tmp_path: Path) -> None:
    empty = tmp_path / "empty.db"
    empty.touch()
    one_line_error(invoke("--db", str(empty), "list"), "StoreUnavailable")
    assert empty.stat().st_size == 0 and files_in(tmp_path) == {"empty.db"}


def test_a_missing_directory_is_one_line(tmp_path: Path) -> None:
    line = one_line_error(
        invoke("--db", str(tmp_path / "nowhere" / "w.db"), "demo"), "StoreUnavailable"
    )
    assert "no directory" in line
    assert files_in(tmp_path) == set()


def test_workcenter_db_naming_a_directory_is_one_line(tmp_path: Path) -> None:
    line = one_line_error(invoke("list", env={"WORKCENTER_DB": str(tmp_path)}), "StoreUnavailable")
    assert "is a directory" in line
    assert files_in(tmp_path) == set()


def test_a_file_that_is_not_sqlite_is_refused_untouched(tmp_path: Path) -> None:
    junk = tmp_path / "notes.db"
    junk.write_text("these are my notes, not a database\n" * 200)
    before = digest(junk)
    for verb in (["list"], ["demo"]):
        one_line_error(invoke("--db", str(junk), *verb), "StoreUnavailable")
    assert digest(junk) == before and files_in(tmp_path) == {"notes.db"}


def test_another_applications_sqlite_file_is_refused_unmodified(tmp_path: Path) -> None:
    foreign = tmp_path / "other.db"
    conn = sqlite3.connect(foreign)
    conn.execute("CREATE TABLE stored_events (id INTEGER PRIMARY KEY, body TEXT)")
    conn.execute("INSERT INTO stored_events (body) VALUES ('theirs')")
    conn.commit()
    conn.close()
    before = digest(foreign)
    for verb in (["list"], ["demo"], ["projections", "rebuild"]):
        line = one_line_error(invoke("--db", str(foreign), *verb), "StoreUnavailable")
        assert "not a Workcenter store" in line
    assert digest(foreign) == before and files_in(tmp_path) == {"other.db"}
    with pytest.raises(StoreUnavailable):
        WorkCenter.open(foreign)


def test_a_new_store_carries_the_marker(tmp_path: Path) -> None:
    WorkCenter.open(tmp_path / "new.db").close()
    conn = sqlite3.connect(tmp_path / "new.db")
    assert conn.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
    conn.close()


def test_a_store_from_before_the_marker_still_opens_and_is_marked(db_path: Path) -> None:
    with WorkCenter.open(db_path) as wc:
        item = create_dynamic(wc)
    conn = sqlite3.connect(db_path)
    conn.execute("PRAGMA application_id = 0")  # as the previous version left it
    conn.execute("PRAGMA user_version = 0")
    conn.commit()
    conn.close()
    listed = invoke("--db", str(db_path), "list", "--json")
    assert listed.exit_code == 0, listed.output
    assert [row["id"] for row in json.loads(listed.stdout)] == [str(item.id)]
    conn = sqlite3.connect(db_path)
    assert conn.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
    conn.close()


def test_a_store_from_a_newer_layout_is_refused(db_path: Path) -> None:
    WorkCenter.open(db_path).close()
    conn = sqlite3.connect(db_path)
    conn.execute("PRAGMA user_version = 99")
    conn.commit()
    conn.close()
    assert "upgrade" in one_line_error(invoke("--db", str(db_path), "list"), "StoreUnavailable")


READ_ONLY_SCRIPT = """
import os, sys
import eventsourcing.sqlite, rich.console, rich.table
from workcenter.adapters import cli
os.setgid(65534)
os.setuid(65534)  # nobody: root would write to a read-only file anyway
sys.argv = ["workcenter", *sys.argv[1:]]
cli.main()
"""


@pytest.mark.skipif(
    not hasattr(os, "setuid") or os.geteuid() != 0,
    reason="needs root to become another user that cannot write the store",
)
@pytest.mark.parametrize("verb", [["list"], ["demo"], ["show", "00000000"]])
def test_a_read_only_store_is_one_line_and_untouched(verb: list[str]) -> None:
    # Under /tmp itself: pytest's own temporary directories are closed to other users.
    with tempfile.TemporaryDirectory(prefix="workcenter-ro-") as name:
        directory = Path(name)
        directory.chmod(0o755)
        _check_read_only(directory, verb, 0o644, "ro.db is read-only")


@pytest.mark.skipif(
    not hasattr(os, "setuid") or os.geteuid() != 0,
    reason="needs root to become another user that cannot write the store's directory",
)
def test_a_writable_store_in_a_read_only_directory_names_the_directory() -> None:
    with tempfile.TemporaryDirectory(prefix="workcenter-ro-") as name:
        directory = Path(name)
        directory.chmod(0o755)
        _check_read_only(directory, ["list"], 0o666, "ro.db's directory is read-only")


def _check_read_only(directory: Path, verb: list[str], mode: int, says: str) -> None:
    db = directory / "ro.db"
    with WorkCenter.open(db) as wc:
        create_dynamic(wc)
    for path in directory.iterdir():
        path.chmod(mode)
    before = {p.name: digest(p) for p in directory.iterdir()}
    result = subprocess.run(
        [sys.executable, "-c", READ_ONLY_SCRIPT, "--db", str(db), *verb],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=60,
        cwd=directory,
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("StoreUnavailable: ") and result.stderr.count("\n") == 1
    assert says in result.stderr
    assert {p.name: digest(p) for p in directory.iterdir()} == before


# --- 11: stop signals on the worker -------------------------------------------------

SLOW_EXECUTOR = """
import pathlib, time

def slow(claim):
    pathlib.Path(__file__).with_name("started").touch()
    time.sleep(60)
    return {"outcome": "completed"}
"""


@pytest.mark.parametrize(("signum", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_stop_signal_interrupts_the_run_prints_the_summary_and_exits_non_zero(
    store: tuple[str, UUID], tmp_path: Path, signum: int, status: int
) -> None:
    db, item_id = store
    (tmp_path / "slow_executor.py").write_text(SLOW_EXECUTOR)
    worker = subprocess.Popen(
        [*WORKCENTER, "--db", db, "worker", "--executor", "slow_executor:slow", "--poll", "0.1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path)])},
    )
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "started").exists():
            assert worker.poll() is None, worker.communicate()
            assert time.monotonic() < deadline, "the executor never started"
            time.sleep(0.05)
        worker.send_signal(signum)
        out, err = worker.communicate(timeout=30)
    finally:
        if worker.poll() is None:
            worker.kill()
    assert worker.returncode == status, err
    assert "Traceback" not in err
    assert "claimed 1, finished 0, interrupted 1" in out
    with WorkCenter.open(db) as wc:
        (action,) = wc.actions(wc.work_item(item_id)).values()
    (run,) = action.runs
    assert run.status == "interrupted" and signal.Signals(signum).name in (run.end_reason or "")
    assert action.status == "ready"  # retryable: the next worker claims it at once


# --- rough edges -----------------------------------------------------------------------


def test_projections_status_only_observes(db_path: Path) -> None:
    with WorkCenter.open(db_path, inline_projections=False) as wc:
        create_dynamic(wc)
        head = wc.event_count()
    for _ in range(2):
        result = invoke("--db", str(db_path), "projections", "status", "--json")
        assert result.exit_code == 0, result.output
        lags = {row["name"]: row["lag"] for row in json.loads(result.stdout)}
        assert lags == {"work_queue": 0, "mailbox": 0, "detail": head}


def test_hints_keep_the_db_the_user_gave(tmp_path: Path) -> None:
    db = str(tmp_path / "hint [store].db")
    demo = invoke("--db", db, "demo", "--max-tokens", str(SMALL_BUDGET))
    assert demo.exit_code == 0, demo.output
    assert f"workcenter --db '{db}' budget extend" in demo.stdout
    item_id = stopped_demo(db)["item"]["id"]  # the CLI's demo went on past its stop
    budget = json.loads(invoke("budget", "show", item_id, "--db", db, "--json").stdout)
    extended = invoke(
        "budget", "extend", item_id[:8], "--db", db, "--tokens", "100000",
        "--expected-version", str(budget["ledger_version"]),
    )  # fmt: skip
    assert extended.exit_code == 0, extended.output
    assert f"workcenter --db '{db}' resume {item_id}" in extended.stdout


def test_after_a_budget_stop_extend_and_resume_the_cli_says_what_comes_next(
    tmp_path: Path,
) -> None:
    """A resumed dynamic item is running with its stopped Actions superseded and
    nothing to claim: resume and show say so, and a user message lets the
    Coordinator plan again."""
    db = str(tmp_path / "stopped.db")
    item_id = stopped_demo(db)["item"]["id"]
    budget = json.loads(invoke("budget", "show", item_id, "--db", db, "--json").stdout)
    extended = invoke(
        "budget", "extend", item_id, "--db", db, "--tokens", "100000",
        "--expected-version", str(budget["ledger_version"]),
    )  # fmt: skip
    assert extended.exit_code == 0, extended.output
    budget = json.loads(invoke("budget", "show", item_id, "--db", db, "--json").stdout)
    resumed = invoke(
        "resume", item_id, "--db", db,
        "--expected-version", str(budget["item_version"]),
        "--expected-ledger-version", str(budget["ledger_version"]),
    )  # fmt: skip
    assert resumed.exit_code == 0, resumed.output
    for output in (resumed.stdout, invoke("show", item_id, "--db", db).stdout):
        assert "no Action is ready or running" in output
        assert f"workcenter --db {db} message" in output  # on the store given
    idle = invoke(
        "worker", "--db", db, "--executor", "workcenter.adapters.executors:echo",
        "--no-coordinator", "--exit-when-idle",
    )  # fmt: skip
    assert "claimed 0" in idle.stdout
    posted = invoke("message", item_id, "Please plan the work again", "--db", db)
    assert posted.exit_code == 0, posted.output
    planned = invoke("coordinate", "--once", "--db", db)
    assert planned.exit_code == 0 and "decided" in planned.stdout, planned.output
    talk = json.loads(invoke("conversation", item_id, "--db", db, "--json").stdout)
    assert talk["messages"][-1]["decision"] == "create_actions"
    shown = json.loads(invoke("show", item_id, "--db", db, "--json").stdout)
    ready = [a for a in shown["actions"] if a["status"] == "ready"]
    worker = invoke(
        "worker", "--db", db, "--executor", "workcenter.adapters.executors:echo",
        "--no-coordinator", "--exit-when-idle", "--json",
    )  # fmt: skip
    assert json.loads(worker.stdout)["claimed"] == len(ready) >= 1


@pytest.mark.parametrize("at", ["0", "999", "-1"])
def test_history_at_a_version_the_item_never_had_is_refused(
    store: tuple[str, UUID], at: str
) -> None:
    db, item_id = store
    line = one_line_error(invoke("--db", db, "history", str(item_id), "--at", at), "InvalidInput")
    assert f"no version {at}" in line


def test_ids_accept_unique_prefixes_and_name_their_kind(store: tuple[str, UUID]) -> None:
    db, item_id = store
    with WorkCenter.open(db) as wc:
        claimed = wc.claim_next("w", lease_seconds=60)
        assert claimed is not None
        wc.interrupt(claimed, reason="test")
    short = str(item_id)[:8]
    for verb in (["show"], ["progress"], ["audit"], ["budget", "show"], ["history"]):
        result = invoke("--db", db, *verb, short, "--json")
        assert result.exit_code == 0, (verb, result.output)
    by_action = invoke("--db", db, "audit", short, "--action", str(claimed.action_id)[:8], "--json")
    by_run = invoke("--db", db, "audit", short, "--run", str(claimed.run_id)[:8], "--json")
    assert by_action.exit_code == by_run.exit_code == 0, by_action.output + by_run.output
    run_rows = json.loads(by_run.stdout)["events"]
    assert run_rows and {row["run_id"] for row in run_rows} == {str(claimed.run_id)}
    assert "Action" in one_line_error(
        invoke("--db", db, "audit", short, "--action", "zz"), "InvalidInput"
    )
    assert "Run" in one_line_error(invoke("--db", db, "audit", short, "--run", "ffff0"), "NotFound")


def test_an_ambiguous_prefix_is_a_clear_error() -> None:
    ids = [
        UUID("abcd0000-0000-0000-0000-000000000001"),
        UUID("abcd0000-0000-0000-0000-000000000002"),
        UUID("abce0000-0000-0000-0000-000000000003"),
    ]
    # The prefix given, then the ids it matches (the ids were said in its place).
    with pytest.raises(InvalidInput) as ambiguous:
        resolve_id("abcd", "WorkItem", lambda: ids)
    assert str(ambiguous.value) == (
        f"WorkItem id prefix 'abcd' is ambiguous: 2 ids start with it ({ids[0]}, {ids[1]})"
    )
    assert resolve_id("ABCE", "WorkItem", lambda: ids) == ids[2]
    with pytest.raises(NotFound):
        resolve_id("abcf", "WorkItem", lambda: ids)
    with pytest.raises(InvalidInput, match="at least 4"):
        resolve_id("abc", "WorkItem", lambda: ids)


def test_show_has_a_status_line(store: tuple[str, UUID]) -> None:
    db, item_id = store
    with WorkCenter.open(db) as wc:
        status = wc.work_item(item_id).status
    result = invoke("--db", db, "show", str(item_id))
    assert result.exit_code == 0, result.output
    rows = [[cell.strip() for cell in line.split("│")[1:3]] for line in result.stdout.splitlines()]
    assert ["status", status] in rows


def test_piped_output_never_cuts_ids_or_wraps_lines(db_path: Path) -> None:
    title = "A title long enough to pass eighty columns in a pipe " * 2
    with WorkCenter.open(db_path) as wc:
        item = create_dynamic(wc, title=title.strip())
    listed = invoke("--db", str(db_path), "list")
    assert str(item.id) in listed.stdout and title.strip() in listed.stdout
    audit = invoke("--db", str(db_path), "audit", str(item.id))
    assert any(title.strip() in line for line in audit.stdout.splitlines())
    at = invoke("--db", str(db_path), "audit", str(item.id), "--at", "1")
    state = json.loads(at.stdout[at.stdout.index("\n{") :])
    assert state["item"]["title"] == title.strip()
    history = invoke("--db", str(db_path), "history", str(item.id), "--at", "1")
    assert json.loads(history.stdout[history.stdout.index("\n{") :])["title"] == title.strip()


def test_db_works_after_the_verb_and_version_and_short_help(store: tuple[str, UUID]) -> None:
    db, item_id = store
    listed = invoke("list", "--db", db, "--json")
    assert listed.exit_code == 0 and json.loads(listed.stdout)[0]["id"] == str(item_id)
    nested = invoke("projections", "status", "--db", db, "--json")
    assert nested.exit_code == 0, nested.output
    version = invoke("--version")
    assert version.exit_code == 0 and version.stdout.startswith("workcenter, version ")
    for args in (["-h"], ["list", "-h"], ["budget", "show", "-h"]):
        shown = invoke(*args)
        assert shown.exit_code == 0 and shown.stdout.startswith("Usage:"), args


def test_list_refuses_an_unknown_status_naming_the_statuses(store: tuple[str, UUID]) -> None:
    db, _ = store
    result = invoke("--db", db, "list", "--status", "bogus")
    assert result.exit_code == 2
    assert "'needs_attention'" in result.stderr and "bogus" in result.stderr


def test_projections_run_once_speaks_json_and_plain_text(db_path: Path) -> None:
    with WorkCenter.open(db_path, inline_projections=False) as wc:
        create_dynamic(wc)
        head = wc.event_count()
    as_json = invoke("--db", str(db_path), "projections", "run", "--once", "--json")
    assert as_json.exit_code == 0, as_json.output
    assert json.loads(as_json.stdout)["positions"] == {
        "work_queue": head,
        "mailbox": head,
        "detail": head,
    }
    text = invoke("--db", str(db_path), "projections", "run", "--once")
    assert "{" not in text.stdout and f"work_queue at {head}" in text.stdout


def test_validation_messages_are_one_line_without_a_url(wc: WorkCenter) -> None:
    item = create_dynamic(wc)
    plan(wc, item.id)
    claimed = wc.claim_next("w", lease_seconds=60)
    assert claimed is not None
    with pytest.raises(InvalidInput) as info:
        wc.finish_run(claimed, {"outcome": ["completed"], "summary": 5})
    message = str(info.value)
    assert "\n" not in message and "http" not in message
    assert message.startswith("malformed run report: outcome")
    with pytest.raises(InvalidInput) as planned:
        wc.plan_actions(item.id, expected_version=wc.work_item(item.id).version, actions=[5])
    assert "\n" not in str(planned.value) and "http" not in str(planned.value)


def test_resume_requires_the_ledger_version(store: tuple[str, UUID]) -> None:
    db, item_id = store
    result = invoke("--db", db, "resume", str(item_id), "--expected-version", "1")
    assert result.exit_code == 2 and "--expected-ledger-version" in result.stderr


def test_readme_and_docs_stand_alone() -> None:
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        text = path.read_text()
        assert "../shared" not in text and "spec/" not in text, path


def test_an_item_without_a_delivery_target_says_so_in_words(db_path: Path) -> None:
    """Python's "None" was printed: "delivery None (unmet)", "delivery (None)"."""
    with WorkCenter.open(db_path) as wc:
        item = create_linear(wc, delivery_target=None)
    for verb in ("show", "progress"):
        result = invoke("--db", str(db_path), verb, str(item.id))
        assert result.exit_code == 0, result.output
        assert "no target named" in result.stdout and "None" not in result.stdout
        # Nothing to deliver is not "unmet" (found by acceptance testing, ADR-0135).
        assert "none asked" in result.stdout, result.stdout


def test_show_does_not_send_the_user_to_a_coordinator_with_nothing_due(tmp_path: Path) -> None:
    """A permanent provider failure ends the woken turn for good (ADR-0023): the item is
    running with nothing planned and no Coordinator step due, so `coordinate` would do
    nothing; show says the last turn failed and that a message lets it plan again."""
    db = str(tmp_path / "failed-turn.db")
    with WorkCenter.open(db) as wc:
        item = create_dynamic(wc, start=True)
        steps = wc.coordinate_once(
            ScriptedProvider([Failure(ProviderFailed("400 bad request", transient=False))])
        )
        assert [step.status for step in steps] == ["failed"]
    shown = invoke("show", str(item.id), "--db", db)
    assert shown.exit_code == 0, shown.output
    assert "no Action is ready or running" in shown.stdout
    assert "coordinate`" not in shown.stdout  # nothing is due: it would step nothing
    assert "its Coordinator's last turn failed" in shown.stdout
    assert f"workcenter --db {db} message" in shown.stdout
    assert "no Coordinator step was due" in invoke("coordinate", "--db", db, "--once").stdout
