"""Confidentiality at rest (ADR-0033): with ``WORKCENTER_CIPHER_KEY`` every event,
snapshot and read-model copy of user text is sealed by the library's AES cipher, on
SQLite and PostgreSQL; the wrong key, or none, is refused before anything is read."""

from __future__ import annotations

import base64
import os
import sqlite3
import zlib
from collections.abc import Iterator
from pathlib import Path

import postgres
import pytest
from click.testing import CliRunner
from conftest import BACKENDS, checks

from workcenter.adapters.cipher import KEY_ENV, StoreKeyRefused
from workcenter.adapters.cli import cli
from workcenter.adapters.compression import SmallBlobZlibCompressor
from workcenter.application import WorkCenter
from workcenter.domain.errors import InvalidInput
from workcenter.service_layer import repository as workcenter_store

TITLE = "Quarterly merger with Initech"
EVIDENCE = "board minutes page 7 approve"


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def new_key() -> str:
    return base64.b64encode(os.urandom(32)).decode()


@pytest.fixture
def key(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    value = new_key()
    monkeypatch.setenv(KEY_ENV, value)
    yield value


def _fill(location: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """An item whose title and evidence are stored as events, a snapshot and view rows."""
    monkeypatch.setattr(workcenter_store, "SNAPSHOT_INTERVAL", 2)  # snapshots too
    with WorkCenter.open(location) as wc:
        item = wc.create_work_item(
            title=TITLE,
            goal="Close the deal",
            acceptance_criteria=["Tests pass"],
            delivery_target="response",
            start=True,
        )
        item = wc.plan_actions(
            item.id,
            expected_version=item.version,
            actions=[
                {
                    "type": "research",
                    "objective": "Check the minutes",
                    "approach": "Read them",
                    "expectedOutcome": "A cited answer",
                    "workspaceMode": "read",
                }
            ],
        )
        claim = wc.claim_next("w1")
        assert claim is not None
        wc.finish_run(
            claim,
            {
                "outcome": "completed",
                "summary": "done",
                "evidence": [EVIDENCE],
                "acceptanceChecks": checks(["Tests pass"]),
            },
        )
        assert wc.list_work_items()[0]["title"] == TITLE
        assert wc.detail(item.id)["title"] == TITLE  # type: ignore[index]


def _stored_blobs(location: str) -> list[bytes]:
    """Every value of every row the store holds (and, on SQLite, its files' bytes)."""
    if not location.startswith("postgresql"):
        path = Path(location)
        blobs = [p.read_bytes() for p in (path, Path(f"{location}-wal")) if p.exists()]
        with sqlite3.connect(path) as conn:
            tables = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            for (table,) in tables.fetchall():
                for row in conn.execute(f'SELECT * FROM "{table}"').fetchall():
                    blobs.extend(v if isinstance(v, bytes) else str(v).encode() for v in row)
        return blobs
    import psycopg

    schema = location.rpartition("schema=")[2]
    blobs: list[bytes] = []
    with psycopg.connect(
        host=postgres.HOST, port=postgres.PORT, user=postgres.USER, dbname=postgres.DBNAME
    ) as conn:
        tables = conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (schema,)
        ).fetchall()
        for (table,) in tables:
            for row in conn.execute(f'SELECT * FROM "{schema}"."{table}"').fetchall():
                blobs.extend(v if isinstance(v, bytes) else str(v).encode() for v in row)
    return blobs


def _readable(blob: bytes) -> bytes:
    """The blob and, when it is a zlib stream, what it inflates to (stored state is
    deflated, against a preset dictionary or not, so plaintext could hide there)."""
    try:
        return blob + SmallBlobZlibCompressor().decompress(blob)
    except zlib.error:
        return blob


def _holds(location: str, text: str) -> bool:
    needle = text.encode()
    return any(needle in _readable(blob) for blob in _stored_blobs(location))


def test_without_a_key_the_title_and_evidence_are_readable_at_rest(
    location: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The control: what the encrypted test looks for is really there unencrypted."""
    monkeypatch.delenv(KEY_ENV, raising=False)
    _fill(location, monkeypatch)
    assert _holds(location, TITLE)
    assert _holds(location, EVIDENCE)


def test_with_a_key_no_title_or_evidence_is_stored_in_plaintext(
    location: str, key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fill(location, monkeypatch)
    assert not _holds(location, TITLE)
    assert not _holds(location, EVIDENCE)
    # Rebuilt views are sealed too, and read back with the key.
    with WorkCenter.open(location) as wc:
        wc.maintenance.rebuild_projection()
        assert wc.list_work_items()[0]["title"] == TITLE
    assert not _holds(location, TITLE)


def test_the_wrong_key_or_none_is_refused_and_writes_nothing(
    location: str, key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fill(location, monkeypatch)
    with WorkCenter.open(location) as wc:
        count = wc.event_count()
    monkeypatch.setenv(KEY_ENV, new_key())
    with pytest.raises(StoreKeyRefused, match="does not open the store"):
        WorkCenter.open(location)
    monkeypatch.delenv(KEY_ENV)
    with pytest.raises(StoreKeyRefused, match="is encrypted: set"):
        WorkCenter.open(location)
    monkeypatch.setenv(KEY_ENV, key)
    with WorkCenter.open(location) as wc:
        assert wc.event_count() == count
        assert wc.list_work_items()[0]["title"] == TITLE


def test_a_key_does_not_open_a_store_that_is_not_encrypted(
    location: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)
    _fill(location, monkeypatch)
    monkeypatch.setenv(KEY_ENV, new_key())
    with pytest.raises(StoreKeyRefused, match="not encrypted"):
        WorkCenter.open(location)


@pytest.mark.parametrize("bad", ["not base64!", base64.b64encode(b"short").decode()])
def test_a_malformed_key_is_invalid_input_before_any_store_is_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bad: str
) -> None:
    monkeypatch.setenv(KEY_ENV, bad)
    with pytest.raises(InvalidInput, match="16, 24 or 32-byte"):
        WorkCenter.open(tmp_path / "never.db")
    assert not (tmp_path / "never.db").exists()


def test_the_demo_runs_encrypted_and_the_cli_refuses_without_the_key(
    location: str, key: str
) -> None:
    runner = CliRunner()
    demo = runner.invoke(cli, ["--db", location, "demo"])
    assert demo.exit_code == 0, demo.output
    listed = runner.invoke(cli, ["--db", location, "list"])
    assert listed.exit_code == 0 and "done" in listed.output
    refused = runner.invoke(cli, ["--db", location, "list"], env={KEY_ENV: ""})
    assert refused.exit_code == 2
    assert refused.output.startswith("StoreKeyRefused: the store at")
    assert "Traceback" not in refused.output


def test_rekey_copies_the_store_under_a_new_key(
    location: str, key: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _fill(location, monkeypatch)
    with WorkCenter.open(location) as wc:
        items = wc.list_work_items()
        details = {row["id"]: wc.detail(row["id"]) for row in items}
        count = wc.event_count()
    new = new_key()
    target = str(tmp_path / "rekeyed.db")
    done = CliRunner().invoke(
        cli,
        ["--db", location, "rekey", "--to", target, "--json"],
        env={"WORKCENTER_NEW_CIPHER_KEY": new},
    )
    assert done.exit_code == 0, done.output
    assert '"events": ' + str(count) in done.output.replace("\n", " ").replace("  ", " ")
    with pytest.raises(StoreKeyRefused):
        WorkCenter.open(target)  # the old key does not open the new store
    monkeypatch.setenv(KEY_ENV, new)
    with WorkCenter.open(target) as wc:
        assert wc.list_work_items() == items
        assert {row["id"]: wc.detail(row["id"]) for row in items} == details
        assert wc.event_count() == count
    assert not _holds(target, TITLE)
    # A second copy into a store that is not empty is refused, and a copy into itself
    # says so (not that the key does not open it), however its path is written.
    again = CliRunner().invoke(
        cli,
        ["--db", location, "rekey", "--to", target],
        env={KEY_ENV: key, "WORKCENTER_NEW_CIPHER_KEY": new},
    )
    assert again.exit_code == 2 and "is not empty" in again.output
    itself = str(tmp_path / "." / "rekeyed.db")
    again = CliRunner().invoke(
        cli, ["--db", target, "rekey", "--to", itself], env={"WORKCENTER_NEW_CIPHER_KEY": ""}
    )
    assert again.exit_code == 2 and "is the store being copied" in again.output
    with WorkCenter.open(target) as wc:
        assert wc.event_count() == count
