"""Text in many scripts, as the read views show and search it (found by acceptance
testing, ADR-0144): the views cut in UTF-8 bytes what the bounds take in characters, so
a goal of 8,000 CJK characters showed 5,333 (and its end could not be searched), a
criterion 341 of 1,000, a message 2,666 of 8,000; a search missed an accent typed apart
from its letter, and Turkish's dotted and dotless i."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner
from conftest import create_dynamic
from http_client import DYNAMIC, client

from workcenter.adapters.cli import cli
from workcenter.application import WorkCenter
from workcenter.domain import bounds
from workcenter.domain import conversation as conv

CLI = [sys.executable, "-c", "from workcenter.adapters.cli import main; main()"]


def test_every_text_the_bounds_take_is_shown_whole(location: str, wc: WorkCenter) -> None:
    goal = "目" * (bounds.GOAL - 2) + "終了"
    criterion = "基" * bounds.CRITERION
    item = create_dynamic(wc, criteria=[criterion])
    wc.update_contract(item.id, expected_version=item.version, goal=goal)
    message = "話" * conv.TEXT_LIMIT
    wc.post_user_message(item.id, message)
    detail = wc.detail(item.id)
    assert detail["goal"] == goal
    assert detail["goalProgress"]["criteria"][0]["criterion"] == criterion
    assert detail["acceptanceCriteria"] == [criterion]
    progress = wc.web_reads.progress(item.id)
    assert progress["goalProgress"]["criteria"][0]["criterion"] == criterion
    posted = [m["text"] for m in wc.web_reads.conversation(item.id)["messages"]]
    assert message in posted
    # Its last words are found, as the page shows the goal.
    found = wc.web_reads.summaries(search="終了").json()["items"]
    assert [row["id"] for row in found] == [str(item.id)]
    # The CLI's own conversation too (it cut the message at 8,000 bytes; the re-test
    # of ADR-0144 found it).
    said = CliRunner().invoke(cli, ["--db", location, "conversation", str(item.id), "--json"])
    assert said.exit_code == 0, said.output
    assert message in [m["text"] for m in json.loads(said.stdout)["messages"]]


def test_a_search_matches_across_composed_forms_and_turkish_cases(wc: WorkCenter) -> None:
    titles = {
        "nfc": "Café résumé",
        "nfd": "Cre\u0300me bru\u0302le\u0301e",
        "dotted": "İstanbul ofisi",
        "dotless": "\u0131spanak I\u015f\u0131k",
        "sharp": "Straße",
    }
    ids = {key: str(wc.create_work_item(title=t, goal="g").id) for key, t in titles.items()}

    def found(search: str) -> set[str]:
        rows = wc.web_reads.summaries(search=search).json()["items"]
        return {key for key, value in ids.items() if value in {row["id"] for row in rows}}

    assert found("cafe\u0301") == {"nfc"}  # an accent typed apart
    assert found("CRÈME") == found("crème") == {"nfd"}
    assert found("istanbul") == found("ISTANBUL") == found("İstanbul") == {"dotted"}
    assert found("ISPANAK") == found("\u0131\u015f\u0131k") == {"dotless"}
    assert found("STRASSE") == {"sharp"}
    assert found("ofisi") == {"dotted"}


@pytest.mark.parametrize(
    ("locale", "typed", "said"),
    [
        ({"LC_ALL": "C", "PYTHONUTF8": "0"}, "日本".encode(), "not text in this locale's"),
        ({"LC_ALL": "C.UTF-8"}, b"\xff", "bytes that are not UTF-8"),
    ],
)
def test_a_title_the_terminals_locale_cannot_read_is_said_as_such(
    tmp_path: Path, locale: dict[str, str], typed: bytes, said: str
) -> None:
    """Typed in Japanese under ``LANG=C`` without Python's UTF-8 mode, a title was said
    to hold a lone surrogate, and nothing more (found by acceptance testing, ADR-0144)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LC_", "LANG"))}
    env |= {"LANG": "C"} | locale
    db = str(tmp_path / "s.db")
    done = subprocess.run(
        [*CLI, "--db", db, "create", "--title", typed, "--goal", "g"],
        env=env,
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert "lone surrogate" in done.stderr.decode() and said in done.stderr.decode()
    with WorkCenter.open(Path(db)) as wc:
        assert wc.event_count() == 0


def test_history_shows_text_in_its_script(location: str, wc: WorkCenter) -> None:
    """It showed every letter of an Arabic title as a ``\\uXXXX`` escape."""
    item = wc.create_work_item(title="افتح الملف", goal="g")
    shown = CliRunner().invoke(cli, ["--db", location, "history", str(item.id)])
    assert shown.exit_code == 0, shown.output
    assert "افتح الملف" in shown.stdout and "\\u0627" not in shown.stdout


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-32"])
def test_a_body_in_another_unicode_encoding_is_refused(wc: WorkCenter, encoding: str) -> None:
    """Python's parser reads UTF-16 and UTF-32 too: such a body was taken (201) where
    one in Latin-1 was refused as not UTF-8 (found by acceptance testing, ADR-0144)."""
    api = client(wc)
    before = wc.event_count()
    sent = api.post(
        "/api/work-items",
        content=orjson.dumps(DYNAMIC).decode().encode(encoding),
        headers={"Content-Type": "application/json"},
    )
    assert sent.status_code == 400, sent.text
    assert sent.json()["detail"] == "the body is not UTF-8 text"
    assert wc.event_count() == before
