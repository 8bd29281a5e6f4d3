"""A store whose schema has the longest name a URL takes (48 characters) rebuilds its
views: the rebuild's shadow schema was named after it with 17 characters more, which its
own check then refused, with a traceback (found by acceptance testing)."""

from __future__ import annotations

import uuid

import postgres
from conftest import create_dynamic
from test_restart import views_equal_a_rebuild

from workcenter.application import WorkCenter


def test_a_store_with_the_longest_schema_name_rebuilds() -> None:
    postgres.require_server()
    schema = f"wclong_{uuid.uuid4().hex[:12]}".ljust(48, "x")
    assert len(schema) == 48
    try:
        with WorkCenter.open(postgres.url(schema)) as wc:
            create_dynamic(wc)
            views_equal_a_rebuild(wc)
    finally:
        postgres.drop_schema(schema)
