"""An audit bundle edited by hand, and an export aimed at the wrong file: each is a
one-line refusal (exit 2), never a traceback, and an export never replaces the store
it reads or a file it was not told to replace (ADR-0081)."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from click.testing import CliRunner
from conftest import create_linear

from workcenter.adapters.cli import cli
from workcenter.application import WorkCenter


@pytest.fixture
def exported(db_path: Path, tmp_path: Path) -> tuple[UUID, Path]:
    with WorkCenter.open(db_path) as wc:
        item_id = create_linear(wc).id
    bundle = tmp_path / "item.jsonl"
    result = export(db_path, item_id, bundle)
    assert result.exit_code == 0, result.output
    return item_id, bundle


def export(db_path: Path, item_id: UUID, to: Path | str, *extra: str) -> Any:
    return CliRunner().invoke(
        cli, ["audit", "export", str(item_id), "--to", str(to), "--db", str(db_path), *extra]
    )


def head(line: dict[str, Any]) -> Callable[[dict[str, Any]], None]:
    def edit(record: dict[str, Any]) -> None:
        record.update(line)

    return edit


EDITS: dict[str, tuple[int, Callable[[dict[str, Any]], None]]] = {
    "an item id that is no id": (0, head({"work_item_id": "not-a-uuid"})),
    "an item id that is a number": (0, head({"work_item_id": 5})),
    "a count that is text": (0, head({"events": "3"})),
    "no anchor": (0, head({"anchor": None})),
    "an anchor that is a number": (0, head({"anchor": 12345})),
    "a version as text": (1, lambda r: r.update(originator_version=str(r["originator_version"]))),
    "a position as a fraction": (1, lambda r: r.update(position=float(r["position"]))),
    "a position past 64 bits": (1, lambda r: r.update(position=2**63)),
    "a boolean version": (1, lambda r: r.update(originator_version=True)),
    "streams that are a number": (0, head({"streams": 7})),
}


@pytest.mark.parametrize("edit", EDITS)
def test_a_hand_edited_bundle_is_refused_in_one_line(
    exported: tuple[UUID, Path], edit: str
) -> None:
    _, bundle = exported
    lines = bundle.read_bytes().splitlines()
    number, change = EDITS[edit]
    record = json.loads(lines[number])
    change(record)
    lines[number] = json.dumps(record).encode()
    bundle.write_bytes(b"\n".join(lines) + b"\n")
    result = CliRunner().invoke(cli, ["audit", "verify", "--bundle", str(bundle)])
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output
    assert f"line {number + 1}" in result.output


def test_an_export_never_replaces_the_store_or_a_file_unasked(
    db_path: Path, exported: tuple[UUID, Path], tmp_path: Path
) -> None:
    item_id, bundle = exported
    store = db_path.read_bytes()
    for target in (db_path, Path(f"{db_path}-wal")):
        refused = export(db_path, item_id, target)
        assert refused.exit_code == 2 and "the store" in refused.output, refused.output
    assert db_path.read_bytes() == store
    with WorkCenter.open(db_path) as wc:
        assert wc.work_item(item_id).id == item_id
    first = bundle.read_bytes()
    again = export(db_path, item_id, bundle)
    assert again.exit_code == 2 and "--force" in again.output, again.output
    assert bundle.read_bytes() == first
    assert export(db_path, item_id, bundle, "--force").exit_code == 0
    unnamed = export(db_path, item_id, "")
    assert unnamed.exit_code == 2 and "Traceback" not in unnamed.output, unnamed.output
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix == ".jsonl") == ["item.jsonl"]


@pytest.mark.parametrize("kind", ["a device", "a pipe", "a link", "a loop of links"])
def test_an_export_never_replaces_what_is_not_a_file(
    db_path: Path, exported: tuple[UUID, Path], tmp_path: Path, kind: str
) -> None:
    """``--force`` renamed the bundle over a device (``/dev/null`` as root), a pipe or a
    link, and said it was written; a loop of links was a traceback (found by acceptance
    testing, ADR-0145)."""
    item_id, bundle = exported
    target = tmp_path / "target"
    if kind == "a device":
        # A null device of the test's own: a regression must not take the machine's.
        try:
            os.mknod(target, 0o600 | stat.S_IFCHR, os.makedev(1, 3))
        except PermissionError:
            pytest.skip("making a device node needs root (CI runs as root)")
    elif kind == "a pipe":
        os.mkfifo(target)
    elif kind == "a link":
        target.symlink_to(bundle)
    else:
        target.symlink_to(tmp_path / "other")
        (tmp_path / "other").symlink_to(target)
    was = target.lstat()
    refused = export(db_path, item_id, target, "--force")
    assert refused.exit_code == 2, refused.output
    assert "not a file" in refused.output and "Traceback" not in refused.output
    now = target.lstat()
    assert (now.st_mode, now.st_ino) == (was.st_mode, was.st_ino)


def lines_of(bundle: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in bundle.read_bytes().splitlines()]


def write(bundle: Path, records: list[dict[str, Any]]) -> None:
    bundle.write_bytes(b"".join(json.dumps(r).encode() + b"\n" for r in records))


@pytest.mark.parametrize("cut", ["an Action's stream", "the item named another"])
def test_a_bundle_whose_stream_was_cut_out_is_broken(
    db_path: Path, tmp_path: Path, cut: str
) -> None:
    """Every line of one stream removed and the count set to match: an Action's verified
    (and its replay raised a KeyError's traceback), and a header pointed at another
    item verified too (found by acceptance testing, ADR-0134)."""
    with WorkCenter.open(db_path) as wc:
        item = create_linear(wc)
        claimed = wc.claim_next("w")
        assert claimed is not None
    bundle = tmp_path / "item.jsonl"
    assert export(db_path, item.id, bundle).exit_code == 0
    header, *events = lines_of(bundle)
    if cut == "an Action's stream":
        events = [e for e in events if e["originator_id"] != str(claimed.action_id)]
        header["events"] = len(events)
    else:
        header["work_item_id"] = "00000000-0000-4000-8000-000000000000"
    write(bundle, [header, *events])
    result = CliRunner().invoke(cli, ["audit", "verify", "--bundle", str(bundle)])
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output and "of which the bundle holds no event" in (
        result.output
    ), result.output


def test_an_export_to_a_path_of_bytes_that_are_not_utf8_says_its_json(
    db_path: Path, tmp_path: Path
) -> None:
    """The file system takes any bytes in a name; the JSON answer names such a path by the
    escapes of its bytes. It wrote the bundle, then failed with a traceback (found by
    acceptance testing, ADR-0138)."""
    with WorkCenter.open(db_path) as wc:
        item_id = create_linear(wc).id
    to = os.fsdecode(bytes(tmp_path) + b"/b\xfe.jsonl")  # as Python gives it: b\udcfe
    result = export(db_path, item_id, to, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["bundle"] == str(tmp_path) + "/b\\xfe.jsonl"
    assert (bytes(tmp_path) + b"/b\xfe.jsonl") in [bytes(p) for p in tmp_path.iterdir()]
