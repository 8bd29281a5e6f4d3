"""The linear / dynamic differences live in the mode policy, not in the commands."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import get_args

from workcenter.domain import modes
from workcenter.domain import work_item as wi

DOMAIN = Path(__file__).parent.parent / "workcenter" / "domain"


def mode_branches(source: str) -> list[int]:
    """Lines comparing something with a mode's name (``item.mode == "linear"``)."""
    names = set(get_args(wi.Mode))
    return [
        node.lineno
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Compare)
        and any(
            isinstance(o, ast.Constant) and o.value in names for o in [node.left, *node.comparators]
        )
    ]


def test_every_mode_has_a_policy() -> None:
    assert set(modes.POLICIES) == set(get_args(wi.Mode))
    assert all(p.mode == name for name, p in modes.POLICIES.items())


def test_no_command_branches_on_the_mode() -> None:
    found = {
        f.name: lines
        for f in sorted(DOMAIN.glob("*.py"))
        if f.name != "modes.py" and (lines := mode_branches(f.read_text()))
    }
    assert found == {}


def test_a_planted_mode_branch_is_found() -> None:
    assert mode_branches('if item.mode == "linear":\n    pass\n') == [1]
    assert mode_branches('x = () if mode != "linear" else stages\n') == [1]
