"""The OpenAPI document is the contract (ADR-0066, ADR-0067): Schemathesis runs every
check it has, in every phase (examples, coverage, fuzzing, stateful), against a live
``workcenter serve`` on a demo store with an API token, and finds nothing.

Its JUnit report is kept at ``.ci/artifacts/schemathesis/junit.xml`` and its output
beside it (``output.txt``); the output is printed too when the run fails.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from live_server import environment, serving

ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
REPORT = ROOT / ".ci" / "artifacts" / "schemathesis"
ST = str(Path(sys.executable).with_name("st"))
TOKEN = "contract-test-token-not-a-secret"
# Bounded: a few dozen examples an operation, one seed, so a run is the same each time
# and takes about two minutes on two cores.
EXAMPLES = 25
SEED = 19


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``workcenter serve`` with an API token on a store the demo filled."""
    db = tmp_path_factory.mktemp("contract") / "demo.db"
    env = environment(WORKCENTER_API_TOKEN=TOKEN)
    subprocess.run(
        [str(Path(sys.executable).with_name("workcenter")), "--db", str(db), "demo"],
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    with serving(db, env, token=TOKEN) as url:
        yield url


def test_schemathesis_finds_no_contract_failure(demo: str) -> None:
    REPORT.mkdir(parents=True, exist_ok=True)
    command = [
        ST,
        "--config-file",
        str(HERE / "schemathesis.toml"),
        "run",
        f"{demo}/openapi.json",
        "--checks",
        "all",
        "--phases",
        "examples,coverage,fuzzing,stateful",
        "--max-examples",
        str(EXAMPLES),
        "--seed",
        str(SEED),
        "--generation-database",
        "none",
        "--header",
        f"Authorization: Bearer {TOKEN}",
        "--report",
        "junit",
        "--report-junit-path",
        str(REPORT / "junit.xml"),
        "--no-color",
    ]
    env = os.environ | {
        "SCHEMATHESIS_HOOKS": "schemathesis_hooks",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])),
    }
    started = time.monotonic()
    run = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    took = time.monotonic() - started
    (REPORT / "output.txt").write_text(run.stdout + run.stderr)
    assert run.returncode == 0, f"Schemathesis failed after {took:.0f} s:\n{run.stdout[-20000:]}"
    generated = re.search(r"(\d+) generated", run.stdout)
    # A run that tested nothing would pass too: it must have sent requests to every operation.
    assert generated is not None and int(generated[1]) >= 1000, run.stdout[-5000:]
    assert "Tested: 30" in run.stdout, run.stdout[-5000:]
