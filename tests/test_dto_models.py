"""The document's response schemas hold for what the builders really send (ADR-0066):
every read of the demo's item (dynamic, with a failed Run, a question, messages and a
final result), of a linear item and of a budget-stopped one, validated against the
models with unknown keys forbidden; and the budget's trimmed forms."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient
from http_client import LINEAR, client
from pydantic import TypeAdapter

from workcenter.adapters.cli import cli
from workcenter.adapters.http import schemas
from workcenter.application import WorkCenter
from workcenter.projections.budget import enforce_budget
from workcenter.projections.dto_models import DetailDto, Summary, SummaryDto

READS: dict[str, Any] = {
    "": DetailDto,
    "/progress": schemas.ProgressRead,
    "/budget": schemas.BudgetRead,
    "/timeline": schemas.TimelineRead,
    "/conversation": schemas.ConversationRead,
    "/audit": schemas.AuditRead,
    "/decisions": schemas.DecisionsRead,
}


@pytest.fixture(params=["", "--max-tokens=20000"])
def demo(request: pytest.FixtureRequest, db_path: Path) -> Iterator[TestClient]:
    """The demo's store (the second one stopped by its budget), with a linear item."""
    flags = [request.param] if request.param else []
    result = CliRunner().invoke(cli, ["--db", str(db_path), "demo", *flags])
    assert result.exit_code == 0, result.output
    with WorkCenter.open(db_path) as wc:
        api = client(wc)
        assert api.post("/api/work-items", json=LINEAR).status_code == 201
        yield api


def test_every_read_matches_its_schema(demo: TestClient) -> None:
    page = demo.get("/api/work-items").json()
    TypeAdapter(schemas.SummaryPage).validate_python(page)
    assert len(page["items"]) == 2
    for item in page["items"]:
        for suffix, model in READS.items():
            answer = demo.get(f"/api/work-items/{item['id']}{suffix}")
            assert answer.status_code == 200, answer.text
            TypeAdapter(model).validate_python(answer.json())
        then = demo.get(f"/api/work-items/{item['id']}/audit", params={"at": 2}).json()
        assert "state" in then
        TypeAdapter(schemas.AuditRead).validate_python(then)


def test_the_demo_shows_the_optional_parts(demo: TestClient) -> None:
    """A schema test that never met a key would not find it missing from a model."""
    item = demo.get("/api/work-items").json()["items"][-1]
    detail = demo.get(f"/api/work-items/{item['id']}").json()
    assert detail["messages"] and detail["actions"] and "goalProgress" in detail
    assert any("turns" in action for action in detail["actions"])
    assert detail["mainline"]["actions"][0]["result"]["evidence"]


@pytest.mark.parametrize("budget", [2 * 1024, 4 * 1024, 8 * 1024])
def test_trimmed_dtos_match_their_schemas(demo: TestClient, budget: int) -> None:
    item = demo.get("/api/work-items").json()["items"][-1]
    detail = demo.get(f"/api/work-items/{item['id']}").json()
    trimmed = enforce_budget(detail, "detail", budget=budget)
    assert trimmed["truncated"] is True
    TypeAdapter(DetailDto).validate_python(trimmed)
    summary = {k: v for k, v in item.items() if k != "goalProgress"}
    cut = enforce_budget(summary, "summary", budget=budget) | {"goalProgress": item["goalProgress"]}
    TypeAdapter(SummaryDto).validate_python(cut)


def test_a_key_the_models_do_not_name_fails() -> None:
    """The check above can fail: an unknown key is refused."""
    row = {"unknownKey": 1}
    with pytest.raises(ValueError, match="extra"):
        TypeAdapter(Summary).validate_python(row)
