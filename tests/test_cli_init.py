"""``workcenter init`` makes a store where every verb but ``demo`` refuses to (found by
acceptance testing: deployment.md's scale-out commands, run as written on a new schema,
all said "no Workcenter store", and only ``demo``, which writes a demo item, made one)."""

from __future__ import annotations

import json
from pathlib import Path

import postgres
import pytest
from click.testing import CliRunner, Result
from conftest import create_dynamic
from test_hardening_cli import one_line_error

from workcenter.adapters.cli import cli
from workcenter.application import WorkCenter


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_init_makes_the_store_once_and_changes_nothing_after(backend: str, tmp_path: Path) -> None:
    def check(db: str) -> None:
        one_line_error(invoke("list", "--db", db), "StoreUnavailable")
        made = invoke("init", "--db", db, "--json")
        assert made.exit_code == 0, made.output
        assert json.loads(made.stdout) == {"created": True, "events": 0}
        assert invoke("list", "--db", db).exit_code == 0
        with WorkCenter.open(db, create=False) as wc:
            create_dynamic(wc)
            events = wc.event_count()
        again = invoke("init", "--db", db)
        assert again.exit_code == 0 and f"the store exists ({events} events)" in again.stdout
        with WorkCenter.open(db, create=False) as wc:
            assert wc.event_count() == events

    if backend == "sqlite":
        check(str(tmp_path / "new.db"))
    else:
        with postgres.fresh_schema("wcinit") as url:
            check(url)


def test_init_where_no_store_can_be_made_is_one_line(tmp_path: Path) -> None:
    one_line_error(
        invoke("init", "--db", str(tmp_path / "no" / "such" / "x.db")), "StoreUnavailable"
    )
    assert not (tmp_path / "no").exists()
