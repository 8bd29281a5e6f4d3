"""The worker protocol over HTTP (ADR-0063): every verb fenced, a stale or foreign
fence refused with nothing written, a repeated finish, reservation or settlement
answered once, expired leases recovered by an idle claim, and a Python worker that
drives the protocol end to end through httpx against a live server."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from typing import Any
from uuid import UUID

import anyio
import httpx
import orjson
import pytest
from conftest import FakeClock
from fastapi.testclient import TestClient
from http_client import LINEAR, client, served

from workcenter.adapters.http.app import create_app
from workcenter.application import WorkCenter
from workcenter.domain import action as act
from workcenter.domain.errors import WorkcenterError

PROBLEM = "application/problem+json"
VERBS = (
    "renew",
    "finish",
    "interrupt",
    "defer",
    "input",
    "input/consume",
    "requests/reserve",
    "requests/settle",
)
REQUEST = {"messages": [{"role": "user", "content": "Plan the fix"}], "max_tokens": 256}
USAGE = {"input_tokens": 40, "output_tokens": 12}


@pytest.fixture
def api(wc: WorkCenter) -> TestClient:
    return client(wc)


def create(api: TestClient, **changes: Any) -> dict[str, Any]:
    response = api.post("/api/work-items", json=LINEAR | changes)
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


def claim(api: TestClient, **body: Any) -> dict[str, Any]:
    response = api.post("/api/worker/claim", json={"worker": "w1", "bootId": "boot-1"} | body)
    assert response.status_code == 200, response.text
    claimed: dict[str, Any] = response.json()
    return claimed


def report(claimed: dict[str, Any], outcome: str = "completed") -> dict[str, Any]:
    return {
        "outcome": outcome,
        "summary": f"{claimed['actionType']} done",
        "evidence": ["pytest: 48 passed"],
        "acceptanceChecks": [
            {"criterion": c, "status": "passed", "evidence": "48 passed"}
            for c in claimed["acceptanceCriteria"]
        ],
    }


def body_for(verb: str, fence: dict[str, Any], claimed: dict[str, Any]) -> dict[str, Any]:
    extra: dict[str, dict[str, Any]] = {
        "finish": {"report": report(claimed)},
        "interrupt": {"reason": "shutting down", "progress": {"summary": "half"}},
        "input/consume": {"inputIds": []},
        "requests/reserve": {"requestId": "req-1", "request": REQUEST},
        "requests/settle": {"requestId": "req-1", "usage": USAGE},
    }
    return {"fence": fence} | extra.get(verb, {})


def refused(wc: WorkCenter, response: httpx.Response, status: int, title: str) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == PROBLEM
    assert response.json()["title"] == title


# --- fences -----------------------------------------------------------------------


STALE: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "an older epoch": lambda f: f | {"leaseEpoch": f["leaseEpoch"] - 1},
    "a newer epoch": lambda f: f | {"leaseEpoch": f["leaseEpoch"] + 1},
    "another process": lambda f: f | {"bootId": "someone-else"},
    "another Run": lambda f: f | {"runId": "00000000-0000-4000-8000-000000000001"},
}


@pytest.mark.parametrize("verb", VERBS)
@pytest.mark.parametrize("stale", STALE)
def test_a_stale_or_foreign_fence_is_refused_on_every_verb_with_nothing_written(
    api: TestClient, wc: WorkCenter, clock: FakeClock, verb: str, stale: str
) -> None:
    create(api)
    claim(api)  # the first Run: its Action is retried as a second Run below
    first = claim_again_after_expiry(api, clock)
    # A reservation of the live Run, so that settle has something to settle.
    assert api.post(
        "/api/worker/requests/reserve",
        json={"fence": first["fence"], "requestId": "req-1", "request": REQUEST},
    ).json()["allowed"]
    fence = STALE[stale](first["fence"])
    before = wc.event_count()
    refused(wc, api.post("/api/worker/" + verb, json=body_for(verb, fence, first)), 409, "StaleRun")
    assert wc.event_count() == before, "a refused verb wrote events"


def claim_again_after_expiry(api: TestClient, clock: FakeClock) -> dict[str, Any]:
    """Let the first Run's lease lapse; an idle claim recovers it and claims its Action
    again (lease epoch 2), as a second worker would."""
    clock.advance(61)
    return claim(api, bootId="boot-2")


def test_a_lapsed_lease_is_ended_while_every_claim_finds_work(
    api: TestClient, wc: WorkCenter, clock: FakeClock
) -> None:
    """A remote worker that died holds its Run until its lease lapses, and then no longer
    than about a second of the server's claims: before ADR-0107 only a claim that found
    nothing to do recovered, so under a steady backlog the Run stayed running, its item
    blocked, for as long as the backlog lasted (found with remote workers always busy)."""
    create(api)
    lost = claim(api, leaseSeconds=5)  # its worker dies
    for _ in range(3):
        create(api)
    claim(api, bootId="boot-2")
    clock.advance(6)  # the lease lapses; every claim below finds work
    claim(api, bootId="boot-2")
    run = wc.action(UUID(lost["fence"]["actionId"])).run(UUID(lost["fence"]["runId"]))
    assert run is not None and run.status == "interrupted"


# A Run no longer live still settles what it spent (ADR-0133): every other verb.
LIVE_VERBS = tuple(verb for verb in VERBS if verb != "requests/settle")


@pytest.mark.parametrize("verb", LIVE_VERBS)
def test_the_fence_of_a_recovered_run_is_refused_on_every_verb(
    api: TestClient, wc: WorkCenter, clock: FakeClock, verb: str
) -> None:
    create(api)
    lost = claim(api, leaseSeconds=5)
    clock.advance(6)
    assert claim(api, bootId="boot-2")["fence"]["leaseEpoch"] == lost["fence"]["leaseEpoch"] + 1
    before = wc.event_count()
    response = api.post("/api/worker/" + verb, json=body_for(verb, lost["fence"], lost))
    refused(wc, response, 409, "StaleRun")
    # Why, in words a worker can log (ADR-0136): its Run ended when it was recovered.
    assert f"Run {lost['fence']['runId']} has ended (interrupted: " in response.json()["detail"]
    assert wc.event_count() == before


def test_an_expired_lease_is_refused_before_anyone_recovers_it(
    api: TestClient, wc: WorkCenter, clock: FakeClock
) -> None:
    create(api)
    claimed = claim(api, leaseSeconds=5)
    clock.advance(6)
    before = wc.event_count()
    for verb in ("renew", "finish", "requests/reserve", "input", "input/consume"):
        response = api.post("/api/worker/" + verb, json=body_for(verb, claimed["fence"], claimed))
        refused(wc, response, 409, "StaleRun")
        assert "'s lease expired at " in response.json()["detail"], (verb, response.text)
    assert wc.event_count() == before


@pytest.mark.parametrize("ended", ["expired", "recovered", "cancelled"])
def test_a_run_no_longer_live_still_settles_what_it_spent(
    api: TestClient, wc: WorkCenter, clock: FakeClock, ended: str
) -> None:
    """ADR-0133: a settlement sends nothing, it records what was spent. Refused as
    stale, the usage of a Run whose lease lapsed or whose item was cancelled was lost
    and the ledger kept the estimate (found by acceptance testing). A fence the Run was
    never issued is still refused, as on every verb."""
    item = create(api)
    claimed = claim(api, leaseSeconds=5)
    reserve = body_for("requests/reserve", claimed["fence"], claimed)
    assert api.post("/api/worker/requests/reserve", json=reserve).json()["allowed"]
    if ended == "cancelled":
        wc.cancel(UUID(item["id"]))
    else:
        clock.advance(6)
        if ended == "recovered":
            claim(api, bootId="boot-2")
    settle = {"fence": claimed["fence"], "requestId": "req-1"}
    spent = settle | {"usage": {"input_tokens": 5_000, "output_tokens": 10}}
    answer = api.post("/api/worker/requests/settle", json=spent)
    assert answer.status_code == 200, answer.text
    assert answer.json() == {
        "requestId": "req-1",
        "status": "reported",
        "chargedTokens": 5_010,
        "replayed": False,
    }
    assert wc.ledger(UUID(item["id"])).charged_tokens == 5_010
    before = wc.event_count()
    again = api.post("/api/worker/requests/settle", json=spent)
    assert again.json()["replayed"] is True
    refused(
        wc,
        api.post("/api/worker/requests/settle", json=settle | {"usage": USAGE}),
        409,
        "CommandRefused",
    )
    forged = claimed["fence"] | {"bootId": "someone-else"}
    refused(
        wc, api.post("/api/worker/requests/settle", json=spent | {"fence": forged}), 409, "StaleRun"
    )
    assert wc.event_count() == before


def test_an_unknown_cost_is_reported_by_the_complete_usage_sent_later(
    api: TestClient, wc: WorkCenter
) -> None:
    """resource-ledger.md 2: a later complete usage makes an unknown reservation
    reported; it was refused as "already settled otherwise"."""
    item = create(api)
    claimed = claim(api)
    reserve = body_for("requests/reserve", claimed["fence"], claimed)
    assert api.post("/api/worker/requests/reserve", json=reserve).json()["allowed"]
    settle = {"fence": claimed["fence"], "requestId": "req-1"}
    unknown = api.post("/api/worker/requests/settle", json=settle | {"complete": False})
    assert unknown.json()["status"] == "unknown", unknown.text
    before = wc.event_count()
    again = api.post("/api/worker/requests/settle", json=settle | {"complete": False})
    assert again.json()["replayed"] is True and wc.event_count() == before
    reported = api.post("/api/worker/requests/settle", json=settle | {"usage": USAGE})
    assert reported.json() | {"replayed": None} == {
        "requestId": "req-1",
        "status": "reported",
        "chargedTokens": 52,
        "replayed": None,
    }
    assert reported.json()["replayed"] is False
    assert wc.ledger(UUID(item["id"])).charged_tokens == 52


def test_a_reserve_repeated_after_its_settlement_is_not_told_to_send_it(
    api: TestClient, wc: WorkCenter
) -> None:
    """A reserve resent after its request was settled answered ``allowed: true``
    ("send it"), so a client retrying a model call by its id sent it twice (found by
    acceptance testing, ADR-0136): it is told the request was settled, nothing written."""
    create(api)
    claimed = claim(api)
    reserve = body_for("requests/reserve", claimed["fence"], claimed)
    assert api.post("/api/worker/requests/reserve", json=reserve).json()["allowed"]
    settle = {"fence": claimed["fence"], "requestId": "req-1", "usage": USAGE}
    assert api.post("/api/worker/requests/settle", json=settle).json()["status"] == "reported"
    before = wc.event_count()
    again = api.post("/api/worker/requests/reserve", json=reserve)
    assert again.status_code == 200, again.text
    assert again.json() == {
        "requestId": "req-1",
        "allowed": False,
        "code": "request_already_settled",
        "stops": False,
        "replayed": True,
    }
    assert wc.event_count() == before


def sent_at_once(
    api: TestClient,
    wc: WorkCenter,
    monkeypatch: pytest.MonkeyPatch,
    command: str,
    verb: str,
    body: dict[str, Any],
) -> list[dict[str, Any]]:
    """The protocol's ledger ``command`` runs ``verb`` with ``body`` (the same request
    sent to another server at once) after the protocol's look for an earlier one and
    before its own write: the race acceptance testing found with two servers. The first
    answer, once the next call of the verb has run."""
    budget = wc.worker_protocol.budget
    original = getattr(budget, command)
    firsts: list[dict[str, Any]] = []

    def raced(*args: Any, **kwargs: Any) -> Any:
        monkeypatch.setattr(budget, command, original)
        firsts.append(api.post("/api/worker/" + verb, json=body).json())
        return original(*args, **kwargs)

    monkeypatch.setattr(budget, command, raced)
    return firsts


def test_the_same_reservation_sent_at_once_is_answered_as_a_replay(
    api: TestClient, wc: WorkCenter, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its loser was denied ``request_already_reserved`` (``allowed: false``): the
    worker did not send a request it was allowed, and failed its Run."""
    create(api)
    claimed = claim(api)
    reserve = body_for("requests/reserve", claimed["fence"], claimed)
    firsts = sent_at_once(api, wc, monkeypatch, "reserve_request", "requests/reserve", reserve)
    second = api.post("/api/worker/requests/reserve", json=reserve).json()
    assert firsts[0]["allowed"] and not firsts[0]["replayed"]
    assert second == firsts[0] | {"replayed": True}


