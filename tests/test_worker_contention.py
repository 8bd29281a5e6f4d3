"""A Run's outcome in hand is recorded through write contention (ADR-0131).

Sibling Runs of one item finishing at once take the item's stream from each other; a
finish that lost every save of its command gave up with ``WriteContention``, which the
worker took for a malformed report: it interrupted the Run (spending an attempt) and an
Action done right could end failed (found by acceptance testing, 12 workers on one item's
64 Actions). The worker tries the finish again, in rounds; if the item's streams still
keep changing, the Run is left to its lease, not interrupted for its report.
"""

from __future__ import annotations

from typing import Any

import pytest
from conftest import create_linear, report

from workcenter.adapters.worker_run import CONTENDED, WorkerStats, run_one
from workcenter.application import Claim, WorkCenter, WriteContention
from workcenter.service_layer import backoff


@pytest.fixture(autouse=True)
def no_pauses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(backoff, "pause", lambda attempt, sleep=None: 0.0)


def contended(wc: WorkCenter, monkeypatch: pytest.MonkeyPatch, times: int) -> list[int]:
    """``wc.finish_run`` loses every save ``times`` times, then finishes; its calls."""
    finish_run, calls = wc.finish_run, []

    def losing(claim: Claim, report: Any) -> Any:
        calls.append(1)
        if len(calls) <= times:
            raise WriteContention("the aggregates kept changing; try again")
        return finish_run(claim, report)

    monkeypatch.setattr(wc, "finish_run", losing)
    return calls


def one_run(wc: WorkCenter) -> tuple[Claim | None, WorkerStats, list[tuple[str, str]]]:
    """One Run claimed, executed and finished as the worker's loop does: the claim, the
    worker's counts and the events it said."""
    events: list[tuple[str, str]] = []
    stats = WorkerStats()
    claim = run_one(
        wc,
        lambda claim: report(),
        worker="w",
        stats=stats,
        on_event=lambda event, claim, detail: events.append((event, detail)),
    )
    return claim, stats, events


def test_a_finish_that_loses_to_siblings_is_tried_again_and_recorded(
    wc: WorkCenter, monkeypatch: pytest.MonkeyPatch
) -> None:
    item = create_linear(wc, stages=("implement",))
    calls = contended(wc, monkeypatch, 3)
    claim, stats, events = one_run(wc)
    assert claim is not None and len(calls) == 4
    assert [e for e, _ in events] == ["claimed", "finished"]
    assert (stats.errors, stats.interrupted, stats.finished) == (0, 0, 1)
    assert wc.action(claim.action_id).runs[-1].status == "completed"
    assert wc.work_item(item.id).status == "done"


def test_a_finish_that_keeps_losing_leaves_the_run_to_its_lease(
    wc: WorkCenter, monkeypatch: pytest.MonkeyPatch
) -> None:
    create_linear(wc, stages=("implement",))
    contended(wc, monkeypatch, 1_000)
    claim, stats, events = one_run(wc)
    assert claim is not None
    assert events[-1] == ("lost", CONTENDED)
    assert (stats.errors, stats.interrupted, stats.lost) == (0, 0, 1)
    run = wc.action(claim.action_id).runs[-1]
    assert run.status == "running"  # not interrupted for its report: an attempt kept


def test_a_run_whose_item_was_cancelled_is_lost_saying_why(wc: WorkCenter) -> None:
    """ADR-0136: the worker's line for a Run it could not finish names why the fence
    failed (here its item was cancelled while it ran), not only that it failed."""
    item = create_linear(wc, stages=("implement",))
    events: list[tuple[str, str]] = []

    def execute(claim: Claim) -> dict[str, Any]:
        wc.cancel(item.id, reason="not needed")
        return report()

    stats = WorkerStats()
    claim = run_one(
        wc,
        execute,
        worker="w",
        stats=stats,
        on_event=lambda event, claim, detail: events.append((event, detail)),
    )
    assert claim is not None and stats.lost == 1
    event, detail = events[-1]
    assert event == "lost"
    assert detail.startswith(f"the outcome was not recorded: Run {claim.run_id} has ended (")


def test_a_finish_recorded_before_its_answer_was_lost_counts_as_finished(
    wc: WorkCenter, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The connection lost after the finish committed: sent again, the finish is refused
    by the Run's fence, and the worker said "lost" of its own recorded outcome (found by
    acceptance testing, ADR-0136). Its report's digest says it was its own."""
    create_linear(wc, stages=("implement",))
    finish = wc.finish_run

    def committed_then_sent_again(claim: Claim, report: Any, actor: Any = None) -> Any:
        finish(claim, report)
        return finish(claim, report)  # the resent write: StaleRun

    monkeypatch.setattr(wc, "finish_run", committed_then_sent_again)
    claim, stats, events = one_run(wc)
    assert claim is not None
    assert events[-1] == ("finished", "completed")
    assert (stats.finished, stats.lost, stats.outcomes) == (1, 0, {"completed": 1})


def test_a_run_finished_with_another_report_is_still_lost(
    wc: WorkCenter, monkeypatch: pytest.MonkeyPatch
) -> None:
    create_linear(wc, stages=("implement",))
    finish = wc.finish_run

    def another_finished_first(claim: Claim, report: Any, actor: Any = None) -> Any:
        finish(claim, dict(report) | {"summary": "someone else's report"})
        return finish(claim, report)

    monkeypatch.setattr(wc, "finish_run", another_finished_first)
    _, stats, events = one_run(wc)
    assert events[-1][0] == "lost" and (stats.finished, stats.lost) == (0, 1)
