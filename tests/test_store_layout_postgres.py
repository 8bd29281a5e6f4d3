"""A PostgreSQL store records its layout, and an older Workcenter refuses a newer store
before it makes or replaces anything (ADR-0113).

Every open replaces the store's functions with the opener's own, so an older process
(an operator's CLI not yet upgraded) opening a newer store would put its functions under
every newer one. The layout is what a store holds: here, its tables' columns, indexes and
functions, read from the catalog; a change to them must come with a new
``store_layout.LAYOUT`` and its fingerprint below.
"""

from __future__ import annotations

import hashlib

import postgres
import pytest
from conftest import create_linear

from workcenter.adapters import postgres_layout
from workcenter.adapters.executors import echo
from workcenter.adapters.persistence import StoreUnavailable
from workcenter.application import WorkCenter

# The catalog's fingerprint of each layout's store (``fingerprint``), by layout and the
# server's major version (whose catalog writes a function's definition out).
FINGERPRINTS = {
    (1, 15): "f91efd4c5b2ad9de593e594db80def1a9b9e406ed47cdb7943786967525b81a0",
    (2, 15): "1740bf2846a51fac8a5f843a5bb0e816c8003b992a3e74282ac09f3c1b0d8ab6",
    (3, 15): "16eb97c36771064f6d42491ef2b104d759ae95d2a41d0624d71912b2403c4ac5",
}


@pytest.fixture
def backend() -> str:
    return "postgresql"


def catalog(schema: str) -> list[tuple[str, ...]]:
    """What the schema holds, its name written as ``{schema}``: each table's columns, each
    index and each function, in a stable order."""
    with postgres.connect() as conn:
        rows = conn.execute(
            "SELECT 'column', table_name::text, column_name::text,"
            " concat_ws(' ', data_type, is_nullable, column_default)"
            " FROM information_schema.columns WHERE table_schema = %(s)s"
            " UNION ALL SELECT 'index', tablename::text, indexname::text, indexdef"
            " FROM pg_indexes WHERE schemaname = %(s)s"
            " UNION ALL SELECT 'function', p.proname::text,"
            " pg_get_function_identity_arguments(p.oid), pg_get_functiondef(p.oid)"
            " FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
            " WHERE n.nspname = %(s)s ORDER BY 1, 2, 3",
            {"s": schema},
        ).fetchall()
    return [tuple(str(v).replace(schema, "{schema}") for v in row) for row in rows]


def fingerprint(schema: str) -> str:
    return hashlib.sha256(repr(catalog(schema)).encode()).hexdigest()


def schema_of(location: str) -> str:
    return location.rsplit("schema=", 1)[1]


def test_a_store_holds_the_layout_its_workcenter_names(wc: WorkCenter, location: str) -> None:
    """A store that has done every kind of work holds exactly what ``LAYOUT`` says: a
    table, column, index or function changed without a new layout fails here."""
    item = create_linear(wc, stages=("implement",))
    claim = wc.claim_next("w1")
    assert claim is not None and claim.work_item_id == item.id
    wc.finish_run(claim, echo(claim))
    found = fingerprint(schema_of(location))
    with postgres.connect() as conn:
        major = conn.info.server_version // 10000
    key = (postgres_layout.LAYOUT, major)
    assert key in FINGERPRINTS, f"no fingerprint of layout {key[0]} on PostgreSQL {major}: {found}"
    assert found == FINGERPRINTS[key], (
        "the store's tables or functions changed: give store_layout.LAYOUT the next"
        f" number and record {found} as its fingerprint here"
    )


def test_a_store_records_its_layout(wc: WorkCenter, location: str) -> None:
    with postgres.connect() as conn:
        assert postgres_layout.read(conn, schema_of(location)) == postgres_layout.LAYOUT


def test_an_older_workcenter_refuses_a_newer_store_and_changes_nothing(
    wc: WorkCenter, location: str
) -> None:
    create_linear(wc, stages=("implement",))
    events = wc.event_count()
    schema = schema_of(location)
    newer = postgres_layout.LAYOUT + 1
    with postgres.connect() as conn:
        conn.execute(f'UPDATE "{schema}".{postgres_layout.TABLE} SET layout = %s', (newer,))
        # A newer Workcenter's function, which an older one must not replace.
        conn.execute(
            f'CREATE OR REPLACE FUNCTION "{schema}".wc_newer() RETURNS int'
            " LANGUAGE sql AS 'SELECT 2'"
        )
    before = catalog(schema)
    for create in (True, False):
        with pytest.raises(StoreUnavailable, match=f"store layout {newer}; this Workcenter"):
            WorkCenter.open(location, create=create)
    assert catalog(schema) == before
    with postgres.connect() as conn:
        assert postgres_layout.read(conn, schema) == newer  # never lowered
    with postgres.connect() as conn:
        conn.execute(
            f'UPDATE "{schema}".{postgres_layout.TABLE} SET layout = %s', (postgres_layout.LAYOUT,)
        )
    with WorkCenter.open(location, create=False) as again:
        assert again.event_count() == events


def test_a_store_made_before_layouts_were_recorded_gets_its_first(
    wc: WorkCenter, location: str
) -> None:
    schema = schema_of(location)
    with postgres.connect() as conn:
        conn.execute(f'DROP TABLE "{schema}".{postgres_layout.TABLE}')
    with WorkCenter.open(location, create=False), postgres.connect() as conn:
        assert postgres_layout.read(conn, schema) == postgres_layout.LAYOUT


def test_a_store_of_an_older_layout_is_upgraded_and_says_so(
    wc: WorkCenter, location: str, caplog: pytest.LogCaptureFixture
) -> None:
    """An upgrade wrote and said nothing (found by acceptance testing, ADR-0137)."""
    schema = schema_of(location)
    older = postgres_layout.LAYOUT - 1
    with postgres.connect() as conn:
        conn.execute(f'UPDATE "{schema}".{postgres_layout.TABLE} SET layout = %s', (older,))
    with caplog.at_level("WARNING", logger="workcenter.store"):
        WorkCenter.open(location, create=False).close()
        said = [r.getMessage() for r in caplog.records if "upgraded" in r.getMessage()]
        assert len(said) == 1 and said[0].endswith(
            f"store upgraded from layout {older} to {postgres_layout.LAYOUT}"
            " (a Workcenter older than this one now refuses it)"
        )
        caplog.clear()
        WorkCenter.open(location, create=False).close()  # once only
        assert not [r for r in caplog.records if "upgraded" in r.getMessage()]
    with postgres.connect() as conn:
        assert postgres_layout.read(conn, schema) == postgres_layout.LAYOUT
