"""A rebuild drops the shadow schemas that rebuilds cut short left behind, and only
those: a shadow another rebuild is building is held by that rebuild's lock and kept
(ADR-0092; a rebuild cut short named the schema it left, and nothing removed it)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import postgres
import pytest
from click.testing import CliRunner
from conftest import create_dynamic

from workcenter.adapters.cli import cli
from workcenter.application import WorkCenter
from workcenter.projections import shadow_schema


@pytest.fixture
def schema() -> Iterator[str]:
    with postgres.fresh_schema("wcleft") as url:
        yield url.split("schema=")[1]


def shadows(schema: str) -> list[str]:
    with postgres.connect() as conn:
        rows = conn.execute(
            "SELECT nspname FROM pg_namespace WHERE starts_with(nspname, %s) ORDER BY 1",
            (f"{schema}_rebuild_",),
        ).fetchall()
    return [name for (name,) in rows]


def left_behind(schema: str) -> str:
    """A shadow as a rebuild cut short leaves it: a schema with a table, held by no one."""
    name = f"{schema}_rebuild_{uuid.uuid4().hex[:8]}"
    with postgres.connect() as conn:
        conn.execute(f'CREATE SCHEMA "{name}"')
        conn.execute(f'CREATE TABLE "{name}".work_queue (id int)')
    return name


def test_a_rebuild_drops_the_shadows_left_behind_and_says_so(schema: str) -> None:
    url = postgres.url(schema)
    with WorkCenter.open(url) as wc:
        create_dynamic(wc)
        live = wc.projections.views["work_queue"].dump()
    left = sorted([left_behind(schema), left_behind(schema)])
    # Not a shadow of this store: another name's, and a schema whose name only begins alike.
    other = left_behind(f"{schema}x")
    lookalike = f"{schema}_rebuild_notours"
    with postgres.connect() as conn:
        conn.execute(f'CREATE SCHEMA "{lookalike}"')
    try:
        done = CliRunner().invoke(cli, ["--db", url, "projections", "rebuild", "work_queue"])
        assert done.exit_code == 0, done.output
        for name in left:
            assert f"removed {name}, left by a rebuild cut short" in done.output
        assert shadows(schema) == [lookalike]
        with WorkCenter.open(url) as wc:
            assert wc.projections.views["work_queue"].dump() == live
            [report] = wc.maintenance.rebuild_projection("work_queue")
            assert report.removed_schemas == ()
        assert shadows(f"{schema}x") == [other]
    finally:
        postgres.drop_schema(f"{schema}x")
        with postgres.connect() as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{lookalike}" CASCADE')


def test_a_shadow_another_rebuild_holds_is_kept(schema: str) -> None:
    url = postgres.url(schema)
    with WorkCenter.open(url) as wc:
        create_dynamic(wc)
        held: list[str] = []

        def rebuild_meanwhile(view: str, done: int, total: int) -> None:
            if held:
                return
            [building] = shadows(schema)  # the first rebuild's, held by its lock
            held.append(building)
            with WorkCenter.open(url) as other:
                [report] = other.maintenance.rebuild_projection("mailbox")
            assert report.removed_schemas == ()
            assert shadows(schema) == [building]

        [report] = wc.maintenance.rebuild_projection("work_queue", progress=rebuild_meanwhile)
        assert held and report.removed_schemas == ()
    assert shadows(schema) == []


def test_the_shadow_prefix_matches_the_one_the_tests_clean_up() -> None:
    assert shadow_schema.PREFIX_LENGTH == 31  # tests/postgres.py drop_schema's [:31]


def test_a_shadow_of_another_role_is_not_the_stores_to_drop(schema: str) -> None:
    """A store's user may not drop another role's schema: a refused drop would fail the
    rebuild, and such a schema is not one this store's rebuilds made."""
    url = postgres.url(schema)
    with WorkCenter.open(url) as wc:
        create_dynamic(wc)
    role = f"{schema}_other"
    name = f"{schema}_rebuild_{uuid.uuid4().hex[:8]}"
    with postgres.connect() as conn:
        conn.execute(f'CREATE ROLE "{role}"')
        conn.execute(f'CREATE SCHEMA "{name}" AUTHORIZATION "{role}"')
    try:
        with WorkCenter.open(url) as wc:
            [report] = wc.maintenance.rebuild_projection("work_queue")
        assert report.removed_schemas == ()
        assert shadows(schema) == [name]
    finally:
        with postgres.connect() as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
            conn.execute(f'DROP ROLE IF EXISTS "{role}"')