@pytest.mark.parametrize("same", [True, False])
def test_two_settlements_sent_at_once_are_one_and_a_replay_or_a_refusal(
    api: TestClient, wc: WorkCenter, monkeypatch: pytest.MonkeyPatch, same: bool
) -> None:
    """The loser was answered as a fresh settlement, its other usage dropped unsaid."""
    create(api)
    claimed = claim(api)
    reserve = body_for("requests/reserve", claimed["fence"], claimed)
    assert api.post("/api/worker/requests/reserve", json=reserve).json()["allowed"]
    settle = {"fence": claimed["fence"], "requestId": "req-1", "usage": USAGE}
    firsts = sent_at_once(api, wc, monkeypatch, "settle_request", "requests/settle", settle)
    other = settle if same else settle | {"usage": {"input_tokens": 300}}
    second = api.post("/api/worker/requests/settle", json=other)
    assert firsts[0]["status"] == "reported" and not firsts[0]["replayed"]
    if same:
        assert second.json() == firsts[0] | {"replayed": True}
    else:
        refused(wc, second, 409, "CommandRefused")


@pytest.mark.parametrize("recovered", [False, True])
def test_a_reservation_sent_again_by_a_run_no_longer_live_is_refused(
    api: TestClient, wc: WorkCenter, clock: FakeClock, recovered: bool
) -> None:
    """``allowed`` tells a worker to send its model request: a Run whose lease expired
    (recovered or not yet) is never told so, not even for a request id it reserved while
    it was live; the replay answers the first admission only to a live Run."""
    create(api)
    claimed = claim(api, leaseSeconds=5)
    reserve = body_for("requests/reserve", claimed["fence"], claimed)
    first = api.post("/api/worker/requests/reserve", json=reserve)
    assert first.status_code == 200 and first.json()["allowed"], first.text
    again = api.post("/api/worker/requests/reserve", json=reserve)
    assert again.json() == first.json() | {"replayed": True}
    clock.advance(6)
    if recovered:
        claim(api, bootId="boot-2")
    before = wc.event_count()
    refused(wc, api.post("/api/worker/requests/reserve", json=reserve), 409, "StaleRun")
    assert wc.event_count() == before


