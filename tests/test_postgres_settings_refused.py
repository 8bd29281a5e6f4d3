"""PostgreSQL settings a store cannot open with are refused before anything is made:
``InvalidInput`` naming the setting, no schema created for a new store, no event written
to an existing one (found by acceptance testing: they escaped as the library's OSError
or ValueError, a negative lock timeout only at the first write, and a refused commit mode
left a half-made schema that later verbs took for a store)."""

from __future__ import annotations

import postgres
import pytest
from conftest import create_dynamic

from workcenter.adapters import postgres_settings
from workcenter.adapters.persistence import StoreUnavailable
from workcenter.adapters.postgres_settings import CLAIM_HOLD_TIMEOUT_ENV, SYNCHRONOUS_COMMIT_ENV
from workcenter.application import WorkCenter
from workcenter.domain.errors import InvalidInput

REFUSED = [
    (SYNCHRONOUS_COMMIT_ENV, "early_release"),
    (CLAIM_HOLD_TIMEOUT_ENV, "0"),
    (CLAIM_HOLD_TIMEOUT_ENV, "30s"),
    ("POSTGRES_POOL_SIZE", "abc"),
    ("POSTGRES_POOL_SIZE", "-1"),
    ("POSTGRES_MAX_OVERFLOW", "-5"),
    ("POSTGRES_MAX_WAITING", "many"),
    ("POSTGRES_CONNECT_TIMEOUT", "1.5"),
    ("POSTGRES_CONNECT_TIMEOUT", "0"),
    ("POSTGRES_LOCK_TIMEOUT", "-1"),
    ("POSTGRES_IDLE_IN_TRANSACTION_SESSION_TIMEOUT", "-1"),
    ("POSTGRES_PRE_PING", "maybe"),
    ("WORKCENTER_POSTGRES_POOL_SIZE", "x"),  # the prefixed key, which the library reads first
]


def schema_exists(schema: str) -> bool:
    with postgres.connect() as conn:
        row = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)).fetchone()
    return row is not None


@pytest.mark.parametrize(("key", "value"), REFUSED)
def test_a_new_store_is_not_made(key: str, value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with postgres.fresh_schema("wcset") as url:
        schema = url.rsplit("=", 1)[1]
        monkeypatch.setenv(key, value)
        with pytest.raises(InvalidInput, match=f"\\${key} "):
            WorkCenter.open(url)
        assert not schema_exists(schema)


@pytest.mark.parametrize(("key", "value"), REFUSED)
def test_an_existing_store_is_left_as_it_is(
    key: str, value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with postgres.fresh_schema("wcset") as url:
        with WorkCenter.open(url) as wc:
            create_dynamic(wc)
            before = wc.event_count()
        monkeypatch.setenv(key, value)
        with pytest.raises(InvalidInput, match=f"\\${key} "):
            WorkCenter.open(url, create=False)
        monkeypatch.delenv(key)
        with WorkCenter.open(url, create=False) as wc:
            assert wc.event_count() == before


def test_good_values_and_the_library_defaults_open(monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in (
        ("POSTGRES_POOL_SIZE", "2"),
        ("POSTGRES_MAX_OVERFLOW", "0"),
        ("POSTGRES_LOCK_TIMEOUT", ""),
        ("POSTGRES_PRE_PING", "Yes"),
        ("POSTGRES_IDLE_IN_TRANSACTION_SESSION_TIMEOUT", "0"),
    ):
        monkeypatch.setenv(key, value)
    with postgres.fresh_schema("wcset") as url, WorkCenter.open(url) as wc:
        create_dynamic(wc)
        assert wc.event_count() > 0


def test_a_url_that_does_not_parse_is_invalid_input() -> None:
    with pytest.raises(InvalidInput, match="not a valid PostgreSQL URL"):
        WorkCenter.open("postgresql://postgres@[::1:5432/test")


def test_a_server_too_old_to_bound_claims_is_refused_before_anything_is_made(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A claim bounds its holds with ``idle_session_timeout`` (PostgreSQL 14, ADR-0111):
    an older server is refused by name when a store opens, no schema made."""
    monkeypatch.setattr(postgres_settings, "LEAST_SERVER_VERSION", 990000)
    with postgres.fresh_schema("wcset") as url:
        schema = url.rsplit("=", 1)[1]
        with pytest.raises(StoreUnavailable, match="Workcenter needs PostgreSQL 99 or newer"):
            WorkCenter.open(url)
        assert not schema_exists(schema)
