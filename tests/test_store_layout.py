"""A store's layout covers its events and its SQLite tables, and a SQLite store records
the layout of the newest Workcenter that opened it, so an older one refuses it (ADR-0137).

Before, a SQLite store kept layout 1 while the events it could hold changed (a claim's
client claim id): an older Workcenter opened a store a newer one had written, failed on
the new events calling the store damaged, and its workers wrote beside the newer ones
(found by acceptance testing across versions). PostgreSQL's catalog is pinned in
``test_store_layout_postgres.py``.
"""

from __future__ import annotations

import hashlib
import sqlite3
import threading
import types
import typing
from pathlib import Path
from typing import Any

import pytest
from conftest import create_linear
from pydantic import BaseModel

from workcenter.adapters import persistence
from workcenter.adapters.executors import echo
from workcenter.adapters.persistence import StoreUnavailable
from workcenter.adapters.store_layout import LAYOUT
from workcenter.application import WorkCenter
from workcenter.domain.model import event_classes

# Each layout's fingerprints: the event classes (``events_shape``) and a SQLite store's
# tables (``sqlite_tables``). A change to either needs the next LAYOUT.
EVENTS = {
    2: "3da9a35baa7c01193a219666f652028eb03958561f560c4554c93f82df842c8c",
    3: "3da9a35baa7c01193a219666f652028eb03958561f560c4554c93f82df842c8c",
}
SQLITE_TABLES = {
    2: "a8b6c55424dd1675743771191fc54229673058e69a1de8594820c5441e31b0da",
    3: "7e56026d9d20f1bb61581e69a19389407c342f4dcc0631bc4063b86a2c43504d",
}


def shape(annotation: Any, seen: set[type]) -> str:
    """An annotation written out, the fields of the models it names included."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        if annotation in seen:
            return annotation.__qualname__
        seen.add(annotation)
        fields = ", ".join(
            f"{name}{'' if field.is_required() else '?'}: {shape(field.annotation, seen)}"
            for name, field in annotation.model_fields.items()
        )
        return f"{annotation.__qualname__}{{{fields}}}"
    args = typing.get_args(annotation)
    origin = typing.get_origin(annotation)
    if args and origin is typing.Literal:
        return f"Literal{sorted(map(repr, args))}"
    if args:
        name = "Union" if origin in (typing.Union, types.UnionType) else repr(origin)
        return f"{name}[{', '.join(shape(arg, seen) for arg in args)}]"
    return getattr(annotation, "__qualname__", repr(annotation))


def events_shape() -> list[str]:
    """Every event class a store may hold: its name, class version and fields."""
    return sorted(
        f"{name} v{cls.class_version}: {shape(cls, set())}" for name, cls in event_classes().items()
    )


def sqlite_tables(path: Path) -> list[tuple[str, str]]:
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute(
            "SELECT type, sql FROM sqlite_master WHERE sql IS NOT NULL ORDER BY type, name"
        ).fetchall()
    finally:
        conn.close()
    return [(kind, " ".join(sql.split())) for kind, sql in rows]


def digest(value: Any) -> str:
    return hashlib.sha256(repr(value).encode()).hexdigest()


def test_the_event_classes_are_those_of_the_layout() -> None:
    found = digest(events_shape())
    assert found == EVENTS.get(LAYOUT), (
        "an event class changed (a class, a field, a class version): an older Workcenter"
        " could not read a store holding it; give store_layout.LAYOUT the next number and"
        f" record {found} as its events' fingerprint here"
    )


def test_a_sqlite_store_holds_the_tables_of_the_layout(db_path: Path) -> None:
    with WorkCenter.open(db_path) as wc:
        create_linear(wc, stages=("implement",))
        claim = wc.claim_next("w1")
        assert claim is not None
        wc.finish_run(claim, echo(claim))
    found = digest(sqlite_tables(db_path))
    assert found == SQLITE_TABLES.get(LAYOUT), (
        "a SQLite store's tables changed: give store_layout.LAYOUT the next number and"
        f" record {found} as its tables' fingerprint here"
    )


def header(path: Path, field: str) -> int:
    """A field of the file's header (``user_version``, ``application_id``)."""
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute(f"PRAGMA {field}").fetchone()[0])
    finally:
        conn.close()


def user_version(path: Path) -> int:
    return header(path, "user_version")


