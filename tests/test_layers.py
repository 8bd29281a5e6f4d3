"""Every layer imports only what is below it, and no modules import each other in a circle.

From the bottom: the domain imports nothing of the others nor the persistence
library; the read models (projections) import only the domain; the service layer
(``workcenter/service_layer/``) imports the domain and the read models, never an
adapter, the facade or the composition root; the adapters, the facade
(``application.py``) and the composition root (``bootstrap.py``) may import
anything. Imports under ``TYPE_CHECKING`` count: a circle a type checker needs is
still a circle a reader must untangle. The facade exposes none of the ledger verbs
the Coordinator drives under its turn fence.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from workcenter.application import WorkCenter
from workcenter.service_layer.handlers.resource_ledger import BudgetCommands

PACKAGE = Path(__file__).parent.parent / "workcenter"
LAYERS = ("domain", "projections", "service_layer", "adapters")
TOP = ("workcenter.application", "workcenter.bootstrap")


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def all_modules() -> dict[str, str]:
    """Every module of the package by dotted name, with its source."""
    return {module_name(p): p.read_text() for p in sorted(PACKAGE.rglob("*.py"))}


def _imports(source: str, known: set[str] | None = None) -> set[str]:
    """The dotted names ``source`` imports; ``from a import b`` names ``a.b`` when that
    is a module (of ``known``), else ``a``."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                dotted = f"{node.module}.{alias.name}"
                names.add(dotted if known is None or dotted in known else node.module)
    return names


def _forbidden(layer: str) -> tuple[str, ...]:
    above_service = ("workcenter.adapters", *TOP)
    if layer == "domain":
        return (
            "workcenter.projections",
            "workcenter.service_layer",
            "eventsourcing",
            *above_service,
        )
    if layer == "projections":
        return ("workcenter.service_layer", *above_service)
    if layer == "service_layer":
        return ("eventsourcing.sqlite", "eventsourcing.postgres", *above_service)
    return ()


def violations(layer: str, modules: dict[str, str]) -> dict[str, list[str]]:
    """For each module of ``layer``, the names it imports that the layer may not."""
    found = {}
    forbidden = _forbidden(layer)
    for name, source in modules.items():
        if not forbidden or not name.startswith(f"workcenter.{layer}."):
            continue
        bad = sorted(n for n in _imports(source) if n.startswith(forbidden))
        if bad:
            found[name] = bad
    return found


def import_circles(modules: dict[str, str]) -> list[list[str]]:
    """The groups of modules that import each other, directly or through others
    (strongly connected components of the import graph, Tarjan's algorithm)."""
    known = set(modules)
    graph = {name: _imports(source, known) & known - {name} for name, source in modules.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                circles.append(sorted(group))

    for name in sorted(graph):
        if name not in index:
            visit(name)
    return circles


@pytest.mark.parametrize("layer", ["domain", "projections", "service_layer"])
def test_each_layer_imports_only_what_is_below_it(layer: str) -> None:
    modules = all_modules()
    assert sum(name.startswith(f"workcenter.{layer}.") for name in modules) > 5
    assert violations(layer, modules) == {}


@pytest.mark.parametrize(
    ("layer", "planted"),
    [
        ("domain", "from eventsourcing.application import Application"),
        ("domain", "from workcenter.projections.detail import Detail"),
        ("domain", "from workcenter.service_layer import repository"),
        ("domain", "from workcenter.service_layer.handlers.run import RunCommands"),
        ("projections", "from workcenter.application import WorkCenter"),
        ("projections", "from workcenter.service_layer.ports import Clock"),
        ("projections", "import workcenter.adapters.persistence"),
        ("service_layer", "from workcenter.adapters.recorders import SNAPSHOTS"),
        ("service_layer", "from eventsourcing.sqlite import SQLiteCursor"),
        ("service_layer", "from workcenter import bootstrap"),
        ("service_layer", "from workcenter.application import WorkCenter"),
    ],
)
def test_a_planted_violation_is_caught(layer: str, planted: str) -> None:
    name = f"workcenter.{layer}.planted"
    modules = {**all_modules(), name: f"{planted}\n"}
    expected = sorted(_imports(planted) - {"workcenter"})
    assert violations(layer, modules) == {name: expected}


@pytest.mark.parametrize("root", ["bootstrap", "application"])
def test_the_facade_and_the_composition_root_may_name_adapters(root: str) -> None:
    modules = {f"workcenter.{root}": "from workcenter.adapters.recorders import SNAPSHOTS\n"}
    assert all(violations(layer, modules) == {} for layer in LAYERS)


def test_no_modules_import_each_other_in_a_circle() -> None:
    assert import_circles(all_modules()) == []


@pytest.mark.parametrize(
    ("module", "planted", "circle"),
    [
        # The circle this layout removed, planted back as it was (a type-only import).
        (
            "workcenter.domain.modes",
            "if TYPE_CHECKING:\n    from workcenter.domain.outcome import NormalisedOutcome\n",
            ["workcenter.domain.modes", "workcenter.domain.outcome"],
        ),
        (
            "workcenter.service_layer.handlers.claim",
            "from workcenter.service_layer.handlers.run import RunCommands\n",
            ["workcenter.service_layer.handlers.claim", "workcenter.service_layer.handlers.run"],
        ),
        # Through the package: `from workcenter.service_layer import repository` is the
        # module, so a circle through a third module is found too.
        (
            "workcenter.service_layer.ports",
            "from workcenter.service_layer import repository\n",
            ["workcenter.service_layer.ports", "workcenter.service_layer.repository"],
        ),
    ],
)
def test_a_planted_circle_is_caught(module: str, planted: str, circle: list[str]) -> None:
    modules = all_modules()
    modules[module] += planted
    assert import_circles(modules) == [circle]


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
