"""A save's inline views read their positions in one statement and write them in one
more (ADR-0042), keeping the rules of ``projections/inline.py``: a position never moves
back, a view ahead of the command is given nothing, a lagging view is caught up from
the log first. On SQLite and on PostgreSQL."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import BACKENDS, create_dynamic, create_linear
from eventsourcing.persistence import IntegrityError

from workcenter.adapters.sql_counts import traced
from workcenter.application import WorkCenter
from workcenter.bootstrap import EAGER_VIEWS
from workcenter.projections import sql
from workcenter.projections.tracked import positions_within, write_positions

TRACKING_READ = "SELECT APPLICATION_NAME, NOTIFICATION_ID FROM TRACKING"
TRACKING_WRITE = "INSERT INTO TRACKING"


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def datastore(wc: WorkCenter) -> Any:
    return next(iter(wc.projections.views.values())).datastore  # type: ignore[attr-defined]


def positions(wc: WorkCenter, *names: str) -> dict[str, int]:
    with sql.transaction(datastore(wc), commit=False) as c:
        return positions_within(c, datastore(wc), names)


def write(wc: WorkCenter, moved: dict[str, int]) -> None:
    with sql.transaction(datastore(wc), commit=True) as c:
        write_positions(c, moved)


def dumps(wc: WorkCenter) -> dict[str, Any]:
    return {name: wc.projections.views[name].dump() for name in EAGER_VIEWS}  # type: ignore[attr-defined]


def head(wc: WorkCenter) -> int:
    return int(wc.store.recorder.max_notification_id() or 0)


def test_positions_move_forward_together_and_unknown_views_are_at_zero(wc: WorkCenter) -> None:
    assert positions(wc, "first", "second") == {"first": 0, "second": 0}
    write(wc, {"first": 7, "second": 3})
    write(wc, {"first": 9})
    assert positions(wc, "first", "second", "third") == {"first": 9, "second": 3, "third": 0}


@pytest.mark.parametrize("stale", [4, 5])
def test_a_position_never_moves_back_or_stays_and_nothing_of_the_write_is_kept(
    wc: WorkCenter, stale: int
) -> None:
    write(wc, {"first": 5, "second": 5})
    with pytest.raises(IntegrityError, match="first"):
        write(wc, {"second": 8, "first": stale})
    assert positions(wc, "first", "second") == {"first": 5, "second": 5}


def test_a_view_ahead_of_the_command_is_given_nothing_and_keeps_its_position(
    wc: WorkCenter,
) -> None:
    create_linear(wc)
    ahead = head(wc) + 1_000
    write(wc, {"mailbox": ahead})
    before = dumps(wc)
    create_linear(wc, title="after")
    assert positions(wc, "mailbox", "work_queue") == {"mailbox": ahead, "work_queue": head(wc)}
    after = dumps(wc)
    assert after["mailbox"] == before["mailbox"]
    assert after["work_queue"] != before["work_queue"]


def test_one_lagging_view_is_caught_up_in_the_save_beside_current_ones(
    wc: WorkCenter, monkeypatch: pytest.MonkeyPatch
) -> None:
    create_dynamic(wc)
    create_linear(wc)
    wc.projections.views["mailbox"].reset("mailbox")  # type: ignore[attr-defined]
    assert positions(wc, "mailbox")["mailbox"] == 0
    after_the_commit: list[object] = []
    monkeypatch.setattr(wc._read_models, "catch_up", after_the_commit.append)
    create_linear(wc, title="third")
    assert after_the_commit == []  # the gap was applied inside the save
    assert positions(wc, *EAGER_VIEWS) == dict.fromkeys(EAGER_VIEWS, head(wc))
    live = dumps(wc)
    wc.maintenance.rebuild_projection()
    assert dumps(wc) == live


@pytest.mark.parametrize("backend", ["sqlite"])
def test_a_save_reads_and_writes_the_positions_in_one_statement_each(wc: WorkCenter) -> None:
    create_linear(wc)
    with traced(datastore(wc)) as counts:
        create_linear(wc, title="counted")
    statements = [s.upper() for s in counts.statements]
    assert len([s for s in statements if s.startswith(TRACKING_READ)]) == 1
    [written] = [s for s in statements if s.startswith(TRACKING_WRITE)]
    assert all(f"'{name.upper()}'" in written for name in [*EAGER_VIEWS, "DETAIL"])
    assert not [s for s in statements if "MAX(NOTIFICATION_ID) FROM TRACKING" in s]
