"""``list`` says when it shows fewer items than there are, and an id prefix finds any item
(found by acceptance testing: ``list`` stopped at 1,000 items without a word, the Python
API's ``list_work_items`` too, and a prefix of a later item's id was "not found")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from workcenter.adapters.cli import LIST_LIMIT, cli
from workcenter.application import WorkCenter
from workcenter.domain.errors import InvalidInput


def invoke(db: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, [*args, "--db", str(db)])


def test_every_item_is_listed_and_found_by_prefix_past_the_cli_limit(db_path: Path) -> None:
    with WorkCenter.open(db_path) as wc:
        for n in range(LIST_LIMIT + 1):
            wc.create_work_item(title=f"Item {n}", goal="Be found", acceptance_criteria=["Found"])
        items = wc.list_work_items()
        assert len(items) == LIST_LIMIT + 1
        last = items[-1]["id"]
        assert [r["id"] for r in wc.list_work_items(limit=2)] == [r["id"] for r in items[:2]]
        before = wc.event_count()
        for bad in (0, -1, 1.5, "2"):
            with pytest.raises(InvalidInput, match="limit must be"):
                wc.list_work_items(limit=bad)  # type: ignore[arg-type]
        assert wc.event_count() == before
    cut = invoke(db_path, "list", "--json")
    assert cut.exit_code == 0
    assert cut.stdout.count('"id"') == LIST_LIMIT
    assert "there are more (--limit N)" in cut.stderr
    whole = invoke(db_path, "list", "--json", "--limit", str(LIST_LIMIT + 1))
    assert whole.stdout.count('"id"') == LIST_LIMIT + 1 and whole.stderr == ""
    shown = invoke(db_path, "show", str(last)[:8], "--json")
    assert shown.exit_code == 0, shown.output
    assert str(last) in shown.stdout


def test_the_newest_items_are_listed_first_when_asked(db_path: Path) -> None:
    """On a store of many items the one made a minute ago took `list --limit 100000` (14 s
    at 10,000 items; found by acceptance testing, ADR-0138): `--newest` lists the items
    made last first, `--limit` of them."""
    with WorkCenter.open(db_path) as wc:
        made = [wc.create_work_item(title=f"Item {n}", goal="g").id for n in range(5)]
        assert [r["id"] for r in wc.list_work_items(limit=2, newest=True)] == made[:2:-1][:2]
        before = wc.event_count()
        with pytest.raises(InvalidInput, match="newest must be True or False"):
            wc.list_work_items(newest="yes")  # type: ignore[arg-type]
        assert wc.event_count() == before
    newest = invoke(db_path, "list", "--newest", "--limit", "2", "--json")
    assert newest.exit_code == 0, newest.output
    assert [r["title"] for r in json.loads(newest.stdout)] == ["Item 4", "Item 3"]
    assert newest.stderr == "showing the newest 2 items; there are more (--limit N)\n"
