"""Issue 24, ADR-0050: a store records its encryption mode when it is created, and
every open is checked against it, so a fresh store never takes events under two
modes: a keyless open of an encrypted store, another key, or a key for a plain
store is ``StoreKeyRefused`` before anything is written, on both databases and in
every CLI verb (one line, exit status 2, no traceback)."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from uuid import UUID

import pytest
from click.testing import CliRunner
from conftest import BACKENDS

from workcenter.adapters.cipher import KEY_ENV, MARKER_TABLE, StoreKeyRefused
from workcenter.adapters.cli import cli
from workcenter.application import WorkCenter
from workcenter.projections import sql


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


def marker(wc: WorkCenter) -> tuple[str, bytes | None]:
    with sql.transaction(wc.store.factory.datastore, commit=False) as c:  # type: ignore[attr-defined]
        c.execute(f"SELECT mode, probe FROM {MARKER_TABLE}")
        rows = c.fetchall()
    assert len(rows) == 1
    return rows[0][0], None if rows[0][1] is None else bytes(rows[0][1])


def create(wc: WorkCenter) -> UUID:
    return wc.create_work_item(
        title="Secret plan",
        goal="Keep it secret",
        acceptance_criteria=["Nobody reads it"],
        delivery_target="response",
        start=True,
    ).id


def open_with(location: str, monkeypatch: pytest.MonkeyPatch, key: str | None) -> WorkCenter:
    if key:
        monkeypatch.setenv(KEY_ENV, key)
    else:
        monkeypatch.delenv(KEY_ENV, raising=False)
    return WorkCenter.open(location)


@pytest.mark.parametrize("created_with", ["key", "none"])
def test_a_fresh_store_refuses_the_other_mode_before_any_event(
    location: str, monkeypatch: pytest.MonkeyPatch, created_with: str
) -> None:
    """The issue's case: the store is new and empty when a process with the key and
    one without both open it. The first open decides; the other is refused."""
    key = new_key()
    first = open_with(location, monkeypatch, key if created_with == "key" else None)
    try:
        mode = marker(first)
        assert mode[0] == ("aes" if created_with == "key" else "none")
        assert first.event_count() == 0
        others = [new_key(), None] if created_with == "key" else [new_key()]
        for other in others:
            with pytest.raises(StoreKeyRefused):
                open_with(location, monkeypatch, other)
        item = create(first)  # the first process writes on, in its mode
        count = first.event_count()
        for other in others:
            with pytest.raises(StoreKeyRefused):
                open_with(location, monkeypatch, other)
        assert first.event_count() == count and marker(first) == mode
        assert first.work_item(item).title == "Secret plan"
    finally:
        first.close()
    again = open_with(location, monkeypatch, key if created_with == "key" else None)
    with again:
        assert [row["title"] for row in again.list_work_items()] == ["Secret plan"]


def test_a_store_from_before_the_marker_is_judged_by_its_events_then_marked(
    location: str, key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with WorkCenter.open(location) as wc:
        create(wc)
        with sql.transaction(wc.store.factory.datastore, commit=True) as c:  # type: ignore[attr-defined]
            c.execute(f"DROP TABLE {MARKER_TABLE}")
    with pytest.raises(StoreKeyRefused, match="is encrypted"):
        open_with(location, monkeypatch, None)
    with pytest.raises(StoreKeyRefused, match="does not open"):
        open_with(location, monkeypatch, new_key())
    with open_with(location, monkeypatch, key) as wc:
        assert marker(wc)[0] == "aes"
        assert wc.list_work_items()[0]["title"] == "Secret plan"


VERBS = [
    ["list"],
    ["show", "{id}"],
    ["history", "{id}"],
    ["progress", "{id}"],
    ["budget", "show", "{id}"],
    ["conversation", "{id}"],
    ["audit", "{id}"],
    ["audit", "verify"],
    ["projections", "status"],
    ["projections", "rebuild"],
    ["message", "{id}", "hello"],
    ["coordinate", "--once"],
    ["worker", "--executor", "workcenter.adapters.executors:echo", "--exit-when-idle"],
    ["demo"],
    ["rekey", "--to", "{target}"],
]


@pytest.mark.parametrize("encrypted", [True, False])
def test_every_verb_refuses_the_other_mode_with_one_line(
    location: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, encrypted: bool
) -> None:
    key = new_key()
    with open_with(location, monkeypatch, key if encrypted else None) as wc:
        item = create(wc)
        count = wc.event_count()
        mode = marker(wc)
    wrong = [{KEY_ENV: ""}, {KEY_ENV: new_key()}] if encrypted else [{KEY_ENV: new_key()}]
    runner = CliRunner()
    for env in wrong:
        for verb in VERBS:
            args = [a.format(id=item, target=tmp_path / "copy.db") for a in verb]
            # rekey's new key set (empty: a plain copy), so that the old key is what fails.
            result = runner.invoke(
                cli, ["--db", location, *args], env={**env, "WORKCENTER_NEW_CIPHER_KEY": ""}
            )
            shown = f"{args}: {result.output}"
            assert result.exit_code == 2, shown
            assert result.output.startswith("StoreKeyRefused: "), shown
            assert len(result.output.strip().splitlines()) == 1, shown
            assert "Traceback" not in result.output, shown
    assert not (tmp_path / "copy.db").exists()
    with open_with(location, monkeypatch, key if encrypted else None) as wc:
        assert wc.event_count() == count and marker(wc) == mode


CLI = "from workcenter.adapters.cli import main; main()"


def test_the_real_cli_prints_no_traceback(location: str, key: str) -> None:
    with WorkCenter.open(location) as wc:
        item = create(wc)
    env = os.environ | {KEY_ENV: ""}
    for verb in (["show", str(item)], ["projections", "rebuild"]):
        done = subprocess.run(
            [sys.executable, "-c", CLI, "--db", location, *verb],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 2, done.stderr
        assert done.stderr.startswith("StoreKeyRefused: the store at"), done.stderr
        assert "Traceback" not in done.stderr + done.stdout


RACER = """
import sys, time
from pathlib import Path
from workcenter.application import WorkCenter
from workcenter.adapters.cipher import StoreKeyRefused
store, go = sys.argv[1:3]
while not Path(go).exists():
    time.sleep(0.005)
