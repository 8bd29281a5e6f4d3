"""Issue 24, ADR-0050: ``rekey`` while a writer keeps writing copies the store as it
was at one position, says so and exits 1, instead of exiting 0 with a copy of
whatever it happened to read; with the writers stopped it copies everything and
exits 0."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import postgres
import pytest
from conftest import BACKENDS

from workcenter.adapters.cipher import KEY_ENV
from workcenter.adapters.store_copy import NEW_KEY_ENV
from workcenter.application import WorkCenter

CLI = "from workcenter.adapters.cli import main; main()"
WRITER = """
import sys
from pathlib import Path
from workcenter.application import WorkCenter
store, stop, started = sys.argv[1:4]
with WorkCenter.open(store, create=False) as wc:
    n = 0
    while not Path(stop).exists():
        wc.create_work_item(title=f"Late {n}", goal="g", acceptance_criteria=["c"],
                            delivery_target="response", start=True)
        n += 1
        if n == 5:
            Path(started).touch()
"""


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def target(backend: str, tmp_path: Path) -> Iterator[str]:
    if backend == "sqlite":
        yield str(tmp_path / "rekeyed.db")
        return
    with postgres.fresh_schema("wcrk") as url:
        yield url


def new_key() -> str:
    return base64.b64encode(os.urandom(32)).decode()


def seed(location: str, items: int) -> None:
    with WorkCenter.open(location) as wc:
        for n in range(items):
            wc.create_work_item(
                title=f"Early {n}",
                goal="g",
                acceptance_criteria=["c"],
                delivery_target="response",
                start=True,
            )


def rekey(location: str, target: str, old: str, new: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", CLI, "--db", location, "rekey", "--to", target, "--json"],
        env=os.environ | {KEY_ENV: old, NEW_KEY_ENV: new},
        capture_output=True,
        text=True,
        timeout=120,
    )


def events(location: str, key: str, upto: int | None = None) -> list[tuple[str, int, str]]:
    os.environ[KEY_ENV] = key
    try:
        with WorkCenter.open(location, create=False) as wc:
            recorder = wc.store.recorder
            found = recorder.select_notifications(start=None, limit=1_000_000, stop=upto)
            return [(n.originator_id.hex, n.originator_version, n.topic) for n in found]
    finally:
        del os.environ[KEY_ENV]


def test_rekey_under_a_running_writer_copies_to_one_position_and_says_so(
    location: str, target: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old, new = new_key(), new_key()
    monkeypatch.setenv(KEY_ENV, old)
    seed(location, 80)
    monkeypatch.delenv(KEY_ENV)
    stop, started = tmp_path / "stop", tmp_path / "started"
    with ExitStack() as stack:
        writer = subprocess.Popen(
            [sys.executable, "-c", WRITER, location, str(stop), str(started)],
            env=os.environ | {KEY_ENV: old},
            stderr=subprocess.PIPE,
        )
        stack.callback(writer.kill)
        deadline = time.monotonic() + 60
        while not started.exists():
            assert writer.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        done = rekey(location, target, old, new)
        stop.touch()
        writer.wait(timeout=30)
        assert writer.returncode == 0, writer.stderr.read() if writer.stderr else ""
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    report = json.loads(done.stdout)
    assert report["complete"] is False and report["source_head"] > report["position"]
    assert done.stderr.startswith("incomplete: writers added")
    assert f"as it was at position {report['position']}" in done.stderr
    # The copy holds exactly the source's events up to that position, in order.
    copied = events(target, new)
    assert copied == events(location, old, upto=report["position"])
    assert len(copied) == report["events"] < len(events(location, old))
    # Consistent: every copied item is whole, as the source has it.
    assert states(target, new) == {
        i: s for i, s in states(location, old).items() if i in copied_ids(copied)
    }


def copied_ids(copied: list[tuple[str, int, str]]) -> set[str]:
    return {e[0] for e in copied if e[2].endswith("WorkItemCreated")}


def states(location: str, key: str) -> dict[str, tuple[str, int, str]]:
    os.environ[KEY_ENV] = key
    try:
        with WorkCenter.open(location, create=False) as wc:
            found = {}
            for row in wc.list_work_items():
                item = wc.work_item(row["id"])
                found[item.id.hex] = (item.title, item.version, item.status)
            return found
    finally:
        del os.environ[KEY_ENV]


def test_rekey_with_the_writers_stopped_is_complete(
    location: str, target: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    old, new = new_key(), new_key()
    monkeypatch.setenv(KEY_ENV, old)
    seed(location, 5)
    monkeypatch.delenv(KEY_ENV)
    done = rekey(location, target, old, new)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["complete"] is True and report["position"] == report["source_head"]
    assert events(target, new) == events(location, old)
