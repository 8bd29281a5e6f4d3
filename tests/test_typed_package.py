"""An embedding service type-checks against Workcenter as installed (ADR-0138).

The package ships ``py.typed``: without it mypy treated every name of ``workcenter`` as
``Any`` in an embedder's code (found by an embedder checking with ``mypy --strict``).
Here the package is installed as a user installs it (a regular, not editable, install
into a directory of its own), and an embedder's code that annotates with the types
``workcenter`` exports is checked with ``--strict``."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

EMBEDDER = """\
from collections.abc import Mapping
from typing import Any

from workcenter import (
    ActionState,
    Claim,
    Executor,
    GoalProgress,
    InvalidInput,
    WorkCenter,
    WorkcenterError,
    WorkerStats,
    WorkItemState,
    run_worker,
)


def execute(claim: Claim) -> Mapping[str, Any]:
    return {"status": "completed", "summary": claim.brief.objective}


def serve(path: str) -> GoalProgress:
    executor: Executor = execute
    with WorkCenter.open(path) as wc:
        item: WorkItemState = wc.create_work_item(title="t", goal="g", start=True)
        assert item.current_action_id is not None
        action: ActionState = wc.action(item.current_action_id)
        stats: WorkerStats = run_worker(wc, executor, worker="w", max_runs=1)
        try:
            wc.cancel(item.id, expected_version=-1)
        except InvalidInput:
            pass
        except WorkcenterError:
            pass
        print(action.status, stats.finished)
        reveal_type(wc.claim_next("w"))
        return wc.goal_progress(item.id)
"""


def test_an_embedders_code_type_checks_strictly_against_the_installed_package(
    tmp_path: Path,
) -> None:
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "workcenter_launcher.py"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(
        ROOT / "workcenter", source / "workcenter", ignore=shutil.ignore_patterns("__pycache__")
    )
    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", site, source],
        check=True,
        capture_output=True,
    )
    assert (site / "workcenter" / "py.typed").exists()
    (tmp_path / "embedder.py").write_text(EMBEDDER)
    checked = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "embedder.py"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(site)},
        capture_output=True,
        text=True,
    )
    assert checked.returncode == 0, checked.stdout
    assert 'Revealed type is "workcenter.service_layer.handlers.claim.Claim | None"' in (
        checked.stdout
    )
