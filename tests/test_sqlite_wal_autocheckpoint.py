"""The WAL's checkpoint interval (ADR-0042, ADR-0084): default, environment, validation,
in force on the store's checkpointing thread with the commits' own checkpoint at the
backstop, and a closed store checkpointed whatever the interval."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from test_sqlite_settings import exercise

from workcenter.adapters.cli import cli
from workcenter.adapters.sqlite_settings import (
    DEFAULT_WAL_AUTOCHECKPOINT,
    WAL_AUTOCHECKPOINT_ENV,
)
from workcenter.adapters.wal_checkpoint import BACKSTOP
from workcenter.application import WorkCenter
from workcenter.domain.errors import InvalidInput


def pooled_intervals(wc: WorkCenter) -> list[float]:
    """The interval of each pooled connection: its own automatic checkpoint is at
    BACKSTOP intervals, as a file store's thread checkpoints first (ADR-0084)."""
    datastore: Any = wc.store.factory.datastore  # type: ignore[attr-defined]
    return [
        int(c._sqlite_conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0]) / BACKSTOP
        for c in list(datastore.pool._pool)
    ]


def test_the_default_is_in_force_on_every_connection(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(WAL_AUTOCHECKPOINT_ENV, raising=False)
    assert DEFAULT_WAL_AUTOCHECKPOINT != 1000  # not SQLite's own default
    with WorkCenter.open(db_path) as wc:
        exercise(wc)
        intervals = pooled_intervals(wc)
    assert len(intervals) >= 2
    assert set(intervals) == {DEFAULT_WAL_AUTOCHECKPOINT}


@pytest.mark.parametrize(("value", "pages"), [("1000", 1000), (" 25000 ", 25000), ("", None)])
def test_the_environment_sets_it(
    db_path: Path, monkeypatch: pytest.MonkeyPatch, value: str, pages: int | None
) -> None:
    monkeypatch.setenv(WAL_AUTOCHECKPOINT_ENV, value)
    with WorkCenter.open(db_path) as wc:
        exercise(wc)
        assert set(pooled_intervals(wc)) == {pages or DEFAULT_WAL_AUTOCHECKPOINT}


@pytest.mark.parametrize("value", ["0", "-1", "1000001", "1.5", "4k", "1e4", "\uff14\uff10"])
def test_other_values_are_refused_before_anything_is_written(
    db_path: Path, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv(WAL_AUTOCHECKPOINT_ENV, value)
    with pytest.raises(InvalidInput, match=WAL_AUTOCHECKPOINT_ENV):
        WorkCenter.open(db_path)
    assert not db_path.exists()


def test_the_cli_reports_a_bad_value_in_one_line(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(WAL_AUTOCHECKPOINT_ENV, "never")
    result = CliRunner().invoke(cli, ["--db", str(db_path), "list"])
    assert result.exit_code == 2
    assert result.output.strip().startswith("InvalidInput: SQLite wal_autocheckpoint must be")
    assert "Traceback" not in result.output


def test_closing_the_store_checkpoints_the_whole_wal(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No automatic checkpoint runs (the interval is far above what the work writes),
    yet after close the database file holds everything and no WAL is left."""
    monkeypatch.setenv(WAL_AUTOCHECKPOINT_ENV, "1000000")
    wal = Path(f"{db_path}-wal")
    with WorkCenter.open(db_path) as wc:
        exercise(wc)
        events = wc.event_count()
        assert wal.stat().st_size > db_path.stat().st_size  # the work is still in the WAL
    assert not wal.exists() or wal.stat().st_size == 0
    plain = sqlite3.connect(f"file:{db_path}?mode=ro&immutable=1", uri=True)
    try:
        assert plain.execute("SELECT COUNT(*) FROM stored_events").fetchone()[0] == events
    finally:
        plain.close()