try:
    with WorkCenter.open(store) as wc:
        wc.create_work_item(title="Raced", goal="g", acceptance_criteria=["c"],
                            delivery_target="response")
except StoreKeyRefused:
    print("refused")
else:
    print("wrote")
"""


def test_processes_creating_one_store_at_once_agree_on_its_mode(
    location: str, tmp_path: Path
) -> None:
    """Two processes with the key and two without open a store that does not exist
    yet at the same moment: one mode wins, the other side is refused, and every
    event in the store reads in the winner's mode."""
    key = new_key()
    go = tmp_path / "go"
    envs = [os.environ | {KEY_ENV: k} for k in (key, key, "", "")]
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", RACER, location, str(go)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for env in envs
    ]
    time.sleep(1.0)
    go.touch()
    outcomes = []
    for process in processes:
        out, err = process.communicate(timeout=60)
        assert process.returncode == 0, err
        outcomes.append(out.strip())
    keyed, plain = outcomes[:2], outcomes[2:]
    assert {tuple(keyed), tuple(plain)} == {("wrote", "wrote"), ("refused", "refused")}
    winner = key if keyed[0] == "wrote" else ""
    os.environ[KEY_ENV] = winner
    try:
        with WorkCenter.open(location) as wc:
            assert [row["title"] for row in wc.list_work_items()] == ["Raced", "Raced"]
            assert marker(wc)[0] == ("aes" if winner else "none")
    finally:
        del os.environ[KEY_ENV]
