"""The SQLite ``synchronous`` setting (ADR-0018): default, option, environment, validation,
and that the pragma is in force on every connection the store and its read models use."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from workcenter.adapters.cli import cli
from workcenter.adapters.sqlite_settings import SYNCHRONOUS_ENV
from workcenter.application import WorkCenter
from workcenter.domain.errors import InvalidInput

LEVELS = {"OFF": 0, "NORMAL": 1, "FULL": 2}


def pooled_levels(wc: WorkCenter) -> list[int]:
    """The ``synchronous`` level of every connection the store's pool holds."""
    pool: Any = wc.store.factory.datastore  # type: ignore[attr-defined]
    connections = list(pool.pool._pool)
    return [int(c._sqlite_conn.execute("PRAGMA synchronous").fetchone()[0]) for c in connections]


def exercise(wc: WorkCenter) -> None:
    """Writes, view catch-ups and reads, then two connections held at once, so the pool
    holds more than the one a single thread reuses."""
    items = [
        wc.create_work_item(title=f"t{i}", goal="g", acceptance_criteria=["c"], start=True)
        for i in range(3)
    ]
    for item in items:
        wc.detail(item.id)
    wc.list_work_items()
    datastore: Any = wc.store.factory.datastore  # type: ignore[attr-defined]
    with datastore.get_connection(commit=False), datastore.get_connection(commit=True):
        pass


def test_the_default_is_normal_on_every_connection(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(SYNCHRONOUS_ENV, raising=False)
    with WorkCenter.open(db_path) as wc:
        exercise(wc)
        levels = pooled_levels(wc)
    assert len(levels) >= 2
    assert set(levels) == {LEVELS["NORMAL"]}


@pytest.mark.parametrize("value", ["FULL", "normal", "Full"])
def test_the_option_sets_the_pragma(db_path: Path, value: str) -> None:
    with WorkCenter.open(db_path, sqlite_synchronous=value) as wc:
        exercise(wc)
        assert set(pooled_levels(wc)) == {LEVELS[value.upper()]}


def test_the_environment_sets_it_and_the_option_wins(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(SYNCHRONOUS_ENV, "FULL")
    with WorkCenter.open(db_path) as wc:
        exercise(wc)
        assert set(pooled_levels(wc)) == {LEVELS["FULL"]}
    with WorkCenter.open(db_path, sqlite_synchronous="NORMAL") as wc:
        exercise(wc)
        assert set(pooled_levels(wc)) == {LEVELS["NORMAL"]}


@pytest.mark.parametrize("value", ["OFF", "EXTRA", "", "1", "fast"])
def test_other_option_values_are_refused_before_anything_is_written(
    db_path: Path, value: str
) -> None:
    with pytest.raises(InvalidInput, match="FULL or NORMAL"):
        WorkCenter.open(db_path, sqlite_synchronous=value)
    assert not db_path.exists()


def test_other_environment_values_are_refused(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(SYNCHRONOUS_ENV, "OFF")
    with pytest.raises(InvalidInput, match=SYNCHRONOUS_ENV):
        WorkCenter.open(db_path)


def test_the_cli_reports_a_bad_environment_value_in_one_line(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(SYNCHRONOUS_ENV, "sometimes")
    result = CliRunner().invoke(cli, ["--db", str(db_path), "list"])
    assert result.exit_code == 2
    assert result.output.strip().startswith("InvalidInput: SQLite synchronous must be")
    assert "Traceback" not in result.output
