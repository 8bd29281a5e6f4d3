"""A SQLite store whose disk is full (ADR-0142): a command is ``StoreFull`` (a store held
up, as ``PoolBusy`` is), writing nothing; the CLI exits 75 (try again), and a worker
waits the disk out, recording its Run's outcome once space is freed. A worker exited
with status 2 before, as for a store that cannot be used at all (found by an SRE's
acceptance testing).

The disk is real: a small tmpfs mounted for the test (root, as CI runs; elsewhere the
tests skip saying so), filled by a file that is removed to free it."""

from __future__ import annotations

import logging
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import create_linear
from test_daemons_start_during_outage import waits_then_works

from workcenter import StoreFull, WorkCenter, run_worker
from workcenter.adapters.cli import cli
from workcenter.adapters.executors import echo


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "disk"
    mount.mkdir()
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], capture_output=True
    )
    if made.returncode != 0:
        if os.environ.get("CI"):
            pytest.fail(f"CI could not mount a tmpfs: {made.stderr.decode()}")
        pytest.skip("mounting a small disk needs root (CI runs as root)")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


GOAL = "g" * 4000


def fill(disk: Path) -> Path:
    """A file taking every free byte of ``disk``."""
    filler = disk / "filler"
    with open(filler, "wb", buffering=0) as out:
        try:
            while True:
                out.write(b"\0" * 4096)
        except OSError:
            pass
    return filler


def test_a_command_on_a_full_disk_is_store_full_and_writes_nothing(disk: Path) -> None:
    db = str(disk / "s.db")
    with WorkCenter.open(db) as wc:
        create_linear(wc)
        before = wc.event_count()
        filler = fill(disk)
        with pytest.raises(StoreFull, match="disk is full"):
            for n in range(200):  # the WAL may take a few before it must grow
                wc.create_work_item(title=f"item {n}", goal=GOAL)
        filler.unlink()
        after = wc.event_count()
        assert after >= before
        create_linear(wc, title="after")  # goes on once space is freed
        assert wc.event_count() > after
        assert wc.maintenance.verify_history().ok


def test_the_cli_says_try_again(db_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with WorkCenter.open(str(db_path)):
        pass

    def full(*args: Any, **kwargs: Any) -> Any:
        raise StoreFull("the store's disk is full (database or disk is full): nothing was")

    monkeypatch.setattr(WorkCenter, "create_work_item", full)
    args = ["--db", str(db_path), "create", "--title", "t", "--goal", "g"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 75, result.output
    assert result.stderr.startswith("StoreFull: the store's disk is full"), result.stderr


def test_a_worker_waits_out_a_full_disk_and_records_its_run(
    db_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The disk fills while the executor works: the finish is tried again until it fits
    (here the store's own ``StoreFull`` twice, then space), the Run recorded, not lost."""
    events: list[tuple[str, str]] = []
    with WorkCenter.open(str(db_path)) as wc:
        item = create_linear(wc, stages=("implement",))
        finish = wc.finish_run
        refusals = iter([StoreFull("the store's disk is full"), StoreFull("still full")])

        def on_a_full_disk(*args: Any, **kwargs: Any) -> Any:
            error = next(refusals, None)
            if error is not None:
                raise error
            return finish(*args, **kwargs)

        monkeypatch.setattr(wc, "finish_run", on_a_full_disk)
        with caplog.at_level(logging.WARNING):
            stats = run_worker(
                wc,
                echo,
                worker="w",
                max_runs=1,
                poll_seconds=0.05,
                on_event=lambda kind, claim, detail: events.append((kind, detail)),
            )
        assert (stats.claimed, stats.finished, stats.lost) == (1, 1, 0), (stats, events)
        assert next(refusals, None) is None
        (action,) = wc.actions(wc.work_item(item.id)).values()
        assert action.status == "completed"
        waits = [r.getMessage() for r in caplog.records if "disk is full" in r.getMessage()]
        assert waits == ["the store's disk is full; waiting"], waits


def test_a_store_on_a_full_disk_opens_as_store_full_and_a_worker_waits_for_room(
    disk: Path,
) -> None:
    """Opening makes the store's side files, which a full disk refuses as "disk I/O
    error": said as a store that cannot be used (2), and a worker started by its service
    manager then exited (found by acceptance testing, ADR-0142)."""
    db = str(disk / "s.db")
    with WorkCenter.open(db) as wc:
        create_linear(wc, stages=("implement",))
    filler = fill(disk)
    said = CliRunner().invoke(cli, ["--db", db, "list"])
    assert said.exit_code == 75, said.output
    assert said.stderr.startswith(f"StoreFull: cannot read the store at {db} ("), said.stderr
    assert "its disk is full; free space and try again" in said.stderr
    waits_then_works(db, filler.unlink)


@pytest.mark.parametrize("where", ["/proc/version", "a loop of links"])
def test_a_path_that_is_no_store_and_no_full_disk_is_said_as_such(
    tmp_path: Path, where: str
) -> None:
    """``/proc`` has no blocks at all: its store was said to wait for a full disk (exit 75,
    "free space and try again"); a loop of symbolic links was a traceback (found by
    acceptance testing, ADR-0145)."""
    path = where
    if where == "a loop of links":
        (tmp_path / "one").symlink_to(tmp_path / "two")
        (tmp_path / "two").symlink_to(tmp_path / "one")
        path = str(tmp_path / "one")
    for verb in (["list"], ["init"], ["copy", "--to", path]):
        db = str(tmp_path / "real.db") if verb[0] == "copy" else path
        if verb[0] == "copy":
            WorkCenter.open(db).close()
        said = CliRunner().invoke(cli, ["--db", db, *verb])
        assert said.exit_code == 2, said.output
        assert said.output.startswith("StoreUnavailable: "), said.output
        assert "disk is full" not in said.output
