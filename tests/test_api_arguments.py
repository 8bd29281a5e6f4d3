"""Arguments of the Python API that are not what it takes are refused with the project's
typed errors, before anything is written (found by an acceptance test, ADR-0081): no
other exception leaves the API, and a mistake of the caller's is never recorded as a
Coordinator failure."""

from __future__ import annotations

import os
import threading
from datetime import UTC, datetime, timedelta, tzinfo
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import (
    FakeClock,
    action_spec,
    create_dynamic,
    create_linear,
    plan,
    refused,
    report,
)

from workcenter.adapters import store_copy
from workcenter.adapters.cli import cli
from workcenter.adapters.providers.scripted_coordinator import scripted_coordinator
from workcenter.adapters.worker import run_worker
from workcenter.application import Claim, WorkCenter
from workcenter.domain.errors import InvalidInput, NotFound


def _shown(value: Any) -> str:
    """A value as a test id, the same in every test process (an object's repr names its
    address, ADR-0102)."""
    plain = type(value) in (str, int, float, bool, type(None))
    return f"{type(value).__name__}:{value}" if plain else type(value).__name__


class NaiveClock:
    def now(self) -> datetime:
        return datetime.now()  # no zone: the mistake refused


class BrokenClock:
    def now(self) -> datetime:
        raise RuntimeError("no time")


class BrokenZone(tzinfo):
    def utcoffset(self, moment: datetime | None) -> timedelta:
        raise RuntimeError("no offset")


class BrokenZoneClock:
    def now(self) -> datetime:
        return datetime.now(UTC).replace(tzinfo=BrokenZone())


@pytest.mark.parametrize(
    "arguments",
    [
        {"db": 5},
        {"db": {}},
        {"db": b"x.db"},
        {"boot_id": 5},
        {"boot_id": "has space"},
        {"clock": 5},
        # A clock whose times carry no zone was stored as local times without offset, and
        # another process's recovery failed comparing them (found by acceptance testing).
        {"clock": NaiveClock()},
        {"clock": BrokenClock()},
        {"clock": BrokenZoneClock()},
        {"create": "no"},
        {"inline_projections": 1},
        {"coordinator_rules": 5},
        {"coordinator_rules": "strict"},
        {"coordinator_rules": object()},
        # A URL of a scheme Workcenter does not open is not a SQLite file's name.
        {"db": "postgresql+psycopg://postgres@127.0.0.1:5432/test"},
        {"db": "mysql://root@127.0.0.1/test"},
        {"db": "sqlite:///x.db"},
    ],
)
def test_open_refuses_arguments_it_does_not_take(tmp_path: Path, arguments: dict[str, Any]) -> None:
    given = {"db": tmp_path / "x.db"} | arguments
    with pytest.raises(InvalidInput):
        WorkCenter.open(**given)
    assert list(tmp_path.iterdir()) == []  # nothing was made


def test_a_provider_that_is_none_is_refused_before_any_turn_is_claimed(wc: WorkCenter) -> None:
    item = create_dynamic(wc)  # its start woke the Coordinator
    for junk in (0, None, "scripted"):
        with refused(wc, InvalidInput, "provider"):
            wc.coordinate_once(junk)  # type: ignore[arg-type]
    assert wc.ledger(item.id).coordinator_failures == 0


@pytest.mark.parametrize(
    ("arguments", "match"),
    [
        ({"limit": 0}, "limit must be"),
        ({"limit": True}, "limit"),
        ({"steps": 0}, "steps must be"),
        ({"steps": 101}, "steps must be from 1 to the limit"),
        ({"steps": "1"}, "steps"),
        ({"limit": 5, "steps": 6}, "steps must be from 1 to the limit"),
    ],
)
def test_a_pass_of_steps_out_of_bounds_is_refused_before_any_turn(
    wc: WorkCenter, arguments: dict[str, Any], match: str
) -> None:
    """``coordinate_once``'s ``limit`` and ``steps`` (ADR-0138) are checked before any
    wake is claimed: nothing written."""
    item = create_dynamic(wc)  # its start woke the Coordinator
    with refused(wc, InvalidInput, match):
        wc.coordinate_once(scripted_coordinator(), **arguments)
    assert wc.ledger(item.id).coordinator_failures == 0


def _echo(claim: Claim) -> dict[str, Any]:
    return report()


@pytest.mark.parametrize(
    "arguments",
    [
        {"executor": None},
        {"executor": "workcenter.adapters.executors:echo"},
        {"coordinator": "scripted"},
        {"coordinator": 5},
        {"max_runs": "3"},
        {"max_runs": -1},
        {"max_runs": 1.5},
        {"max_runs": True},
        {"stop": "x"},
        {"stop": object()},
        {"signals": threading.Event()},
        {"on_event": "x"},
        {"on_step": 5},
        {"stats": {}},
        {"stats": 5},
    ],
    ids=lambda arguments: ", ".join(f"{k}={_shown(v)}" for k, v in arguments.items()),
)
def test_the_worker_loop_refuses_an_argument_it_cannot_use_before_anything_is_claimed(
    wc: WorkCenter, clock: FakeClock, arguments: dict[str, Any]
) -> None:
    """Each once failed after a claim (an executor that is no callable burned every
    attempt, a callback that is none left its Run running), or silently (a coordinator
    that is no provider counted every pass as a refused step, -1 Runs ran none). Nothing
    is written: not the claim, the Coordinator's step, nor the start-up recovery of the
    Run whose lease lapsed here."""
    item = create_dynamic(wc)  # its start woke the Coordinator
    plan(wc, item.id, action_spec(maxAttempts=3), action_spec("test", "Run it"))
    wc.claim_next("dead-worker", lease_seconds=1)
    clock.advance(2)
    name = next(iter(arguments))
    given: dict[str, Any] = {"executor": _echo, "worker": "w", "exit_when_idle": True}
    with refused(wc, InvalidInput, name):
        run_worker(wc, **(given | arguments))


