"""A claim sent again with its ``clientClaimId`` (ADR-0114): answered with the Run the
first got and nothing written, by any process of the store; the id of another worker's
Run, or of a Run that ended, refused with nothing written; on SQLite and PostgreSQL."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import UUID

import postgres
import pytest
from conftest import BACKENDS, FakeClock, actions_by_sequence, saves_writing_no_view
from fastapi.testclient import TestClient
from http_client import LINEAR, client

from workcenter.application import WorkCenter
from workcenter.domain import action as act
from workcenter.domain.errors import ClaimIdUsed
from workcenter.projections import sqlite_turns
from workcenter.service_layer.handlers.claim import Claim
from workcenter.service_layer.handlers.worker_protocol import WorkerProtocol

PROBLEM = "application/problem+json"
WORKER = {"worker": "w1", "bootId": "boot-1"}


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def api(wc: WorkCenter) -> Iterator[TestClient]:
    with client(wc) as api:
        yield api


def create(api: TestClient) -> None:
    response = api.post("/api/work-items", json=LINEAR)
    assert response.status_code == 201, response.text


def post_claim(api: TestClient, **body: Any) -> Any:
    return api.post("/api/worker/claim", json=WORKER | body)


def claimed(api: TestClient, **body: Any) -> dict[str, Any]:
    response = post_claim(api, **body)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


def refused(wc: WorkCenter, api: TestClient, title: str, status: int = 409, **body: Any) -> str:
    """The claim ``body`` is refused as ``title`` and writes nothing; its detail."""
    before = wc.event_count()
    response = post_claim(api, **body)
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == PROBLEM
    assert response.json()["title"] == title
    assert wc.event_count() == before, "a refused claim wrote events"
    detail: str = response.json()["detail"]
    return detail


def test_a_claim_sent_again_answers_the_same_run_and_writes_nothing(
    api: TestClient, wc: WorkCenter
) -> None:
    create(api)
    create(api)  # a second claimable Action a new claim would take
    first = claimed(api, clientClaimId="claim-1")
    assert first["replayed"] is False
    before = wc.event_count()
    again = claimed(api, clientClaimId="claim-1")
    assert wc.event_count() == before, "a repeated claim wrote events"
    assert again["fence"] == first["fence"]
    assert again["replayed"] is True
    assert {k: v for k, v in again.items() if k != "replayed"} == {
        k: v for k, v in first.items() if k != "replayed"
    }
    # The Run it answers is the worker's to use: its fence renews.
    renewed = api.post("/api/worker/renew", json={"fence": again["fence"]})
    assert renewed.status_code == 200, renewed.text


def test_another_id_or_none_gets_another_run(api: TestClient, wc: WorkCenter) -> None:
    for _ in range(3):
        create(api)
    first = claimed(api, clientClaimId="claim-1")
    second = claimed(api, clientClaimId="claim-2")
    third = claimed(api)
    runs = {c["fence"]["runId"] for c in (first, second, third)}
    assert len(runs) == 3
    assert second["replayed"] is False and third["replayed"] is False


@pytest.mark.parametrize(
    "who", [{"worker": "w2"}, {"bootId": "boot-2"}], ids=["another name", "another process"]
)
def test_the_id_of_another_workers_claim_is_refused(
    api: TestClient, wc: WorkCenter, who: dict[str, str]
) -> None:
    create(api)
    create(api)
    claimed(api, clientClaimId="claim-1")
    detail = refused(wc, api, "ClaimIdUsed", clientClaimId="claim-1", **who)
    assert ("with another bootId" if "bootId" in who else "another worker's claim") in detail


def test_the_id_of_a_finished_run_is_refused(api: TestClient, wc: WorkCenter) -> None:
    create(api)
    create(api)
    first = claimed(api, clientClaimId="claim-1")
    report = {
        "outcome": "completed",
        "summary": "triaged",
        "evidence": ["pytest: 48 passed"],
        "acceptanceChecks": [
            {"criterion": c, "status": "passed", "evidence": "48 passed"}
            for c in first["acceptanceCriteria"]
        ],
    }
    finished = api.post("/api/worker/finish", json={"fence": first["fence"], "report": report})
    assert finished.status_code == 200, finished.text
    detail = refused(wc, api, "ClaimIdUsed", clientClaimId="claim-1")
    assert "ended (completed)" in detail and first["fence"]["runId"] in detail


def test_the_id_of_a_run_whose_lease_lapsed_is_refused(wc: WorkCenter, clock: FakeClock) -> None:
    """Before anyone recovered the Run: its fence is no longer good for anything."""
    protocol = wc.worker_protocol
    with client(wc) as api:
        create(api)
    first = protocol.claim("w1", "boot-1", 5, "claim-1")
    assert first is not None
    clock.advance(6)
    before = wc.event_count()
    with pytest.raises(ClaimIdUsed, match="lost its lease"):
        protocol.claim("w1", "boot-1", 5, "claim-1")
    assert wc.event_count() == before


def test_a_run_given_back_unanswered_frees_its_id(wc: WorkCenter) -> None:
    """ADR-0098 gives back a claim whose client left: that client retries with the same
    id, and must get a Run, not a refusal."""
    protocol = wc.worker_protocol
    with client(wc) as api:
        create(api)
    first = protocol.claim("w1", "boot-1", 60, "claim-1")
    assert first is not None
    protocol.unanswered(first)
    second = protocol.claim("w1", "boot-1", 60, "claim-1")
    assert second is not None and not second.replayed
    assert second.action_id == first.action_id and second.run_id != first.run_id
    again = protocol.claim("w1", "boot-1", 60, "claim-1")
    assert again is not None and again.replayed and again.ref == second.ref


@pytest.mark.parametrize(
    "value",
    ["", "   ", "x" * 201, 7, "a\x00b", "a\tb"],
    # A NUL was a 500 on PostgreSQL, whose text columns cannot hold one: refused with
    # every control character, as in a worker's name.
    ids=["empty", "blank", "too long", "a number", "a NUL", "a tab"],
)
def test_a_bad_claim_id_is_refused(api: TestClient, wc: WorkCenter, value: object) -> None:
    create(api)
    refused(wc, api, "InvalidInput", 422, clientClaimId=value)


def test_another_process_of_the_store_answers_the_retry(wc: WorkCenter, other: WorkCenter) -> None:
    """The id is kept with the Run's claim in the store, so a retry that reaches another
    server process of the same store is answered with the same Run."""
    with client(wc) as first_api, client(other) as second_api:
        create(first_api)
        create(first_api)
        first = claimed(first_api, clientClaimId="claim-1")
        before = wc.event_count()
        again = claimed(second_api, clientClaimId="claim-1")
        assert wc.event_count() == before == other.event_count()
        assert again["fence"] == first["fence"] and again["replayed"] is True
        claimed(first_api, clientClaimId="claim-1")  # and back again, from its cache
        assert refused(other, second_api, "ClaimIdUsed", clientClaimId="claim-1", worker="w2")


def test_a_retry_without_a_boot_id_through_another_process_says_what_to_send(
    wc: WorkCenter, other: WorkCenter
) -> None:
    """A claim without a bootId takes the answering server process's; its retry through
    another process is another boot's, refused, and the refusal says to send the bootId
    (it said "another worker's claim", of the same worker: found by acceptance
    testing)."""
    without = {"worker": "w1", "bootId": None}
    with client(wc) as first_api, client(other) as second_api:
        create(first_api)
        claimed(first_api, clientClaimId="claim-1", **without)
        said = refused(other, second_api, "ClaimIdUsed", clientClaimId="claim-1", **without)
        assert "with another bootId" in said and "another worker" not in said
        again = claimed(first_api, clientClaimId="claim-1", **without)
        assert again["replayed"] is True


def test_two_processes_claiming_with_one_id_at_once_make_one_run(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A retry that reaches a second server process while the first claim is still being
    made there waits for it and answers its Run (ADR-0118). Before, each claimed: the
    second found no Run under the id yet and took the other Action, and the first Run was
    held by nobody until its lease lapsed."""
    with (
        postgres.fresh_schema() as url,
        WorkCenter.open(url, clock=clock) as first,
        WorkCenter.open(url, clock=clock, boot_id="other-process", create=False) as second,
    ):
        with client(first) as api:
            create(api)
            create(api)
        looked_up, go_on = threading.Event(), threading.Event()
        look_up = WorkerProtocol._claimed_before

        def paused(self: WorkerProtocol, *args: Any) -> Claim | None:
            found = look_up(self, *args)
            if self is first.worker_protocol:
                looked_up.set()  # the first claim found no Run under the id: it claims
                assert go_on.wait(30)
            return found

        monkeypatch.setattr(WorkerProtocol, "_claimed_before", paused)
        answers: dict[str, Claim | None] = {}

        def claim(name: str, wc: WorkCenter) -> None:
            answers[name] = wc.worker_protocol.claim("w1", "boot-1", 60, "claim-1")

        threads = {
            name: threading.Thread(target=claim, args=(name, wc))
            for name, wc in (("first", first), ("second", second))
        }
        threads["first"].start()
        assert looked_up.wait(30)
        threads["second"].start()
        threads["second"].join(0.5)  # time to run ahead, were it not made to wait
        go_on.set()
        for thread in threads.values():
            thread.join(30)
        one, other = answers["first"], answers["second"]
        assert one is not None and other is not None, answers
        assert not one.replayed and other.replayed
        assert other.ref == one.ref
        runs = [
            run
            for row in first.list_work_items()
            for action in actions_by_sequence(first, row["id"])
            for run in action.runs
        ]
        assert len(runs) == 1, runs  # one Run claimed, not two