# --- retries ----------------------------------------------------------------------


def test_a_finish_sent_twice_writes_once_and_answers_the_first(
    api: TestClient, wc: WorkCenter
) -> None:
    create(api)
    claimed = claim(api)
    finish = {"fence": claimed["fence"], "report": report(claimed)}
    first = api.post("/api/worker/finish", json=finish)
    assert first.status_code == 200, first.text
    assert first.json()["replayed"] is False and first.json()["outcome"] == "completed"
    after_first = wc.event_count()
    # The same report with its keys in another order is the same finish.
    shuffled = {"fence": claimed["fence"], "report": dict(reversed(report(claimed).items()))}
    again = api.post("/api/worker/finish", json=shuffled)
    assert again.status_code == 200, again.text
    assert again.json() == first.json() | {"replayed": True}
    assert wc.event_count() == after_first
    other = {"fence": claimed["fence"], "report": report(claimed, "failed")}
    refused(wc, api.post("/api/worker/finish", json=other), 409, "CommandRefused")
    assert wc.event_count() == after_first


def test_a_replayed_finish_answers_the_first_even_after_the_item_moved_on(
    api: TestClient, wc: WorkCenter
) -> None:
    create(api)
    first = claim(api)
    finish = {"fence": first["fence"], "report": report(first)}
    answer = api.post("/api/worker/finish", json=finish).json()
    claim(api)  # the next stage runs
    before = wc.event_count()
    assert api.post("/api/worker/finish", json=finish).json() == answer | {"replayed": True}
    assert wc.event_count() == before


