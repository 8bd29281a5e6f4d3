"""A rebuild on SQLite builds its copy of a view in a temporary directory; one cut short
by SIGKILL left it there for good. The next rebuild removes the directories that no
rebuild holds (their lock file's lock is free) and keeps those a running rebuild holds
(ADR-0100). Each test fails on the code before the fix."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import action_spec, create_dynamic, plan

from workcenter.adapters.cli import cli
from workcenter.application import WorkCenter

ROOT = Path(__file__).resolve().parents[1]
# Where a rebuild keeps its copy, and the lock file it holds there.
PREFIX = "workcenter-rebuild-"
LOCK_NAME = "rebuild.lock"


@pytest.fixture
def temp_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The system's temporary directory, for this test alone (other rebuilds on the
    machine keep theirs in /tmp)."""
    directory = tmp_path / "tmp"
    directory.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(directory))
    monkeypatch.setenv("TMPDIR", str(directory))
    yield directory


@pytest.fixture
def store(db_path: Path) -> str:
    with WorkCenter.open(db_path) as wc:
        for _ in range(3):
            item = create_dynamic(wc)
            plan(wc, item.id, action_spec())
    return str(db_path)


def rebuild_dirs(directory: Path) -> set[str]:
    return {p.name for p in directory.iterdir() if p.name.startswith(PREFIX)}


# A rebuild that waits in its first page, so that it can be killed while its copy exists.
SLOW_REBUILD = """
import pathlib, sys, time
from workcenter.application import WorkCenter

def progress(view, done, total):
    pathlib.Path(sys.argv[2]).touch()
    time.sleep(60)

with WorkCenter.open(sys.argv[1], create=False) as wc:
    wc.maintenance.rebuild_projection("detail", progress=progress)
"""


def test_the_next_rebuild_removes_the_copy_a_killed_rebuild_left(
    store: str, temp_dir: Path, tmp_path: Path
) -> None:
    started = tmp_path / "started"
    killed = subprocess.Popen(
        [sys.executable, "-c", SLOW_REBUILD, store, str(started)],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        deadline = time.monotonic() + 60
        while not started.exists():
            assert killed.poll() is None, "the rebuild ended before its first page"
            assert time.monotonic() < deadline, "the rebuild never began"
            time.sleep(0.05)
        killed.send_signal(signal.SIGKILL)
        killed.wait(timeout=30)
    finally:
        if killed.poll() is None:
            killed.kill()
    (left,) = rebuild_dirs(temp_dir)
    assert (temp_dir / left / "detail.sqlite").exists()

    done = CliRunner().invoke(cli, ["--db", store, "projections", "rebuild", "work_queue"])
    assert done.exit_code == 0, done.output
    assert rebuild_dirs(temp_dir) == set()
    assert f"removed {temp_dir / left}, left by a rebuild cut short" in done.stdout


def test_a_copy_a_running_rebuild_holds_is_kept(store: str, temp_dir: Path) -> None:
    # One held as a running rebuild holds it (another open file of its lock, locked), one
    # free, and one with no lock file: a rebuild making it now, or an older Workcenter's.
    held, free, unlocked = (Path(tempfile.mkdtemp(prefix=PREFIX)) for _ in range(3))
    for directory in (held, free):
        (directory / LOCK_NAME).touch()
        (directory / "detail.sqlite").write_bytes(b"x")
    holder = os.open(held / LOCK_NAME, os.O_RDWR)
    try:
        fcntl.flock(holder, fcntl.LOCK_EX | fcntl.LOCK_NB)
        done = CliRunner().invoke(cli, ["--db", store, "projections", "rebuild", "--json"])
        assert done.exit_code == 0, done.output
        assert rebuild_dirs(temp_dir) == {held.name, unlocked.name}
        assert (held / "detail.sqlite").exists()
    finally:
        os.close(holder)
    with WorkCenter.open(store) as wc:
        (report, *_) = wc.maintenance.rebuild_projection("mailbox")
    assert report.removed_directories == (str(held),)
    assert rebuild_dirs(temp_dir) == {unlocked.name}


def test_a_rebuild_leaves_no_directory_behind(store: str, temp_dir: Path) -> None:
    with WorkCenter.open(store) as wc:
        reports = wc.maintenance.rebuild_projection()
    assert [r.removed_directories for r in reports] == [(), (), ()]
    assert rebuild_dirs(temp_dir) == set()
