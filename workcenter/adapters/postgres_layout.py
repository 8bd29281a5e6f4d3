"""The layout of a PostgreSQL store: which Workcenter's tables and functions it holds
(ADR-0113).

Every process that opens a store makes what it lacks and replaces the store's functions
with its own (``CREATE OR REPLACE``), so an older Workcenter opening a newer store (an
operator's CLI not yet upgraded, a worker of the last release) would put its functions
under every newer process. The store records the layout it was made or upgraded to in a
one-row table; a Workcenter whose ``LAYOUT`` is older refuses to open it, before it
makes or replaces anything, as a SQLite store's ``user_version`` does (ADR-0014).
``LAYOUT`` is both databases' (``store_layout``).
"""

from __future__ import annotations

from typing import Any, Final

from workcenter.adapters.persistence import StoreUnavailable
from workcenter.adapters.store_layout import LAYOUT, upgraded

TABLE: Final = "workcenter_layout"


def read(conn: Any, schema: str) -> int:
    """The store's recorded layout (its table exists), on a psycopg connection."""
    row = conn.execute(f'SELECT max(layout) FROM "{schema}".{TABLE}').fetchone()
    return int(row[0]) if row is not None and row[0] is not None else 0


def check(layout: int, where: str) -> None:
    """``StoreUnavailable`` unless this Workcenter knows ``layout``."""
    if layout > LAYOUT:
        raise StoreUnavailable(
            f"{where} has store layout {layout}; this Workcenter knows layouts up to"
            f" {LAYOUT} (upgrade Workcenter: a newer one made or upgraded this store)"
        )


def record(datastore: Any, where: str) -> None:
    """Record ``LAYOUT`` as the store's once its tables and functions are made (a store
    made before layouts were recorded gets its first row). A layout already recorded is
    never lowered; one raised is said (``upgraded``)."""
    schema = f'"{datastore.schema}"'
    with datastore.transaction(commit=True) as c:
        c.execute(
            f"CREATE TABLE IF NOT EXISTS {schema}.{TABLE} ("
            " one boolean PRIMARY KEY DEFAULT true CHECK (one), layout integer NOT NULL)"
        )
        c.execute(f"SELECT max(layout) AS layout FROM {schema}.{TABLE}")
        before = c.fetchone()["layout"]  # the library's cursors give rows by name
        c.execute(
            f"INSERT INTO {schema}.{TABLE} (layout) VALUES (%s) ON CONFLICT (one)"
            f" DO UPDATE SET layout = EXCLUDED.layout WHERE {TABLE}.layout < EXCLUDED.layout",
            (LAYOUT,),
        )
    if before is not None and before < LAYOUT:
        upgraded(where, before)
