"""Property (issue 8): no planted secret reaches a person.

A secret of each shape (provider keys, Bearer tokens, password and api key
assignments, AWS and GitHub keys, home directories, links hiding a credential in
an encoded value, once or twice) is planted, in varying surroundings, in every
free-text field a user, a Coordinator or an executor can set: title, goal,
criteria, Action briefs, Run summaries, evidence labels and refs, tool output,
outputs, waiting reasons, errors, guidance, answers and an executor's exception.
Then no detail DTO (at every step), no audit line (text and default JSON), no
``progress`` output (text and JSON), no ``worker`` line and no ``list`` or
``show`` table may contain it.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from click.testing import CliRunner
from conftest import BOOT_ID, action_spec, claim, plan, report
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from workcenter.adapters.cli import cli
from workcenter.application import Claim, WorkCenter

Shape = Callable[[str], str]
SHAPES: dict[str, Shape] = {
    "provider key": lambda core: f"sk-{core}",
    "bearer": lambda core: f"Bearer {core}",
    "password": lambda core: f"password={core}",
    "api key": lambda core: f"api_key: {core}",
    "aws key": lambda core: f"AKIA{core.upper()}",
    "github token": lambda core: f"ghp_{core}",
    "linux home": lambda core: f"/home/{core}/notes.txt",
    "mac home": lambda core: f"/Users/{core}",
    "nested link": lambda core: f"https://app.example/cb?next=%2Fcb%3Faccess_token%3D{core}",
    "twice nested link": lambda core: (
        f"https://app.example/cb?next=%252Fcb%253Faccess_token%253D{core}"
    ),
}
BEFORE = st.sampled_from(["", "see ", "(", "'", '"', "[", "<", "x ", ", "])
AFTER = st.sampled_from(["", " done", ")", "'", '"', "]", ">", ".", ",", ";"])
# Cores follow a fixed prefix no id, time or word of the output can contain ("Zq"
# is not hex); the alphabet leaves out look-alikes.
ALPHABET = "abcdefghijkmnopqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789"
CORES = st.text(ALPHABET, min_size=12, max_size=16)
WIDE = {"COLUMNS": "10000"}  # no wrapping: a secret split over two lines would hide a leak

PLANTED: dict[str, str] = {}
SHM = Path("/dev/shm")
SCRATCH = str(SHM) if SHM.is_dir() and os.access(SHM, os.W_OK) else None  # fsync is slow


def leaky_executor(claim: Claim) -> Any:
    raise RuntimeError(f"executor failed: {PLANTED['text']}")


def _cli(db: Path, *args: str) -> str:
    result = CliRunner().invoke(cli, ["--db", str(db), *args], env=WIDE)
    assert result.exit_code == 0, result.output
    return result.output


def _finish(wc: WorkCenter, outcome: str, criteria: tuple[str, ...], s: str, **fields: Any) -> None:
    wc.finish_run(
        claim(wc),
        report(
            outcome,
            criteria=criteria,
            summary=f"Summary {s}",
            response=f"Response {s}",
            evidence=[
                f"Label {s}",
                {"kind": "link", "label": f"Link {s}", "ref": s},
                {"tool": f"Tool output {s}", "isError": True},
            ],
            outputs=[
                {"kind": "link", "label": f"Output {s}", "ref": s},
                {"kind": "file", "label": f"File {s}", "ref": "src/app.py"},
            ],
            **fields,
        ),
    )


def _scenario(db: Path, s: str, details: list[dict[str, Any]]) -> tuple[UUID, str]:
    """Every free-text field gets ``s``; the detail DTO is taken after each step."""
    criteria = (f"Criterion {s}", "Docs updated")
    spec = action_spec(
        objective=f"Objective {s}",
        approach=f"Approach {s}",
        expectedOutcome=f"Outcome {s}",
        maxAttempts=8,
    )
    with WorkCenter.open(db, boot_id=BOOT_ID) as wc:
        item = wc.create_work_item(
            title=f"Title {s}",
            goal=f"Goal {s}",
            acceptance_criteria=list(criteria),
            delivery_target="response",
            start=True,
            limits={"max_action_attempts": 8},  # the scenario runs one Action five times
        )
        plan(wc, item.id, spec, rationale=f"Rationale long enough {s}")
        details.append(wc.detail(item.id))
    PLANTED["text"] = s
    worker = _cli(
        db,
        "worker",
        "--executor",
        f"{__name__}:leaky_executor",
        "--max-runs",
        "1",
        "--exit-when-idle",
    )
    with WorkCenter.open(db, boot_id=BOOT_ID) as wc:
        (first,) = wc.actions(wc.work_item(item.id)).values()
        details.append(wc.detail(item.id))
        _finish(wc, "waiting", criteria, s, waitingReason=f"Which one? {s}")
        details.append(wc.detail(item.id))
        version = wc.work_item(item.id).version
        wc.guide(item.id, first.id, expected_version=version, guidance=f"Guidance {s}")
        _finish(wc, "failed", criteria, s, error=f"Error {s}")
        details.append(wc.detail(item.id))
        version = wc.work_item(item.id).version
        wc.retry(item.id, first.id, expected_version=version, answer=f"Answer {s}")
        _finish(wc, "completed", criteria, s)
        details.append(wc.detail(item.id))
        plan(wc, item.id, spec, rationale=f"Rationale long enough {s}")
        _finish(wc, "failed", criteria, s, error=f"Second error {s}")
        details.append(wc.detail(item.id))
    return item.id, worker


@pytest.mark.parametrize("shape", sorted(SHAPES))
# Each example is a whole scenario and six CLI runs: few of them, and no slow shrinking
# (a failure names its shape, field and planted text anyway).
@settings(
    max_examples=4,
    deadline=None,
    derandomize=True,
    database=None,
    phases=(Phase.explicit, Phase.generate),
)
@given(core=CORES, before=BEFORE, after=AFTER)
def test_no_dto_audit_line_progress_or_worker_line_shows_a_planted_secret(
    shape: str, core: str, before: str, after: str
) -> None:
    marker = f"Zq{core}"
    planted = before + SHAPES[shape](marker) + after
    secrets = (marker, marker.upper())
    with tempfile.TemporaryDirectory(prefix="workcenter-secrets-", dir=SCRATCH) as directory:
        db = Path(directory) / "workcenter.db"
        details: list[dict[str, Any]] = []
        item_id, worker = _scenario(db, planted, details)
        at = str(details[-1]["planRevision"])  # the item's version: its latest state
        shown = {
            "worker": worker,
            "details": json.dumps(details),
            "audit": _cli(db, "audit", str(item_id)),
            "audit --json": _cli(db, "audit", str(item_id), "--json"),
            "audit --at": _cli(db, "audit", str(item_id), "--at", at),
            "audit --at --json": _cli(db, "audit", str(item_id), "--at", at, "--json"),
            "progress": _cli(db, "progress", str(item_id)),
            "progress --json": _cli(db, "progress", str(item_id), "--json"),
            "list": _cli(db, "list"),
            "show": _cli(db, "show", str(item_id)),
        }
        raw = _cli(db, "audit", str(item_id), "--json", "--raw")
    assert any(secret in raw for secret in secrets)  # planted: its absence below means something
    leaks = [where for where, text in shown.items() if any(s in text for s in secrets)]
    assert not leaks, f"{shape} planted as {planted!r} leaks in {', '.join(leaks)}"