# Another process holding the turn of an id on a SQLite store until told to let go.
HOLDER = """
import pathlib, sys, time
from workcenter.projections import sqlite_turns
store, held, release = sys.argv[1:]
with sqlite_turns.turn(store, "claim-1"):
    pathlib.Path(held).touch()
    while not pathlib.Path(release).exists():
        time.sleep(0.01)
"""


def test_claims_with_one_id_take_turns_across_the_processes_of_a_sqlite_store(
    db_path: Path, clock: FakeClock
) -> None:
    """Another process of the SQLite store inside its turn for an id (as a claim with it
    would be, between its look-up and its save): a claim with the id here waits for it,
    then claims; one with an id of another turn does not wait (ADR-0123). Before, on
    SQLite claims with one id took turns within a process only, so a retry that reached
    a second process could claim a second Run."""
    held, release = db_path.parent / "held", db_path.parent / "release"
    with WorkCenter.open(str(db_path), clock=clock) as wc:
        with client(wc) as api:
            create(api)
            create(api)
        holder = subprocess.Popen(
            [sys.executable, "-c", HOLDER, str(db_path), str(held), str(release)]
        )
        try:
            deadline = time.monotonic() + 30
            while not held.exists():
                assert holder.poll() is None and time.monotonic() < deadline
                time.sleep(0.01)
            other_id = next(
                f"other-{n}"
                for n in range(1000)
                if zlib.crc32(f"other-{n}".encode()) % 64 != zlib.crc32(b"claim-1") % 64
            )
            assert wc.worker_protocol.claim("w2", "boot-2", 60, other_id) is not None
            answers: list[Claim | None] = []
            waiting = threading.Thread(
                target=lambda: answers.append(
                    wc.worker_protocol.claim("w1", "boot-1", 60, "claim-1")
                )
            )
            waiting.start()
            waiting.join(0.5)
            assert waiting.is_alive()  # waits for the other process's turn
            release.touch()
            waiting.join(30)
            assert answers and answers[0] is not None and not answers[0].replayed
        finally:
            release.touch()
            assert holder.wait(30) == 0


