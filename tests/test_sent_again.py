"""Commands sent again after a lost answer: a create with a request id answers the
WorkItem the first attempt made, without one it makes another (ADR-0139); the same
finish answers the Action the first recorded (ADR-0140)."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from conftest import BACKENDS, CRITERIA, refused

from workcenter import InvalidInput, RequestIdUsed, StaleRun, StoreDisconnected, WorkCenter
from workcenter.application import WriteContention

ARGS: dict[str, Any] = {
    "title": "Fix the flaky test",
    "goal": "The test passes on every run",
    "acceptance_criteria": list(CRITERIA),
    "mode": "linear",
    "stages": ["implement", "verify"],
    "start": True,
    "limits": {"max_tokens": 50_000},
}


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    if request.param == "postgresql":
        import postgres

        postgres.require_server()
    return str(request.param)


def test_the_same_create_sent_again_answers_the_item_the_first_made(wc: WorkCenter) -> None:
    first = wc.create_work_item(**ARGS, request_id="order-17")
    written = wc.event_count()
    again = wc.create_work_item(**ARGS, request_id="order-17")
    assert again == first
    assert wc.event_count() == written
    assert [item["id"] for item in wc.list_work_items()] == [first.id]


def test_a_retry_answers_the_item_as_it_is_now(wc: WorkCenter) -> None:
    first = wc.create_work_item(**ARGS, request_id="order-18")
    cancelled = wc.cancel(first.id, reason="not needed")
    assert wc.create_work_item(**ARGS, request_id="order-18") == cancelled


@pytest.mark.parametrize(
    "change",
    [
        {"title": "Another title"},
        {"goal": "Another goal"},
        {"acceptance_criteria": ["only one"]},
        {"delivery_target": "pull_request"},
        {"stages": ["implement"]},
        {"start": False},
        {"limits": {"max_tokens": 60_000}},
        {"actor": "user:someone-else"},
    ],
    ids=lambda change: next(iter(change)),
)
def test_the_same_request_id_with_other_input_is_refused(
    wc: WorkCenter, change: dict[str, Any]
) -> None:
    wc.create_work_item(**ARGS, request_id="order-19")
    with refused(wc, RequestIdUsed, "other input"):
        wc.create_work_item(**(ARGS | change), request_id="order-19")


def test_other_request_ids_and_none_make_new_items(wc: WorkCenter) -> None:
    ids = {
        wc.create_work_item(**ARGS, request_id="a").id,
        wc.create_work_item(**ARGS, request_id="b").id,
        wc.create_work_item(**ARGS).id,
        wc.create_work_item(**ARGS).id,
    }
    assert len(ids) == 4


@pytest.mark.parametrize("request_id", ["", "   ", "x" * 201, 17, "bad\ud800"])
def test_a_request_id_that_cannot_name_a_create_is_refused(wc: WorkCenter, request_id: Any) -> None:
    with refused(wc, InvalidInput, "request_id"):
        wc.create_work_item(**ARGS, request_id=request_id)


def test_two_stores_sending_one_create_at_once_make_one_item(
    wc: WorkCenter, other: WorkCenter
) -> None:
    answers: list[Any] = []

    def create(center: WorkCenter) -> None:
        try:
            answers.append(center.create_work_item(**ARGS, request_id="order-20").id)
        except WriteContention as error:  # pragma: no cover - a failure, said below
            answers.append(error)

    threads = [threading.Thread(target=create, args=(c,)) for c in (wc, other)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(answers) == 2 and answers[0] == answers[1], answers
    assert len(wc.list_work_items()) == 1


def test_a_finish_sent_again_answers_the_action_and_another_is_stale(wc: WorkCenter) -> None:
    """Before ADR-0140 the same finish sent again (its answer lost) was StaleRun, as a
    finish of a Run that had ended otherwise is."""
    wc.create_work_item(**ARGS)
    claimed = wc.claim_next("worker-1")
    assert claimed is not None
    completed = report_of("completed")
    finished = wc.finish_run(claimed, completed)
    written = wc.event_count()
    assert wc.finish_run(claimed, completed) == finished
    assert wc.event_count() == written
    with refused(wc, StaleRun):
        wc.finish_run(claimed, report_of("failed"))
    with refused(wc, StaleRun):
        wc.interrupt(claimed, reason="too late")


def report_of(outcome: str) -> dict[str, Any]:
    return {
        "outcome": outcome,
        "summary": outcome,
        "evidence": ["log"],
        "acceptanceChecks": [
            {"criterion": c, "status": "passed", "evidence": "log"} for c in CRITERIA
        ],
    }


def test_a_finish_sent_again_while_the_store_is_away_is_the_stores_error(
    wc: WorkCenter, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its own first finish looked up as the database went away: it was told StaleRun,
    the Run's end, and took its recorded report for lost (found by acceptance testing,
    ADR-0140)."""
    wc.create_work_item(**ARGS)
    claimed = wc.claim_next("worker-1")
    assert claimed is not None
    completed = report_of("completed")
    finished = wc.finish_run(claimed, completed)

    def away(*_: object) -> None:
        raise StoreDisconnected("the database went away")

    with monkeypatch.context() as patched:
        patched.setattr(wc.worker_protocol, "first_finish", away)
        with refused(wc, StoreDisconnected):
            wc.finish_run(claimed, completed)
    assert wc.finish_run(claimed, completed) == finished