def test_a_settlement_and_a_reservation_sent_twice_write_once(
    api: TestClient, wc: WorkCenter
) -> None:
    create(api)
    fence = claim(api)["fence"]
    reserve = {"fence": fence, "requestId": "req-1", "request": REQUEST}
    admitted = api.post("/api/worker/requests/reserve", json=reserve).json()
    assert admitted["allowed"] and not admitted["replayed"]
    written = wc.event_count()
    again = api.post("/api/worker/requests/reserve", json=reserve).json()
    assert again == admitted | {"replayed": True} and wc.event_count() == written
    other = reserve | {"request": {"messages": [], "max_tokens": 9000}}
    refused(wc, api.post("/api/worker/requests/reserve", json=other), 409, "CommandRefused")

    settle = {"fence": fence, "requestId": "req-1", "usage": USAGE}
    settled = api.post("/api/worker/requests/settle", json=settle).json()
    assert settled == {
        "requestId": "req-1",
        "status": "reported",
        "chargedTokens": 52,
        "replayed": False,
    }
    written = wc.event_count()
    assert api.post("/api/worker/requests/settle", json=settle).json() == settled | {
        "replayed": True
    }
    assert wc.event_count() == written
    otherwise = settle | {"usage": {"input_tokens": 1, "output_tokens": 1}}
    refused(wc, api.post("/api/worker/requests/settle", json=otherwise), 409, "CommandRefused")
    unknown = settle | {"requestId": "never-reserved"}
    refused(wc, api.post("/api/worker/requests/settle", json=unknown), 404, "NotFound")
    assert wc.event_count() == written
    budget = wc.ledger(wc.action(fence["actionId"]).work_item_id)
    assert budget.charged_tokens == 52 and budget.request_count == 1