def test_the_turns_file_has_the_stores_permissions_or_claims_go_on_without_it(
    tmp_path: Path, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """The turns file is made with the store file's permissions (made 0600 whatever they
    were, another user of a group-writable store could not open it); one that cannot be
    opened leaves claims taking turns within the process, said once on the log, where
    the claim was a 500 (found by acceptance testing)."""
    shared, blocked = tmp_path / "shared.db", tmp_path / "blocked.db"
    for path in (shared, blocked):
        with WorkCenter.open(str(path), clock=clock) as wc, client(wc) as api:
            create(api)
    shared.chmod(0o660)
    (tmp_path / "blocked.db-turns").mkdir()  # not a file this process can open
    for path in (shared, blocked):
        with WorkCenter.open(str(path), clock=clock, create=False) as wc:
            assert wc.worker_protocol.claim("w1", "boot-1", 60, "claim-1") is not None
            assert wc.worker_protocol.claim("w1", "boot-1", 60, "claim-1").replayed  # type: ignore[union-attr]
    assert ((tmp_path / "shared.db-turns").stat().st_mode & 0o777) == 0o660
    said = [r.getMessage() for r in caplog.records if "within this process only" in r.getMessage()]
    assert len(said) == 1 and "blocked.db-turns" in said[0], said


def test_a_turns_file_that_takes_no_lock_leaves_turns_within_the_process(
    db_path: Path,
    clock: FakeClock,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A file system without record locks (ENOLCK): the claim is made and answered
    again, said once on the log, not an OSError out of the claim."""

    def no_locks(*args: Any) -> None:
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.setattr(sqlite_turns.fcntl, "lockf", no_locks)
    with WorkCenter.open(str(db_path), clock=clock) as wc:
        with client(wc) as api:
            create(api)
        first = wc.worker_protocol.claim("w1", "boot-1", 60, "claim-1")
        again = wc.worker_protocol.claim("w1", "boot-1", 60, "claim-1")
    assert first is not None and again is not None and again.replayed
    said = [r.getMessage() for r in caplog.records if "takes no lock" in r.getMessage()]
    assert len(said) == 1, said


def test_a_retry_finds_its_run_in_a_work_queue_behind_the_log(wc: WorkCenter) -> None:
    """On PostgreSQL the turn reads the id with the work queue's position (ADR-0118); a
    queue behind the log (its rows left to a writer of before ADR-0116) is caught up
    first, so the retry still answers the Run the first claim got."""
    with client(wc) as api:
        create(api)
        create(api)
    with saves_writing_no_view():
        first = wc.worker_protocol.claim("w1", "boot-1", 60, "claim-1")
        before = wc.event_count()
        again = wc.worker_protocol.claim("w1", "boot-1", 60, "claim-1")
    assert first is not None and again is not None
    assert again.replayed and again.ref == first.ref
    assert wc.event_count() == before


def test_the_run_records_its_claim_id_and_a_claim_without_one_is_stored_as_before(
    wc: WorkCenter,
) -> None:
    with client(wc) as api:
        create(api)
        create(api)
    with_id = wc.worker_protocol.claim("w1", "boot-1", 60, "  claim-1 ")
    without = wc.worker_protocol.claim("w1", "boot-1", 60)
    assert with_id is not None and without is not None
    run = wc.action(with_id.action_id).run(with_id.run_id)
    assert run is not None and run.client_claim_id == "claim-1"  # stripped, as clientMessageId
    claims = [e for e in wc._repository.events(without.action_id) if isinstance(e, act.RunClaimed)]
    assert claims and "client_claim_id" not in claims[0].model_dump()
    # A claim recorded before the field existed loads, with no id.
    old = act.RunClaimed.model_validate(
        {k: v for k, v in claims[0].model_dump().items() if k != "client_claim_id"}
    )
    assert old.client_claim_id is None
    assert UUID(str(old.run_id)) == without.run_id


def test_the_ids_are_rebuilt_from_the_claims_events(wc: WorkCenter) -> None:
    """``wq_claims`` is a read model like the rest of the work queue: rebuilt from zero
    it holds the same rows, so a rebuilt store still answers a retried claim."""
    with client(wc) as api:
        create(api)
        create(api)
    first = wc.worker_protocol.claim("w1", "boot-1", 60, "claim-1")
    assert first is not None
    wc.worker_protocol.claim("w1", "boot-1", 60, "claim-2")
    live = wc.work_queue.dump()["wq_claims"]
    assert len(live) == 2
    wc.maintenance.rebuild_projection("work_queue")
    assert wc.work_queue.dump()["wq_claims"] == live
    again = wc.worker_protocol.claim("w1", "boot-1", 60, "claim-1")
    assert again is not None and again.replayed and again.ref == first.ref
