"""What a probe and a monitor ask of a server (ADR-0142): ``/api/health`` answers whether
the store can be read now, with no token, and the store's 503 when it cannot (no path
answered a probe, and ``/`` answered 200 with the database down, found by acceptance
testing); ``/api/status`` gives an operator the head, each view's lag and the Runs held
under live and lapsed leases."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import FakeClock, claim, create_linear
from http_client import client

from workcenter.adapters.cli import cli
from workcenter.adapters.http.guard import Policy
from workcenter.adapters.persistence import StoreUnavailable
from workcenter.application import WorkCenter
from workcenter.service_layer.queries.changes import ChangeFeed

TOKEN = "api-token-0123456789abcd"


def test_health_needs_no_token_and_says_only_that_the_store_answers(wc: WorkCenter) -> None:
    api = client(wc, Policy.for_host("127.0.0.1", token=TOKEN))
    answer = api.get("/api/health")
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"status": "ok"}
    assert answer.headers["cache-control"] == "no-store"
    assert api.get("/api/status").status_code == 401  # the store's figures need a token


def test_health_is_the_stores_503_when_the_store_cannot_be_read(
    wc: WorkCenter, monkeypatch: pytest.MonkeyPatch
) -> None:
    def away(self: ChangeFeed) -> int:
        raise StoreUnavailable("the database cannot be reached")

    monkeypatch.setattr(ChangeFeed, "head", away)
    answer = client(wc).get("/api/health")
    assert answer.status_code == 503, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    assert answer.json()["title"] == "StoreUnavailable"
    assert answer.headers["retry-after"] == "1"  # when to ask again (ADR-0145)


def test_health_is_503_for_a_store_that_answers_but_cannot_be_read(
    wc: WorkCenter, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A PostgreSQL schema renamed away made the probe a 500, then a reset connection
    (found by acceptance testing, ADR-0145); any other route's 500 says it closes."""

    def unreadable(self: ChangeFeed) -> int:
        raise RuntimeError('relation "events" does not exist')

    monkeypatch.setattr(ChangeFeed, "head", unreadable)
    api = client(wc)
    answer = api.get("/api/health")
    assert answer.status_code == 503, answer.text
    assert answer.json()["title"] == "StoreUnavailable"
    assert "events" not in answer.json()["detail"]  # the database's words stay in the log
    failed = api.get("/api/stream", params={"after": 0})
    assert failed.status_code == 500, failed.text
    assert failed.headers["connection"] == "close"


def test_status_counts_live_and_lapsed_leases_and_each_views_lag(
    wc: WorkCenter, clock: FakeClock
) -> None:
    api = client(wc)
    create_linear(wc)
    create_linear(wc)
    lost = claim(wc, lease_seconds=30)
    clock.advance(20)
    claim(wc, lease_seconds=30)
    clock.advance(15)  # the first lapsed 5 s ago, the second lives 15 s more
    answer = api.get("/api/status")
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["head"] == wc.changes.head()
    assert {view["name"] for view in body["views"]} == set(wc.maintenance.projection_names())
    assert all(view["lag"] == 0 for view in body["views"]), body["views"]
    lapse = lost.expires_at.isoformat().replace("+00:00", "Z")
    assert body["leases"] == {"live": 1, "lapsed": 1, "oldestLapse": lapse}
    wc.worker_protocol.recover_expired()
    after = api.get("/api/status").json()["leases"]
    assert after == {"live": 1, "lapsed": 0, "oldestLapse": None}


def test_the_cli_says_the_same_leases(db_path: Path) -> None:
    with WorkCenter.open(db_path, clock=FakeClock()) as wc:  # T0: long ago
        create_linear(wc)
        lost = claim(wc, lease_seconds=30)
    said = CliRunner().invoke(cli, ["--db", str(db_path), "leases", "--json"])
    assert said.exit_code == 0, said.output
    lapse = lost.expires_at.isoformat().replace("+00:00", "Z")
    assert json.loads(said.stdout) == {"live": 0, "lapsed": 1, "oldest_lapse": lapse}
    said = CliRunner().invoke(cli, ["--db", str(db_path), "leases"])
    assert (
        said.stdout.split()
        == (
            f"0 Runs under live leases, 1 lapsed (the oldest at {lapse}, not yet recovered)"
        ).split()
    )