# --- the other verbs --------------------------------------------------------------


def test_input_is_read_and_consumed_by_fence_and_interrupt_keeps_the_progress(
    api: TestClient, wc: WorkCenter
) -> None:
    item = create(api)
    claimed = claim(api)
    fence = claimed["fence"]
    state = wc.work_item(item["id"])
    action = wc.action(fence["actionId"])
    wc.add_input(
        state.id,
        action.id,
        expected_version=state.version,
        expected_generation=action.generation,
        text="Use PostgreSQL",
    )
    pending = api.post("/api/worker/input", json={"fence": fence}).json()["inputs"]
    assert [i["text"] for i in pending] == ["Use PostgreSQL"]
    left = api.post(
        "/api/worker/input/consume", json={"fence": fence, "inputIds": [pending[0]["id"]]}
    )
    assert left.status_code == 200 and left.json() == {"inputs": []}
    # Sent again (a network retry): taken as consumed, nothing written, where it was
    # refused and a worker resending every verb gave its Run up (ADR-0133).
    before = wc.event_count()
    again = api.post(
        "/api/worker/input/consume", json={"fence": fence, "inputIds": [pending[0]["id"]]}
    )
    assert again.status_code == 200 and again.json() == {"inputs": []}
    assert wc.event_count() == before
    never = {"fence": fence, "inputIds": ["00000000-0000-4000-8000-000000000009"]}
    refused(wc, api.post("/api/worker/input/consume", json=never), 409, "CommandRefused")
    assert wc.event_count() == before
    ended = api.post(
        "/api/worker/interrupt",
        json={"fence": fence, "reason": "shutting down", "progress": {"response": "half"}},
    ).json()
    assert ended["runStatus"] == "interrupted" and ended["actionStatus"] == "ready"
    run = wc.action(fence["actionId"]).run(UUID(fence["runId"]))
    assert run is not None and run.progress is not None and run.progress.response == "half"