def write_header(path: Path, field: str, value: int) -> None:
    """Set a field of the file's header, as another Workcenter (or a failed one) left it."""
    conn = sqlite3.connect(path)
    try:
        conn.execute(f"PRAGMA {field} = {value}")
        conn.commit()
    finally:
        conn.close()


def test_a_sqlite_store_of_an_older_layout_is_upgraded_and_then_refused_by_older_code(
    db_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    with WorkCenter.open(db_path) as wc:
        item = create_linear(wc)
    write_header(db_path, "user_version", 1)  # as a Workcenter of layout 1 left it
    with caplog.at_level("WARNING", logger="workcenter.store"), WorkCenter.open(db_path) as wc:
        assert wc.work_item(item.id).id == item.id
    assert user_version(db_path) == LAYOUT
    # An upgrade wrote and said nothing (found by acceptance testing).
    assert [r.getMessage() for r in caplog.records if "upgraded" in r.getMessage()] == [
        f"{db_path}: store upgraded from layout 1 to {LAYOUT}"
        " (a Workcenter older than this one now refuses it)"
    ]
    # An older Workcenter, as it would open this store now.
    monkeypatch.setattr(persistence, "LAYOUT", LAYOUT - 1)
    before = db_path.read_bytes()
    with pytest.raises(StoreUnavailable, match=f"has store layout {LAYOUT}; .*upgrade"):
        WorkCenter.open(db_path)
    assert db_path.read_bytes() == before


def test_a_file_whose_making_did_not_finish_is_no_store_to_read_and_made_again(
    db_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An ``init`` that failed after marking the file (its disk full) left it marked, of
    layout 0, without a table: a read then took it for an old store, said "upgraded from
    layout 0" and made its tables (found by acceptance testing, ADR-0138). A read now
    refuses it, untouched; a create makes the store, saying nothing of an upgrade."""
    write_header(db_path, "application_id", persistence.APPLICATION_ID)
    before = db_path.read_bytes()
    with pytest.raises(StoreUnavailable, match="its making did not finish: run init again"):
        WorkCenter.open(db_path, create=False)
    assert db_path.read_bytes() == before
    with caplog.at_level("WARNING", logger="workcenter.store"), WorkCenter.open(db_path) as wc:
        create_linear(wc)
    assert user_version(db_path) == LAYOUT
    assert not [r for r in caplog.records if "upgraded" in r.getMessage()]


def test_a_new_files_mark_and_layout_are_written_together(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both in one transaction: a failure between them (a full disk) leaves neither."""
    real = sqlite3.connect

    class Failing:
        def __init__(self, conn: sqlite3.Connection) -> None:
            self.conn = conn

        def execute(self, statement: str, *args: Any) -> Any:
            if "user_version" in statement:
                raise sqlite3.OperationalError("database or disk is full")
            return self.conn.execute(statement, *args)

        def __getattr__(self, name: str) -> Any:
            return getattr(self.conn, name)

    monkeypatch.setattr(sqlite3, "connect", lambda *a, **k: Failing(real(*a, **k)))
    with pytest.raises(StoreUnavailable, match="disk is full"):
        WorkCenter.open(db_path)
    monkeypatch.undo()
    assert header(db_path, "application_id") == 0


def test_a_refused_newer_store_is_not_written(db_path: Path) -> None:
    with WorkCenter.open(db_path) as wc:
        create_linear(wc)
    write_header(db_path, "user_version", LAYOUT + 1)
    before = db_path.read_bytes()
    with pytest.raises(StoreUnavailable, match="upgrade Workcenter"):
        WorkCenter.open(db_path)
    assert db_path.read_bytes() == before and user_version(db_path) == LAYOUT + 1


def test_opens_racing_on_an_older_file_raise_its_layout_once(
    db_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Each of two processes opening an older file at once read its header, then wrote
    it and said so: the write is made under the file's lock, read again there (found by
    acceptance testing, ADR-0137)."""
    with WorkCenter.open(db_path) as wc:
        create_linear(wc)
    for _ in range(ROUNDS):
        write_header(db_path, "user_version", 1)
        start = threading.Barrier(RACERS)

        def opening(start: threading.Barrier = start) -> None:
            start.wait()
            persistence.prepare_store_file(str(db_path), create=False)

        caplog.clear()
        with caplog.at_level("WARNING", logger="workcenter.store"):
            threads = [threading.Thread(target=opening) for _ in range(RACERS)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        said = [r for r in caplog.records if "upgraded" in r.getMessage()]
        assert len(said) == 1 and user_version(db_path) == LAYOUT


ROUNDS, RACERS = 5, 8
