"""Every layer imports only what is below it.

The domain imports nothing of the others nor the persistence library; the read
models (projections) import only the domain; the service layer (the modules at
the package's top) imports no adapter except in its composition root, the
bootstrap; adapters may import anything. The facade exposes none of the ledger
verbs the Coordinator drives under its turn fence.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from workcenter.application import WorkCenter
from workcenter.budget import BudgetCommands

PACKAGE = Path(__file__).parent.parent / "workcenter"
SERVICE_MODULES = {p.stem for p in PACKAGE.glob("*.py")} - {"__init__"}
COMPOSITION_ROOTS = {"bootstrap.py", "__init__.py"}


def _imports(source: str) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            if node.module == "workcenter":  # `from workcenter import store`
                names.update(f"workcenter.{alias.name}" for alias in node.names)
    return names


def _forbidden(layer: str, name: str) -> tuple[str, ...]:
    service = tuple(f"workcenter.{m}" for m in sorted(SERVICE_MODULES))
    if layer == "domain":
        return ("workcenter.adapters", "workcenter.projections", "eventsourcing", *service)
    if layer == "projections":
        return ("workcenter.adapters", *service)
    if layer == "service" and name not in COMPOSITION_ROOTS:
        return ("workcenter.adapters", "eventsourcing.sqlite", "eventsourcing.postgres")
    return ()


def violations(layer: str, files: list[Path]) -> dict[str, list[str]]:
    found = {}
    for f in files:
        forbidden = _forbidden(layer, f.name)
        bad = sorted(n for n in _imports(f.read_text()) if forbidden and n.startswith(forbidden))
        if bad:
            found[f.name] = bad
    return found


def layer_files(layer: str) -> list[Path]:
    folder = PACKAGE if layer == "service" else PACKAGE / layer
    return sorted(folder.glob("*.py"))


@pytest.mark.parametrize("layer", ["domain", "projections", "service"])
def test_each_layer_imports_only_what_is_below_it(layer: str) -> None:
    files = layer_files(layer)
    assert len(files) > 5
    assert violations(layer, files) == {}


@pytest.mark.parametrize(
    ("layer", "name", "planted"),
    [
        ("domain", "x.py", "from eventsourcing.application import Application"),
        ("domain", "x.py", "from workcenter.projections.detail import Detail"),
        ("domain", "x.py", "from workcenter import repository"),
        ("projections", "x.py", "from workcenter.application import WorkCenter"),
        ("projections", "x.py", "import workcenter.adapters.persistence"),
        ("service", "x.py", "from workcenter.adapters.recorders import SNAPSHOTS"),
        ("service", "x.py", "from eventsourcing.sqlite import SQLiteCursor"),
    ],
)
def test_a_planted_violation_is_caught(tmp_path: Path, layer: str, name: str, planted: str) -> None:
    module = tmp_path / name
    module.write_text(f"{planted}\n")
    expected = sorted(_imports(planted) - {"workcenter"})
    assert violations(layer, [*layer_files(layer), module]) == {name: expected}


def test_the_composition_root_may_name_adapters(tmp_path: Path) -> None:
    root = tmp_path / "bootstrap.py"
    root.write_text("from workcenter.adapters.recorders import OneCommitSQLiteRecorder\n")
    assert violations("service", [root]) == {}


def coordinator_verbs_exposed(facade: type) -> list[str]:
    """The budget handler's Coordinator verbs (named for it) that ``facade`` exposes."""
    verbs = [n for n in dir(BudgetCommands) if not n.startswith("_") and "coordinat" in n]
    assert len(verbs) == 4  # a turn's request, its settlement, a failure, the backoff gate
    return sorted(n for n in verbs if hasattr(facade, n))


def test_the_facade_does_not_expose_the_turn_fenced_ledger_verbs() -> None:
    """The Coordinator drives the ledger's Coordinator side under its mailbox claim and
    turn fence; a public verb would bypass the fence (ADR-0039)."""
    assert coordinator_verbs_exposed(WorkCenter) == []


def test_a_fenced_ledger_verb_planted_on_the_facade_is_caught() -> None:
    class Planted(WorkCenter):
        def record_coordinator_failure(self) -> None: ...

    assert coordinator_verbs_exposed(Planted) == ["record_coordinator_failure"]
