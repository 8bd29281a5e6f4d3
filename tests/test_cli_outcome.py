"""How the CLI ends when it cannot succeed, as a script sees it (ADR-0140, found by
acceptance testing): an output that cannot be written is one line and status 74 (a
closed stdout before anything is done), a reader that left is 141 and silent, a store
held up is 75 (try again) apart from refusals' 2; JSON is UTF-8 whatever the locale's
encoding, and FORCE_COLOR does not wrap or cut what goes to a pipe."""

from __future__ import annotations

import json
import os
import pty
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

from live_server import WORKCENTER

from workcenter.application import WorkCenter

TITLE = "Überprüfung der Schnittstelle, lang genug um in achtzig Spalten umzubrechen"


def run(
    db: Path, *args: str, stdout: Any = subprocess.PIPE, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [WORKCENTER, "--db", str(db), *args],
        stdout=stdout,
        stderr=subprocess.PIPE,
        env={**os.environ, **(env or {})},
    )


def store(db: Path) -> Path:
    with WorkCenter.open(db) as wc:
        wc.create_work_item(title=TITLE, goal="g")
    return db


def count(db: Path) -> int:
    with WorkCenter.open(db, create=False) as wc:
        return len(wc.list_work_items())


def test_a_closed_stdout_is_refused_before_anything_is_done(db_path: Path) -> None:
    closed = subprocess.run(
        ["bash", "-c", '"$0" --db "$1" create --title t --goal g --json >&-', WORKCENTER, db_path],
        capture_output=False,
        stderr=subprocess.PIPE,
    )
    assert closed.returncode == 74
    assert closed.stderr.decode().startswith("workcenter: its standard output is closed")
    assert not db_path.exists() or count(db_path) == 0


def test_a_full_output_is_one_line_and_74(db_path: Path) -> None:
    store(db_path)
    with open("/dev/full", "wb") as full:
        for args in (["list", "--json"], ["list"], ["create", "--title", "t", "--goal", "g"]):
            done = run(db_path, *args, stdout=full)
            assert done.returncode == 74, done.stderr
            [line] = done.stderr.decode().splitlines()
            assert line.startswith("OutputFailed: could not write its output (No space left")
    assert count(db_path) == 2  # the create was made: the line says a change is recorded


def test_a_reader_that_left_is_141_and_nothing_said(db_path: Path) -> None:
    store(db_path)
    for args in (["audit", "verify"], ["list", "--json"]):
        read, write = os.pipe()
        os.close(read)
        try:
            done = run(db_path, *args, stdout=write)
        finally:
            os.close(write)
        assert (done.returncode, done.stderr) == (141, b""), done.stderr


def test_a_store_held_up_is_75_and_a_refusal_2(db_path: Path) -> None:
    store(db_path)
    holder = sqlite3.connect(db_path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        held = run(
            db_path, "create", "--title", "t", "--goal", "g", env={"SQLITE_LOCK_TIMEOUT": "1"}
        )
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert held.returncode == 75, held.stderr
    assert held.stderr.decode().startswith("PoolBusy: ")
    refused = run(db_path, "create", "--title", " ", "--goal", "g")
    assert refused.returncode == 2 and refused.stderr.startswith(b"InvalidInput: ")
    missing = run(db_path.with_name("typo.db"), "list")
    assert missing.returncode == 2 and missing.stderr.startswith(b"StoreUnavailable: ")


def test_json_is_utf8_whatever_the_locales_encoding(db_path: Path) -> None:
    store(db_path)
    done = run(db_path, "list", "--json", env={"PYTHONIOENCODING": "ascii"})
    assert done.returncode == 0, done.stderr
    [row] = json.loads(done.stdout.decode("utf-8"))
    assert row["title"] == TITLE
    # Times as every verb's JSON gives them (seconds since the epoch before ADR-0140).
    assert row["created_at"].endswith("Z") and row["created_at"].startswith("20")


def test_text_the_outputs_encoding_cannot_write_is_one_line_and_74(db_path: Path) -> None:
    store(db_path)
    done = run(db_path, "list", env={"PYTHONIOENCODING": "ascii"})
    assert done.returncode == 74, done.stderr
    [line] = done.stderr.decode().splitlines()
    assert line.startswith("OutputFailed: the output's encoding (ascii) cannot write")


def test_force_color_does_not_wrap_or_cut_a_pipe(db_path: Path) -> None:
    store(db_path)
    done = run(db_path, "list", env={"FORCE_COLOR": "1", "COLUMNS": "80"})
    assert done.returncode == 0, done.stderr
    assert TITLE in done.stdout.decode() or TITLE.encode() in done.stdout.replace(b"\x1b", b"")
    assert "…" not in done.stdout.decode()


def on_a_terminal(db: Path, columns: int, *args: str) -> str:
    """What the verb shows on a terminal of ``columns`` (a pseudo-terminal)."""
    leader, follower = pty.openpty()
    env = {**os.environ, "COLUMNS": str(columns), "LINES": "40"}
    env.pop("FORCE_COLOR", None)
    subprocess.run([WORKCENTER, "--db", str(db), *args], stdout=follower, stderr=follower, env=env)
    os.close(follower)
    shown = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the terminal closed: all was read
            break
        if not chunk:
            break
        shown += chunk
    os.close(leader)
    return shown.decode()


def test_a_narrow_terminal_shows_ids_by_a_prefix_the_verbs_take(db_path: Path) -> None:
    """On 40 columns the full id squeezed status, mode and title to nothing (found by
    acceptance testing, ADR-0145); a wide terminal and a pipe keep whole ids."""
    store(db_path)
    with WorkCenter.open(db_path) as wc:
        full = str(wc.list_work_items()[0]["id"])
    narrow = on_a_terminal(db_path, 40, "list")
    assert full[:8] in narrow and full not in narrow
    assert "draft" in narrow and "Spalt" in narrow  # the other columns have room
    assert full in on_a_terminal(db_path, 120, "list")
    assert full in run(db_path, "list").stdout.decode()
    shown = run(db_path, "show", full[:8])
    assert shown.returncode == 0, shown.stderr
