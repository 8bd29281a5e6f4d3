"""Text that cannot lie about itself (ADR-0058): a title holding a bidi override or a
control character is stored as written and shown escaped, in the terminal and on the
page, with the same characters escaped the same way in both."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from http_client import client

from workcenter.adapters.cli import cli
from workcenter.adapters.terminal import safe
from workcenter.application import WorkCenter

TITLE = "\u202egnp.exe \x1b[31mred\x07 \u2066isolated\u2069 \u200fmark"
SHOWN = "\\u202egnp.exe \\x1b[31mred\\x07 \\u2066isolated\\u2069 \\u200fmark"
TEXT_JS = Path(__file__).parent.parent / "workcenter/adapters/http/static/text.js"


@pytest.fixture
def wc(db_path: Path) -> Iterator[WorkCenter]:
    with WorkCenter.open(db_path) as center:
        yield center


def test_the_terminal_shows_a_lying_title_escaped(db_path: Path, wc: WorkCenter) -> None:
    item = wc.create_work_item(title=TITLE, goal="g", mode="linear", stages=["a"])
    runner = CliRunner()
    for verb in (["list"], ["show", str(item.id)]):
        result = runner.invoke(cli, ["--db", str(db_path), *verb])
        assert result.exit_code == 0, result.output
        assert SHOWN in result.output, result.output
        assert not any(c in result.output for c in "\u202e\x1b\x07\u2066\u2069\u200f")


def test_the_api_keeps_the_title_as_written(wc: WorkCenter) -> None:
    item = wc.create_work_item(title=TITLE, goal="g")
    assert wc.work_item(item.id).title == TITLE
    assert client(wc).get(f"/api/work-items/{item.id}").json()["title"] == TITLE


def test_the_page_escapes_what_the_terminal_escapes() -> None:
    """The page's ``visible`` (text.js) against ``terminal.safe`` over the first 12,288 code
    points: the same escapes, but the page keeps newlines and tabs (it shows
    multi-line goals as written)."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("no node to run the page's script")
    script = TEXT_JS.read_text()
    start = script.index("const UNSAFE")
    end = script.index("function el(")
    program = (
        script[start:end]
        + "const out = [];"
        + "for (let c = 0; c < 0x3000; c++) out.push(visible(String.fromCharCode(c)));"
        + "process.stdout.write(JSON.stringify(out));"
    )
    shown = json.loads(
        subprocess.run([node, "-e", program], capture_output=True, check=True).stdout
    )
    for code, page in enumerate(shown):
        char = chr(code)
        if 0xD800 <= code <= 0xDFFF:
            continue  # lone surrogates: JSON never carries them to the page
        expected = char if char in "\n\t" else safe(char)
        assert page == expected, (hex(code), page, expected)
