"""The domain imports nothing of adapters, projections or the persistence library."""

from __future__ import annotations

import ast
from pathlib import Path

DOMAIN = Path(__file__).parent.parent / "workcenter" / "domain"
FORBIDDEN = (
    "workcenter.adapters",
    "workcenter.projections",
    "workcenter.application",
    "eventsourcing",
)


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_domain_imports_no_infrastructure() -> None:
    files = sorted(DOMAIN.glob("*.py"))
    assert len(files) > 5
    offending = {f.name: sorted(n for n in _imports(f) if n.startswith(FORBIDDEN)) for f in files}
    assert {name: names for name, names in offending.items() if names} == {}