def test_defer_gives_the_attempt_back(api: TestClient, wc: WorkCenter) -> None:
    create(api)
    fence = claim(api)["fence"]
    ended = api.post("/api/worker/defer", json={"fence": fence}).json()
    assert ended["runStatus"] == "interrupted" and ended["actionStatus"] == "ready"
    assert claim(api)["attempt"] == 1


def test_a_claim_is_by_the_worker_of_the_named_process(api: TestClient, wc: WorkCenter) -> None:
    create(api)
    claimed = claim(api, worker="js-worker", bootId="proc-42")
    assert claimed["fence"]["bootId"] == "proc-42" and claimed["worker"] == "js-worker"
    rows = wc.audit(claimed["workItemId"], type="RunClaimed")
    assert [(r.actor, r.actor_id) for r in rows] == [("worker", "js-worker@proc-42")]
    default = api.post("/api/worker/claim", json={"worker": "w2"})
    assert default.status_code == 204  # nothing else to claim; no boot id: the server's


@pytest.mark.parametrize(
    "body",
    [
        {"worker": ""},
        {"worker": "w", "bootId": "has space"},
        {"worker": "w", "leaseSeconds": 0},
        {"worker": "w", "waitSeconds": 31},
        {"worker": "w", "unknown": 1},
    ],
)
def test_a_malformed_claim_is_refused_and_claims_nothing(
    api: TestClient, wc: WorkCenter, body: dict[str, Any]
) -> None:
    create(api)
    before = wc.event_count()
    refused(wc, api.post("/api/worker/claim", json=body), 422, "InvalidInput")
    assert wc.event_count() == before


def test_the_worker_verbs_are_typed_in_the_openapi_document(api: TestClient) -> None:
    document = api.get("/openapi.json").json()
    for verb in ("claim", *VERBS):
        operation = document["paths"]["/api/worker/" + verb]["post"]
        assert "$ref" in str(operation["requestBody"]["content"]["application/json"]["schema"])
        ok = operation["responses"]["200"]["content"]["application/json"]["schema"]
        assert "$ref" in ok, verb
        conflict = operation["responses"]["409"]["content"]
        assert list(conflict) == ["application/problem+json"]
        assert conflict["application/problem+json"]["schema"] == {
            "$ref": "#/components/schemas/ProblemDocument"
        }
    problem = document["components"]["schemas"]["ProblemDocument"]
    assert problem["required"] == ["type", "title", "status", "detail"]
    assert "204" in document["paths"]["/api/worker/claim"]["post"]["responses"]


# --- a live server ----------------------------------------------------------------


def test_a_long_poll_claim_returns_as_soon_as_work_arrives(db_path: Any) -> None:
    with WorkCenter.open(db_path) as wc, served(create_app(wc)) as url:
        answers: list[httpx.Response] = []

        def wait() -> None:
            answers.append(
                httpx.post(
                    url + "/api/worker/claim",
                    json={"worker": "w1", "waitSeconds": 20},
                    timeout=30,
                )
            )

        waiting = threading.Thread(target=wait)
        waiting.start()
        idle = httpx.post(url + "/api/worker/claim", json={"worker": "w0", "waitSeconds": 0.3})
        assert idle.status_code == 204
        created = httpx.post(url + "/api/work-items", json=LINEAR)
        assert created.status_code == 201
        waiting.join(15)
        assert not waiting.is_alive(), "the long poll did not return when work arrived"
        assert answers[0].status_code == 200 and answers[0].json()["actionType"] == "triage"


