"""Defects an acceptance session on the embedded SQLite default found (ADR-0090): each
test failed on the code before its fix, and every refusal leaves the store as it was."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from workcenter.adapters.cli import cli
from workcenter.adapters.persistence import StoreUnavailable
from workcenter.application import WorkCenter


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
    one_line_error(
        invoke("--db", str(tmp_path / "source.db"), "rekey", "--to", "file:other.db"),
        "StoreUnavailable",
    )
    assert digest(foreign) == before


def test_stores_in_memory_still_open() -> None:
    for name in (":memory:", "file:acceptance?mode=memory&cache=shared"):
        with WorkCenter.open(name) as wc:
            assert wc.event_count() == 0
