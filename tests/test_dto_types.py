"""The DTO types hold the builders to their shapes (ADR-0071): mypy, with the project's
configuration, refuses a builder that sends an unknown key, leaves out a required one
or sends a value of the wrong type. What mypy sees of the real builders is checked by
the lint step; this shows the types can refuse at all."""

from __future__ import annotations

from pathlib import Path

from mypy import api

ROOT = Path(__file__).resolve().parent.parent

PLANTED = """
from workcenter.projections import dto_models as dtos


def unknown_key() -> dtos.ActionRef:
    return {"id": "a", "type": "t", "status": "ready", "unknownKey": 1}


def missing_key() -> dtos.ExecutionStats:
    return {"llmRequestCount": 0}


def wrong_type(entry: dtos.Failure) -> None:
    entry["failedAt"] = "yesterday"


def fine() -> dtos.Failure:
    return {"kind": "error", "failedAt": 0}
"""


def test_mypy_refuses_a_builder_that_strays(tmp_path: Path) -> None:
    planted = tmp_path / "planted.py"
    planted.write_text(PLANTED)
    out, err, status = api.run(
        ["--config-file", str(ROOT / "pyproject.toml"), "--no-error-summary", str(planted)]
    )
    assert status == 1, err
    errors = [line.split(": error: ")[1] for line in out.splitlines() if ": error: " in line]
    assert len(errors) == 3, out
    assert 'Extra key "unknownKey"' in errors[0]
    # mypy names the missing keys in no fixed order.
    assert errors[1].startswith("Missing keys (") and '"loopCount"' in errors[1]
    assert 'Value of "failedAt" has incompatible type "str"' in errors[2]
