"""Every CLI verb under arbitrary and adversarial arguments: each invocation ends with exit
0, or with exit 2 and either one ``ErrorName: message`` line or click's usage error; never a
traceback, and a refused invocation writes no event."""

from __future__ import annotations

import re
import sqlite3
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner
from conftest import action_spec, create_dynamic, plan
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workcenter.adapters.cli import cli
from workcenter.application import Claim, WorkCenter

REFUSAL = re.compile(r"^[A-Z][A-Za-z]+: \S")


def malformed(claim: Claim) -> Any:
    return 42


Verb = tuple[str, ...]


def _verbs(group: click.Group, path: Verb = ()) -> Iterator[tuple[Verb, click.Command]]:
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            yield from _verbs(command, (*path, name))
        else:
            yield (*path, name), command


VERBS = dict(_verbs(cli))
# Arguments every run of these verbs gets first, so that a run ends and runs only known code:
# the worker loads no executor named by the fuzzer and stops when idle; the runner and the
# Coordinator run once.
FIXED: dict[tuple[str, ...], list[str]] = {
    ("worker",): ["--exit-when-idle", "--max-runs", "2", "--poll", "0.01"],
    ("projections", "run"): ["--once"],
    ("coordinate",): ["--once"],
}
EXECUTORS = [
    "workcenter.adapters.executors:echo",
    f"{__name__}:malformed",
    "no_colon_here",
    "workcenter.adapters.executors:missing",
    "workcenter_no_such_module:x",
]
BANNED = {"--executor", "--poll"}  # the worker's fixed choices above stay the fuzzer's only ones


def _options(command: click.Command) -> list[str]:
    return sorted(
        name
        for param in command.params
        if isinstance(param, click.Option)
        for name in param.opts
        if name not in BANNED
    )


ADVERSARIAL = [
    "",
    " ",
    "-",
    "--",
    "-1",
    "0",
    "1",
    "999999999999999999999999",
    "1e12",
    "nan",
    "inf",
    "00000000",
    "00000000-0000-0000-0000-000000000000",
    "not-a-uuid",
    "\x1b[31mred",
    "\ud800",
    "é" * 3,
    "bogus",
    "../etc/passwd",
    "--json",
    "-h",
]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    directory = tmp_path_factory.mktemp("fuzz")
    db = directory / "fuzz.db"
    with WorkCenter.open(db) as wc:
        item = create_dynamic(wc)
        plan(wc, item.id, action_spec(), action_spec("implement", "Fix it", workspace_mode="write"))
        ledger = wc.ledger(item.id)
        action_id = wc.work_item(item.id).plan[0].action_id
    ids = [str(item.id), str(item.id)[:8], str(action_id), str(action_id)[:8]]
    versions = [str(v) for v in (item.version, ledger.version, 1, 2)]
    # A fuzzed `--db` names a file in here, never in the working tree.
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(directory)
        yield {"db": str(db), "values": ids + versions}


def _events(db: str) -> int:
    conn = sqlite3.connect(db)
    try:
        return int(conn.execute("SELECT COUNT(*) FROM stored_events").fetchone()[0])
    finally:
        conn.close()


@st.composite
def invocations(draw: st.DrawFn, values: list[str]) -> list[str]:
    path = draw(st.sampled_from(sorted(VERBS)))
    command = VERBS[path]
    token = st.one_of(
        st.sampled_from(_options(command) or ["--json"]),
        st.sampled_from(values),
        st.sampled_from(ADVERSARIAL),
        st.text(max_size=12),
        st.integers(min_value=-(2**70), max_value=2**70).map(str),
    ).filter(lambda t: t not in BANNED)
    args = draw(st.lists(token, max_size=6))
    if path == ("worker",):
        args = ["--executor", draw(st.sampled_from(EXECUTORS)), *args]
    return [*path, *FIXED.get(path, []), *args]


def _check(result: Any, args: list[str]) -> None:
    where = f"{args!r}\nstdout: {result.stdout[-2000:]}\nstderr: {result.stderr[-2000:]}"
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"{type(result.exception).__name__}: {result.exception}\n{where}")
    assert result.exit_code in (0, 2), where
    assert "Traceback" not in result.output, where
    if result.exit_code == 2:
        lines = result.stderr.strip().splitlines()
        usage = bool(lines) and lines[0].startswith(("Usage:", "Error:"))
        assert usage or (len(lines) == 1 and REFUSAL.match(lines[0])), where


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_every_verb_ends_cleanly_and_a_refusal_writes_nothing(
    store: dict[str, Any], data: st.DataObject
) -> None:
    args = data.draw(invocations(store["values"]))
    before = _events(store["db"])
    result = CliRunner().invoke(cli, ["--db", store["db"], *args])
    _check(result, args)
    if result.exit_code == 2:
        assert _events(store["db"]) == before, f"a refused {args!r} wrote events"


@pytest.mark.parametrize("db", ["missing/dir/x.db", ".", "\ud800.db", ""])
def test_odd_store_paths_are_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, db: str
) -> None:
    monkeypatch.chdir(tmp_path)
    for verb in (["list"], ["demo", "--json"], ["projections", "status"]):
        result = CliRunner().invoke(cli, ["--db", db, *verb], env={"WORKCENTER_DB": None})
        _check(result, verb)
        assert result.exit_code == 2, result.output
    assert list(tmp_path.iterdir()) == []


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