def test_a_python_worker_drives_the_protocol_end_to_end_through_httpx(db_path: Any) -> None:
    with WorkCenter.open(db_path) as wc, served(create_app(wc)) as url:
        http = httpx.Client(base_url=url, timeout=30)
        item = http.post("/api/work-items", json=LINEAR).json()
        finished: list[str] = []
        while True:
            answer = http.post("/api/worker/claim", json={"worker": "py", "bootId": "py-1"})
            if answer.status_code == 204:
                break
            claimed = answer.json()
            fence = claimed["fence"]
            assert http.post("/api/worker/renew", json={"fence": fence}).status_code == 200
            request_id = f"{fence['runId']}:1"
            reserve = {"fence": fence, "requestId": request_id, "request": REQUEST}
            assert http.post("/api/worker/requests/reserve", json=reserve).json()["allowed"]
            settle = {"fence": fence, "requestId": request_id, "usage": USAGE}
            assert http.post("/api/worker/requests/settle", json=settle).status_code == 200
            assert http.post("/api/worker/input", json={"fence": fence}).json() == {"inputs": []}
            done = http.post("/api/worker/finish", json={"fence": fence, "report": report(claimed)})
            assert done.status_code == 200, done.text
            finished.append(claimed["actionType"])
        assert finished == ["triage", "implement", "deliver"]
        detail = http.get(f"/api/work-items/{item['id']}").json()
        assert detail["status"] == "done"
        ledger = wc.ledger(UUID(item["id"]))  # each Run's request settled at its usage
        assert (ledger.request_count, ledger.charged_tokens) == (3, 3 * 52)


# --- the service part under bad arguments -------------------------------------------

JUNK: tuple[Any, ...] = (None, "", "x" * 300, -1, 1e309, [], {}, object(), b"\xff")


# Ids that are the same in every process (an object's repr names its address), so that
# parallel test processes collect the same tests.
@pytest.mark.parametrize(
    "junk", JUNK, ids=lambda junk: type(junk).__name__ if type(junk) is object else repr(junk)
)
def test_the_service_part_refuses_junk_with_a_typed_error_and_writes_nothing(
    api: TestClient, wc: WorkCenter, junk: Any
) -> None:
    create(api)
    claimed = claim(api)
    fence = claimed["fence"]
    ref = act.RunRef(
        action_id=UUID(fence["actionId"]),
        run_id=UUID(fence["runId"]),
        boot_id=fence["bootId"],
        lease_epoch=fence["leaseEpoch"],
    )
    protocol = wc.worker_protocol
    calls: list[Callable[[], object]] = [
        lambda: protocol.claim(junk, "boot", 60),
        lambda: protocol.claim("w", junk, 60),
        lambda: protocol.claim("w", "boot", junk),
        lambda: protocol.renew(junk, 60),
        lambda: protocol.renew(ref, junk),
        lambda: protocol.finish(junk, report(claimed)),
        lambda: protocol.finish(ref, junk),
        lambda: protocol.interrupt(ref, junk, None),
        lambda: protocol.interrupt(ref, "", junk),
        lambda: protocol.consume_input(ref, junk),
        lambda: protocol.reserve(junk, "r", REQUEST),
        lambda: protocol.reserve(ref, junk, REQUEST),
        lambda: protocol.reserve(ref, "r", junk),
        lambda: protocol.settle(junk, "r", USAGE, True),
        lambda: protocol.settle(ref, junk, USAGE, True),
        lambda: protocol.settle(ref, "r", junk, True),
        lambda: protocol.settle(ref, "r", USAGE, junk),
    ]
    for call in calls:
        before = wc.event_count()
        try:
            call()
        except WorkcenterError:
            assert wc.event_count() == before, "a refused call wrote events"


