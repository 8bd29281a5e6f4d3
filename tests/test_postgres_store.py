"""A Workcenter store on PostgreSQL: the URL, the schema, the CLI verbs, the read
models and the audit there (ADR-0032). Server settings and skipping: ``postgres.py``."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import postgres
import pytest
from click.testing import CliRunner
from conftest import create_dynamic, plan

from workcenter.adapters.cli import cli
from workcenter.adapters.persistence import StoreUnavailable
from workcenter.application import WorkCenter
from workcenter.domain.errors import InvalidInput


@pytest.fixture
def url() -> Iterator[str]:
    with postgres.fresh_schema() as fresh:
        yield fresh


def _tables(schema: str) -> set[str]:
    import psycopg

    with psycopg.connect(
        host=postgres.HOST, port=postgres.PORT, user=postgres.USER, dbname=postgres.DBNAME
    ) as conn:
        rows = conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (schema,)
        ).fetchall()
    return {row[0] for row in rows}


def _schema(url: str) -> str:
    return url.rpartition("schema=")[2]


def test_a_url_makes_every_table_in_its_schema_on_first_use(url: str) -> None:
    schema = _schema(url)
    assert _tables(schema) == set()
    with WorkCenter.open(url) as wc:
        item = create_dynamic(wc)
        plan(wc, item.id)
        assert [row["id"] for row in wc.list_work_items()] == [item.id]
    assert _tables(schema) >= {
        "workcenter_events",
        "workcenter_snapshots",
        "tracking",
        "wq_actions",
        "wq_runs",
        "wq_items",
        "dv_details",
    }


def test_the_schema_comes_from_the_environment_when_the_url_names_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    postgres.require_server()
    schema = f"wcenv_{uuid.uuid4().hex[:12]}"
    monkeypatch.setenv("WORKCENTER_SCHEMA", schema)
    bare = postgres.url(schema).partition("?")[0]
    try:
        with WorkCenter.open(bare) as wc:
            create_dynamic(wc)
        assert "workcenter_events" in _tables(schema)
    finally:
        postgres.drop_schema(schema)


def test_two_schemas_of_one_database_are_two_stores(url: str) -> None:
    with (
        postgres.fresh_schema() as other,
        WorkCenter.open(url) as first,
        WorkCenter.open(other) as second,
    ):
        create_dynamic(first, title="Only here")
        assert second.list_work_items() == []
        assert [row["title"] for row in first.list_work_items()] == ["Only here"]


def test_reading_refuses_a_schema_without_a_store_and_makes_nothing(url: str) -> None:
    result = CliRunner().invoke(cli, ["--db", url, "list"])
    assert result.exit_code == 2
    assert "StoreUnavailable: no Workcenter store at" in result.output
    assert _tables(_schema(url)) == set()
    with pytest.raises(StoreUnavailable, match="no Workcenter store"):
        WorkCenter.open(url, create=False)


@pytest.mark.parametrize("create", [False, True])
def test_an_unreachable_server_is_refused_without_showing_the_password(create: bool) -> None:
    """At once and in the server's words, whether the store would be read or made: an
    open that makes one waited out its pool's timeout four times (two minutes) and
    named a lost connection that never was."""
    started = time.monotonic()
    with pytest.raises(StoreUnavailable) as refused:
        WorkCenter.open("postgresql://me:s3cret@127.0.0.1:1/nowhere?schema=x", create=create)
    assert time.monotonic() - started < 20
    assert "s3cret" not in str(refused.value)
    assert "me:***@127.0.0.1:1" in str(refused.value)
    assert "refused" in str(refused.value).lower(), refused.value


@pytest.mark.parametrize(
    "bad",
    [
        "postgresql://u@h/db?schema=Robert'); DROP TABLE x;--",
        "postgresql://u@h/db?schema=UPPER",
        "postgresql://u@h/db?role=admin",
        "postgresql://u@h:notaport/db",
        "postgresql://u@h/db?schema=",  # an unset variable: not the default schema
        "postgresql://u@h/db?schema=a&schema=b",
    ],
)
def test_a_malformed_url_is_invalid_input(bad: str) -> None:
    with pytest.raises(InvalidInput):
        WorkCenter.open(bad)


def test_sqlite_settings_are_refused_on_postgresql(url: str) -> None:
    with pytest.raises(InvalidInput, match="SQLite"):
        WorkCenter.open(url, sqlite_synchronous="FULL")


def _json(url: str, *args: str) -> Any:
    result = CliRunner().invoke(cli, ["--db", url, *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_the_demo_and_every_read_verb_run_on_postgresql(url: str) -> None:
    demo = _json(url, "demo")
    item_id = demo["item"]["id"] if "item" in demo else demo["id"]
    listed = _json(url, "list")
    assert [row["id"] for row in listed] == [item_id]
    assert listed[0]["status"] == "done"
    shown = _json(url, "show", item_id)
    assert shown["status"] == "done"
    audit = _json(url, "audit", item_id[:8])
    rows = audit["events"]
    positions = [row["position"] for row in rows]
    assert positions == sorted(positions) and len(positions) > 20
    assert {row["aggregate"] for row in rows} == {"work_item", "action", "ledger", "conversation"}
    status = _json(url, "projections", "status")
    assert {row["name"]: row["lag"] for row in status} == {
        "work_queue": 0,
        "detail": 0,
        "mailbox": 0,
    }


def test_a_rebuild_on_postgresql_equals_the_live_views(url: str) -> None:
    runner = CliRunner()
    assert runner.invoke(cli, ["--db", url, "demo"]).exit_code == 0
    with WorkCenter.open(url) as wc:
        live = {name: view.dump() for name, view in wc.projections.views.items()}
        reports = wc.maintenance.rebuild_projection()
        assert {r.name: r.position for r in reports} == {
            s.name: s.head for s in wc.maintenance.projection_status()
        }
        assert {name: view.dump() for name, view in wc.projections.views.items()} == live
    leftovers = [s for s in _all_schemas() if s.startswith(f"{_schema(url)}_rebuild_")]
    assert leftovers == []


def _all_schemas() -> list[str]:
    import psycopg

    with psycopg.connect(
        host=postgres.HOST, port=postgres.PORT, user=postgres.USER, dbname=postgres.DBNAME
    ) as conn:
        return [row[0] for row in conn.execute("SELECT nspname FROM pg_namespace").fetchall()]


WITHOUT_PSYCOPG = """
import sys
sys.modules["psycopg"] = None  # the postgres extra is not installed
sys.modules["psycopg_pool"] = None
from workcenter.application import WorkCenter
from workcenter.domain.errors import WorkcenterError
with WorkCenter.open(sys.argv[1]) as wc:
    wc.create_work_item(title="t", goal="g", acceptance_criteria=["c"], delivery_target="response")
    wc.maintenance.rebuild_projection()
    print(len(wc.list_work_items()))
try:
    WorkCenter.open("postgresql://u@h/db")
except WorkcenterError as error:
    print(type(error).__name__, error)
"""


def test_sqlite_stores_need_no_postgresql_driver(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_PSYCOPG, str(tmp_path / "plain.db")],
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.splitlines() == [
        "1",
        "StoreUnavailable PostgreSQL needs the postgres extra: pip install 'workcenter[postgres]'",
    ]


def test_the_runner_follows_postgresql_by_listen_notify(url: str) -> None:
    from workcenter.projections.runner import ProjectionRunner

    with WorkCenter.open(url, inline_projections=False) as wc:
        with ProjectionRunner(wc, poll=0.05) as runner:
            assert runner.subscribes
            for n in range(5):
                item = create_dynamic(wc, title=f"Item {n}")
                plan(wc, item.id)
            runner.wait(wc.event_count(), timeout=20)
            assert runner.listening  # following, not polling
            assert all(row.lag == 0 for row in runner.status())
        live = {name: view.dump() for name, view in wc.projections.views.items()}
        assert len(live["work_queue"]["wq_items"]) == 5
        wc.maintenance.rebuild_projection()
        assert {name: view.dump() for name, view in wc.projections.views.items()} == live
