"""Each CLI process names its PostgreSQL connections by its verb (``PGAPPNAME``), so
``pg_stat_activity`` tells a worker from a runner or ``serve``: every connection said ''
(found by acceptance testing, ADR-0137). An operator's own ``PGAPPNAME`` is kept, and a
process that calls the verbs itself keeps its environment as it was."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

from workcenter.adapters.cli import cli
from workcenter.application import WorkCenter

SCRIPT = """
import os, sys
from workcenter.adapters import cli
sys.argv[0] = "workcenter"
try:
    cli.main()
except SystemExit:
    pass
finally:
    print("PGAPPNAME=" + os.environ.get("PGAPPNAME", ""), flush=True)
"""


def named(args: list[str], **env: str) -> str:
    environ = {k: v for k, v in os.environ.items() if k != "PGAPPNAME"} | env
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, *args], capture_output=True, text=True, env=environ
    )
    return done.stdout.strip().splitlines()[-1].removeprefix("PGAPPNAME=")


def test_a_verb_names_its_connections(tmp_path: object) -> None:
    assert named(["--version"]) == ""
    assert named(["list", "--db", f"{tmp_path}/none.db"]) == "workcenter list"
    assert named(["--db", f"{tmp_path}/none.db", "list"]) == "workcenter list"
    assert named(["list", "--db", f"{tmp_path}/none.db"], PGAPPNAME="billing-agents") == (
        "billing-agents"
    )


@pytest.fixture
def backend() -> str:
    return "postgresql"


def test_postgresql_sees_the_name(location: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The store's pooled connections take the name from the environment."""
    monkeypatch.setenv("PGAPPNAME", "workcenter worker")
    with WorkCenter.open(location) as wc:
        datastore = wc.store.recorder.datastore  # type: ignore[attr-defined]
        with datastore.transaction(commit=False) as c:
            c.execute("SELECT application_name FROM pg_stat_activity WHERE pid = pg_backend_pid()")
            assert c.fetchone()["application_name"] == "workcenter worker"


def test_verbs_called_in_a_process_of_its_own_leave_its_environment(
    tmp_path: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PGAPPNAME", raising=False)
    CliRunner().invoke(cli, ["list", "--db", f"{tmp_path}/none.db"])
    assert "PGAPPNAME" not in os.environ