def test_a_claim_whose_client_left_while_it_was_made_gives_its_run_back(
    api: TestClient, wc: WorkCenter, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client that gave up on its claim (its timeout ran out while the claim waited
    for a connection, ADR-0095) reads no answer: the Run it would have held until its
    lease ran out is given back at once, its attempt too (ADR-0098)."""
    item = create(api)
    protocol = wc.worker_protocol
    made = threading.Event()

    def claim_then_leave(*args: Any) -> Any:
        claimed = type(protocol).claim(protocol, *args)
        made.set()
        return claimed

    monkeypatch.setattr(protocol, "claim", claim_then_leave)
    body = orjson.dumps({"worker": "w1", "bootId": "boot-1"})
    received: list[bool] = []
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        if not received:
            received.append(True)
            return {"type": "http.request", "body": body, "more_body": False}
        if made.is_set():
            return {"type": "http.disconnect"}
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/api/worker/claim",
        "raw_path": b"/api/worker/claim",
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"127.0.0.1:8765"),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8765),
    }
    anyio.run(api.app, scope, receive, send)

    assert made.is_set()
    assert sent[0]["status"] == 204
    (action,) = wc.actions(wc.work_item(UUID(item["id"]))).values()
    (run,) = action.runs
    assert (action.status, run.deferred, run.end_reason) == (
        "ready",
        True,
        act.UNANSWERED_REASON,
    )
    assert claim(api)["attempt"] == 1


def test_token_counts_past_two_to_the_53_are_held_to_it(api: TestClient, wc: WorkCenter) -> None:
    """Each usage count is at most 2^53 - 1, but a request's total and an item's sums
    were not: a JavaScript client read 9007199254740992 for a settlement's charge, and
    the budget's sums grew past it (found by acceptance testing)."""
    most = 2**53 - 1
    item = create(api, limits={"maxTokens": most})
    fence = claim(api)["fence"]
    for request_id in ("req-1", "req-2"):
        reserve = {"fence": fence, "requestId": request_id, "request": REQUEST}
        assert api.post("/api/worker/requests/reserve", json=reserve).json()["allowed"]
    usage = {"input_tokens": most, "output_tokens": 1}
    charged = [
        api.post(
            "/api/worker/requests/settle",
            json={"fence": fence, "requestId": request_id, "usage": usage},
        ).json()["chargedTokens"]
        for request_id in ("req-1", "req-2")
    ]
    assert charged == [most, most]
    budget = api.get(f"/api/work-items/{item['id']}/budget").json()
    control = budget.get("executionControl", budget)
    assert control["usage"]["chargedTokens"] == most
    assert control["usage"]["totalTokens"] == most
    assert control["stopReason"]["code"] == "work_item_tokens_exhausted"
    assert max(_numbers(budget)) <= most, orjson.dumps(budget).decode()


def _numbers(document: Any) -> list[int]:
    if isinstance(document, dict):
        return [n for value in document.values() for n in _numbers(value)]
    if isinstance(document, list):
        return [n for value in document for n in _numbers(value)]
    return [document] if isinstance(document, int) and not isinstance(document, bool) else []


def test_the_openapi_document_stands_alone(api: TestClient) -> None:
    """It named sections of design notes a client does not have ("lifecycle.md 3.4"),
    and said nothing of the rules a finish is judged by (found by acceptance testing)."""
    document = api.get("/openapi.json").text
    assert not re.search(r"[a-z-]+\.md\b", document)
    schemas = api.get("/openapi.json").json()["components"]["schemas"]
    assert "exactly one acceptance check per criterion" in schemas["Report"]["description"]
    assert "Other items are dropped" in schemas["Report"]["properties"]["evidence"]["description"]
    assert "does not count" in schemas["Check"]["description"]


def test_a_body_the_json_reader_gives_up_on_is_said_in_our_words(
    api: TestClient, wc: WorkCenter
) -> None:
    """The framework's "There was an error parsing the body" was sent as it was."""
    create(api)
    response = api.post(
        "/api/worker/claim",
        content=b'{"worker": "w\xe9"}',
        headers={"content-type": "application/json"},
    )
    refused(wc, response, 400, "BadRequest")
    assert response.json()["detail"] == "the body is not UTF-8 text"
    assert claim(api)["attempt"] == 1  # nothing was claimed by the refused one


@pytest.mark.parametrize(
    ("cause", "said"),
    [
        (RecursionError(), "the body's JSON nests too deeply"),
        (ValueError(), "the body cannot be read as JSON"),
    ],
)
def test_why_the_json_reader_gave_up_is_said(cause: Exception, said: str) -> None:
    """How deep the reader goes depends on the interpreter's recursion limit, which
    other code may raise, so the nesting that makes it give up is not sent here."""
    from starlette.exceptions import HTTPException

    from workcenter.adapters.http.problems import _unreadable_body

    error = HTTPException(400, "There was an error parsing the body")
    error.__cause__ = cause
    assert _unreadable_body(error) == said
    assert _unreadable_body(HTTPException(404)) is None
