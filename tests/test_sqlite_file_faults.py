"""A SQLite store whose file cannot be written (its disk full, a file-size limit, a
read-only journal) or read (a damaged page) fails a command with the project's typed
``StoreUnavailable``, writing nothing, and goes on once the fault is gone (ADR-0138).
The library's own ``OperationalError`` escaped the Python API before (found by an SRE's
acceptance testing; the CLI said it typed already).

The fault is real: a process whose file-size limit (``RLIMIT_FSIZE``) stops the file's
growth, as a full disk does; Python ignores the signal the limit sends, so the write
fails with the system's error."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import create_linear

from workcenter.adapters.cli import cli
from workcenter.adapters.persistence import StoreUnavailable
from workcenter.application import WorkCenter

FILLS_THE_FILE = """
import json, resource, sys
from workcenter import WorkCenter, WorkcenterError

path = sys.argv[1]
with WorkCenter.open(path) as wc:
    wc.create_work_item(title="first", goal="g")
    wc.close()
size = sum(p.stat().st_size for p in __import__("pathlib").Path(path).parent.iterdir())
resource.setrlimit(resource.RLIMIT_FSIZE, (size + 96 * 1024, resource.RLIM_INFINITY))
seen = {}
with WorkCenter.open(path) as wc:
    for n in range(2000):
        before = wc.event_count()
        try:
            wc.create_work_item(title=f"item {n}", goal="g" * 7000)
        except Exception as error:
            seen["error"] = type(error).__name__
            seen["typed"] = isinstance(error, WorkcenterError)
            seen["message"] = str(error)
            seen["unchanged"] = wc.event_count() == before
            break
    resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY,) * 2)
    wc.create_work_item(title="after", goal="g")  # goes on once the fault is gone
    seen["verified"] = wc.maintenance.verify_history().ok
print(json.dumps(seen))
"""


def test_a_file_that_cannot_grow_fails_a_command_typed_and_writes_nothing(
    tmp_path: Path,
) -> None:
    (tmp_path / "store").mkdir()
    done = subprocess.run(
        [sys.executable, "-c", FILLS_THE_FILE, str(tmp_path / "store" / "s.db")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["error"] == "StoreUnavailable", seen
    assert seen["typed"] and seen["unchanged"] and seen["verified"], seen
    assert "the store's file could not be written or read" in seen["message"], seen


WORKER_ON_A_FULL_DISK = """
import json, resource, sys
from workcenter import WorkCenter, WorkcenterError, run_worker
from workcenter.adapters.executors import echo

path = sys.argv[1]
events = []
with WorkCenter.open(path) as wc:
    wc.create_work_item(title="t", goal="g", acceptance_criteria=["c"],
                        delivery_target="response", mode="linear", stages=["implement"],
                        start=True)

    def executor(claim):
        resource.setrlimit(resource.RLIMIT_FSIZE, (0, resource.RLIM_INFINITY))  # disk full
        return echo(claim)

    try:
        run_worker(wc, executor, worker="w", max_runs=1,
                   on_event=lambda kind, claim, why: events.append([kind, why]))
    except WorkcenterError as error:
        events.append(["raised", type(error).__name__])
print(json.dumps(events))
"""


def test_a_runs_outcome_the_file_cannot_take_is_lost_not_a_malformed_report(
    tmp_path: Path,
) -> None:
    """The Run's finish fails on a full disk: its outcome is said lost, naming the store's
    fault (it was "malformed executor report", and its interruption failed the same
    way); the Run stays the worker's until its lease lapses."""
    done = subprocess.run(
        [sys.executable, "-c", WORKER_ON_A_FULL_DISK, str(tmp_path / "s.db")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    events = json.loads(done.stdout)
    assert [kind for kind, _ in events] == ["claimed", "lost"], events
    assert events[1][1].startswith("the outcome was not recorded: the store's file could not")


OPENS_UNDER_A_LIMIT = """
import resource, sys
from workcenter import WorkCenter, WorkcenterError

with WorkCenter.open(sys.argv[1]) as wc:
    wc.create_work_item(title="t", goal="g")
resource.setrlimit(resource.RLIMIT_FSIZE, (0, resource.RLIM_INFINITY))
try:
    WorkCenter.open(sys.argv[1], create=False)
except WorkcenterError as error:
    print(f"{type(error).__name__}: {error}")
"""


def test_a_sound_store_that_cannot_be_read_now_is_not_said_to_be_another_applications(
    tmp_path: Path,
) -> None:
    """A file-size limit kept SQLite from making the file's shared memory: the store was
    said "not a Workcenter store" (found by acceptance testing, ADR-0138)."""
    path = tmp_path / "s.db"
    done = subprocess.run(
        [sys.executable, "-c", OPENS_UNDER_A_LIMIT, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"StoreUnavailable: cannot read the store at {path} ("), (
        done.stdout
    )


def test_a_worker_whose_store_fails_says_what_it_did_before_its_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker ended by its store's failure (a full disk at its recovery) printed the
    error's line only, no summary of the Runs it had handled (found by acceptance
    testing, ADR-0138)."""
    db = str(tmp_path / "w.db")
    with WorkCenter.open(db) as wc:
        create_linear(wc, stages=("implement",))
    recover = WorkCenter.recover
    calls: list[int] = []

    def failing(self: WorkCenter, *args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) > 1:  # the first, at the start, goes through
            raise StoreUnavailable("the store's file could not be written or read (disk full)")
        return recover(self, *args, **kwargs)

    monkeypatch.setattr(WorkCenter, "recover", failing)
    result = CliRunner().invoke(
        cli,
        ["--db", db, "worker", "--executor", "workcenter.adapters.executors:echo", "--json"],
    )
    assert result.exit_code == 2, result.output
    assert json.loads(result.stdout)["finished"] == 1
    assert result.stderr.startswith("StoreUnavailable: the store's file could not")