def test_the_worker_loop_takes_no_executor_when_it_runs_no_runs_and_zero_max_runs(
    wc: WorkCenter,
) -> None:
    """A loop of Coordinator steps only needs no executor; ``max_runs=0`` claims none
    (the start-up recovery alone, as the CLI's ``--max-runs`` cannot ask)."""
    plan(wc, create_dynamic(wc).id)
    stats = run_worker(wc, None, worker="w", runs=False, exit_when_idle=True)  # type: ignore[arg-type]
    assert stats.claimed == 0
    assert run_worker(wc, _echo, worker="w", max_runs=0).claimed == 0
    assert wc.claim_next("probe") is not None


def test_reads_refuse_a_limit_below_one_and_a_version_never_had(wc: WorkCenter) -> None:
    item = create_linear(wc)
    for limit in (0, -1, -3):
        with pytest.raises(InvalidInput, match="limit"):
            wc.audit(item.id, limit=limit)
    assert len(wc.audit(item.id, limit=1)) == 1
    assert wc.work_item(item.id, version=item.version).version == item.version
    for version in (item.version + 1, 999):
        with pytest.raises(NotFound):
            wc.work_item(item.id, version=version)
    with pytest.raises(NotFound, match="not found at version 999"):
        wc.ledger(item.id, version=999)


def test_rekey_names_the_new_key_variable_it_refuses(
    db_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with WorkCenter.open(db_path) as wc:
        create_linear(wc)
    monkeypatch.setenv(store_copy.NEW_KEY_ENV, "short")
    with pytest.raises(InvalidInput, match=rf"\${store_copy.NEW_KEY_ENV} must be"):
        store_copy.rekey(str(db_path), str(tmp_path / "new.db"))
    assert not os.path.exists(tmp_path / "new.db")


def test_actions_takes_an_items_state_not_its_id(wc: WorkCenter) -> None:
    item = create_linear(wc)
    with pytest.raises(InvalidInput, match="work_item"):
        wc.actions(item.id)  # type: ignore[arg-type]
    assert len(wc.actions(item)) == 1


def test_the_operators_verbs_refuse_callbacks_and_rules_they_cannot_use(wc: WorkCenter) -> None:
    create_linear(wc)
    for call in (
        lambda: wc.maintenance.rebuild_projection("detail", progress=5),  # type: ignore[arg-type]
        lambda: wc.maintenance.verify_history(progress="yes"),  # type: ignore[arg-type]
        lambda: wc.maintenance.replay_decisions(None, rules=5),  # type: ignore[arg-type]
        lambda: wc.maintenance.replay_decisions(None, progress=5),  # type: ignore[arg-type]
    ):
        with refused(wc, InvalidInput):
            call()


def test_show_state_without_json_is_a_usage_error(db_path: Path) -> None:
    """``--state`` only chooses what ``--json`` prints: alone it was silently ignored."""
    with WorkCenter.open(db_path) as wc:
        item = create_linear(wc)
    result = CliRunner().invoke(cli, ["--db", str(db_path), "show", str(item.id), "--state"])
    assert result.exit_code == 2 and "--json" in result.output, result.output
    shown = CliRunner().invoke(
        cli, ["--db", str(db_path), "show", str(item.id), "--state", "--json"]
    )
    assert shown.exit_code == 0, shown.output


def test_an_audit_that_matches_nothing_says_so(db_path: Path) -> None:
    """A type that the item has no event of printed nothing at all, like a command that
    did not run."""
    with WorkCenter.open(db_path) as wc:
        item = create_linear(wc)
    result = CliRunner().invoke(
        cli, ["--db", str(db_path), "audit", str(item.id), "--type", "RunFinished"]
    )
    assert result.exit_code == 0 and "no event of the item matches" in result.output
    found = CliRunner().invoke(
        cli, ["--db", str(db_path), "audit", str(item.id), "--type", "WorkItemCreated"]
    )
    assert "WorkItemCreated" in found.output and "no event" not in found.output


def test_an_audit_type_that_names_no_event_is_refused(db_path: Path) -> None:
    """A mistyped type is the caller's mistake, told with the names it may have meant
    (ADR-0083), in the Python API, on the command line and over HTTP alike."""
    with WorkCenter.open(db_path) as wc:
        item = create_linear(wc)
        for typo in ("RunFinishd", "runfinished", "Nope", "WorkItemEvent", "DomainEvent"):
            with pytest.raises(InvalidInput, match="names no event"):
                wc.audit(item.id, type=typo)
        with pytest.raises(InvalidInput, match="RunFinished"):
            wc.audit(item.id, type="RunFinishd")
    result = CliRunner().invoke(
        cli, ["--db", str(db_path), "audit", str(item.id), "--type", "RunFinishd"]
    )
    assert result.exit_code == 2 and "did you mean RunFinished" in result.output, result.output
