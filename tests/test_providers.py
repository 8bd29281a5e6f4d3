"""The Coordinator's providers: the scripted one, and the OpenAI-compatible adapter
against a stub chat-completions server on 127.0.0.1 that the tests start."""

from __future__ import annotations

import contextlib
import gzip
import json
import sys
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from workcenter.adapters.providers import openai_compatible
from workcenter.adapters.providers.openai_compatible import OpenAICompatibleProvider
from workcenter.adapters.providers.scripted import (
    Failure,
    Reply,
    ScriptedProvider,
    permanent,
    transient,
)
from workcenter.domain import resource_ledger as rl
from workcenter.domain.errors import (
    InvalidInput,
    ProviderFailed,
    ResourceStopError,
    TurnFenceLost,
    WorkcenterError,
)
from workcenter.service_layer.ports import ProviderTurnRequest

# A stand-in for the decision schema (the decisions module builds the real one).
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "reply": {"type": "string"},
        "decision": {
            "type": "object",
            "properties": {"kind": {"enum": ["answer", "complete"]}},
            "required": ["kind"],
        },
    },
    "required": ["reply", "decision"],
}
DECISION = {"reply": "Nothing to do yet.", "decision": {"kind": "answer"}}
USAGE = {"prompt_tokens": 120, "completion_tokens": 30, "total_tokens": 150}


def request(
    attempt: int = 1, correction: str | None = None, max_output_tokens: int | None = None
) -> ProviderTurnRequest:
    messages = [
        {"role": "system", "content": "You coordinate one WorkItem."},
        {"role": "user", "content": "What next?"},
    ]
    if correction is not None:
        messages.append({"role": "user", "content": correction})
    return ProviderTurnRequest(
        turn_id="turn-1",
        attempt=attempt,
        messages=tuple(messages),
        reply_schema=SCHEMA,
        max_output_tokens=max_output_tokens,
    )


class Counter:
    """A ``before_request`` that counts its calls, optionally raising on the n-th."""

    def __init__(self, error: BaseException | None = None, on_call: int = 1) -> None:
        self.calls = 0
        self.error = error
        self.on_call = on_call

    def __call__(self) -> None:
        self.calls += 1
        if self.error is not None and self.calls == self.on_call:
            raise self.error


# --- the stub server -------------------------------------------------------------


def completion(content: str | None, usage: dict[str, Any] | None = USAGE, **message: Any) -> Any:
    body: dict[str, Any] = {
        "id": "chatcmpl-stub",
        "object": "chat.completion",
        "created": 0,
        "model": "stub-model",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content, **message},
                "finish_reason": "stop",
            }
        ],
    }
    if usage is not None:
        body["usage"] = usage
    return body


def error(status: int, message: str) -> tuple[int, Any, dict[str, str]]:
    # retry-after-ms keeps the client's own retries quick
    body = {"error": {"message": message, "type": "stub", "code": None}}
    return status, body, {"retry-after-ms": "1"}


@dataclass
class Stub:
    """Answers queued (status, body, headers); records every request it received."""

    url: str
    answers: deque[tuple[int, Any, dict[str, str]]] = field(default_factory=deque)
    received: list[dict[str, Any]] = field(default_factory=list)
    delay: float = 0.0
    trickle: float = 0.0  # seconds between pieces of 16 bytes of a body, when above 0

    def answer(
        self, status: int = 200, body: Any = None, headers: dict[str, str] | None = None
    ) -> None:
        self.answers.append((status, body, headers or {}))

    def reply(self, content: str | None, usage: dict[str, Any] | None = USAGE) -> None:
        self.answer(200, completion(content, usage))

    def fail(self, status: int, message: str = "stub error") -> None:
        self.answers.append(error(status, message))

    @property
    def bodies(self) -> list[dict[str, Any]]:
        return [entry["body"] for entry in self.received]


@pytest.fixture
def stub() -> Iterator[Stub]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    state = Stub(url=f"http://127.0.0.1:{server.server_address[1]}/v1")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("content-length", "0")))
            state.received.append(
                {
                    "path": self.path,
                    "headers": {k.lower(): v for k, v in self.headers.items()},
                    "body": json.loads(raw),
                }
            )
            time.sleep(state.delay)
            status, body, headers = (
                state.answers.popleft() if state.answers else error(500, "no answer queued")
            )
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            self.send_response(status)
            headers = {"content-type": "application/json"} | headers
            self.send_header("content-length", str(len(data)))
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            if not state.trickle:
                # A reply past the provider's bound is left unread: the client closes
                # while this still writes (a traceback on the test's output, no failure).
                with contextlib.suppress(OSError):
                    self.wfile.write(data)
                return
            for start in range(0, len(data), 16):
                try:
                    self.wfile.write(data[start : start + 16])
                    self.wfile.flush()
                except OSError:
                    return  # the client gave up on it
                time.sleep(state.trickle)

        def log_message(self, *args: Any) -> None:
            pass

    server.RequestHandlerClass = Handler
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def provider(stub: Stub, **options: Any) -> OpenAICompatibleProvider:
    settings: dict[str, Any] = {"base_url": stub.url, "model": "stub-model", "api_key": "sk-test"}
    return OpenAICompatibleProvider(**{**settings, **options})


# --- the OpenAI-compatible adapter ---------------------------------------------------


def test_a_structured_decision_comes_back_as_its_text_with_usage(stub: Stub) -> None:
    stub.reply(json.dumps(DECISION))
    before = Counter()
    reply = provider(stub).answer(request(), before)
    assert json.loads(reply.text) == DECISION
    assert before.calls == 1
    assert len(stub.received) == 1
    sent = stub.received[0]
    assert sent["path"] == "/v1/chat/completions"
    assert sent["headers"]["authorization"] == "Bearer sk-test"
    assert sent["body"]["model"] == "stub-model"
    assert sent["body"]["messages"] == list(request().messages)


def test_a_bounded_request_sends_its_bound_and_an_unbounded_one_none(stub: Stub) -> None:
    """The bound the provider declared reaches the server as the request carries it
    (the Coordinator reserved that much for the reply)."""
    llm = provider(stub, max_output_tokens=2_048)
    assert llm.max_output_tokens == 2_048
    for _ in range(2):
        stub.reply(json.dumps(DECISION))
    llm.answer(request(max_output_tokens=2_048), Counter())
    llm.answer(request(), Counter())
    assert stub.bodies[0]["max_tokens"] == 2_048
    assert "max_tokens" not in stub.bodies[1]


def test_the_request_asks_for_the_reply_schema(stub: Stub) -> None:
    stub.reply(json.dumps(DECISION))
    provider(stub).answer(request(), Counter())
    assert stub.bodies[0]["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "coordinator_reply", "schema": SCHEMA, "strict": False},
    }


def test_usage_is_reported_in_the_ledgers_terms(stub: Stub) -> None:
    usage = {**USAGE, "prompt_tokens_details": {"cached_tokens": 100}}
    stub.reply(json.dumps(DECISION), usage=usage)
    reply = provider(stub).answer(request(), Counter())
    assert rl.normalize_usage(reply.usage) == rl.Usage(
        input_tokens=120, output_tokens=30, cache_read_tokens=100, total_tokens=150
    )


@pytest.mark.parametrize("usage", [None, "n/a", 12, ["prompt_tokens"]])
def test_a_server_that_reports_no_usage_reports_none(stub: Stub, usage: Any) -> None:
    """Of another shape, it failed the turn with an AttributeError, the decision lost."""
    stub.reply(json.dumps(DECISION), usage=usage)
    reply = provider(stub).answer(request(), Counter())
    assert reply.usage is None and json.loads(reply.text) == DECISION


def test_a_malformed_reply_is_returned_and_the_corrective_attempt_carries_the_correction(
    stub: Stub,
) -> None:
    """The adapter does not judge the text; the core does, and sends attempt 2."""
    stub.reply("I think we should {plan something")
    stub.reply(json.dumps(DECISION))
    llm = provider(stub)
    first = llm.answer(request(), Counter())
    with pytest.raises(json.JSONDecodeError):
        json.loads(first.text)
    correction = "Your reply was not JSON; answer with one object matching the schema."
    second = llm.answer(request(attempt=2, correction=correction), Counter())
    assert json.loads(second.text) == DECISION
    assert len(stub.received) == 2
    assert correction not in json.dumps(stub.bodies[0])
    assert stub.bodies[1]["messages"][-1] == {"role": "user", "content": correction}


def test_a_rate_limit_retried_by_the_client_reserves_each_attempt(stub: Stub) -> None:
    stub.fail(429, "slow down")
    stub.reply(json.dumps(DECISION))
    before = Counter()
    reply = provider(stub, max_retries=2).answer(request(), before)
    assert json.loads(reply.text) == DECISION
    assert before.calls == 2  # the hidden retry is charged too
    assert len(stub.received) == 2


def test_a_rate_limit_past_the_retries_is_a_transient_failure(stub: Stub) -> None:
    stub.fail(429, "slow down")
    stub.fail(429, "slow down")
    before = Counter()
    with pytest.raises(ProviderFailed, match="429") as failed:
        provider(stub, max_retries=1).answer(request(), before)
    assert failed.value.transient is True
    assert before.calls == 2
    assert len(stub.received) == 2


@pytest.mark.parametrize(("status", "transient"), [(400, False), (401, False), (404, False)])
def test_a_client_error_is_permanent_and_not_retried(
    stub: Stub, status: int, transient: bool
) -> None:
    stub.fail(status, "schema not supported")
    before = Counter()
    with pytest.raises(ProviderFailed, match="schema not supported") as failed:
        provider(stub, max_retries=2).answer(request(), before)
    assert failed.value.transient is transient
    assert before.calls == 1
    assert len(stub.received) == 1


@pytest.mark.parametrize("status", [408, 500, 503])
def test_server_errors_and_server_timeouts_are_transient(stub: Stub, status: int) -> None:
    stub.fail(status)
    with pytest.raises(ProviderFailed) as failed:
        provider(stub, max_retries=0).answer(request(), Counter())
    assert failed.value.transient is True


def test_a_timeout_is_transient(stub: Stub) -> None:
    stub.delay = 1.0
    stub.reply(json.dumps(DECISION))
    before = Counter()
    with pytest.raises(ProviderFailed, match="timed out") as failed:
        provider(stub, timeout=0.1, max_retries=0).answer(request(), before)
    assert failed.value.transient is True
    assert before.calls == 1


def test_a_reply_sent_a_few_bytes_at_a_time_times_out_as_a_whole(stub: Stub) -> None:
    """Each read within the timeout, the reply not: it held the turn for as long as the
    server went on (59 s on a 2 s timeout, found by acceptance testing, ADR-0140)."""
    stub.trickle = 0.15
    stub.reply(json.dumps(DECISION))  # some 30 pieces: over 4 s
    started = time.monotonic()
    with pytest.raises(ProviderFailed, match="timed out") as failed:
        provider(stub, timeout=0.5, max_retries=0).answer(request(), Counter())
    assert failed.value.transient is True
    assert time.monotonic() - started < 2.5


def test_an_unreachable_server_is_transient() -> None:
    with ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler) as closed:
        port = closed.server_address[1]  # bound, then closed: nothing listens there
    llm = OpenAICompatibleProvider(
        base_url=f"http://127.0.0.1:{port}/v1", model="m", max_retries=0, timeout=5
    )
    before = Counter()
    with pytest.raises(ProviderFailed) as failed:
        llm.answer(request(), before)
    assert failed.value.transient is True
    assert before.calls == 1


def test_a_refusal_is_a_permanent_failure(stub: Stub) -> None:
    stub.answer(200, completion(None, refusal="I cannot help with that."))
    with pytest.raises(ProviderFailed, match="refused") as failed:
        provider(stub).answer(request(), Counter())
    assert failed.value.transient is False


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        ({"choices": []}, "application/json"),
        ({}, "application/json"),
        (b"<html>busy</html>", "application/json"),
        ([1, 2], "application/json"),
        ("text", "application/json"),
        (7, "application/json"),
        (None, "application/json"),
        (b"<html>busy</html>", "text/html"),
        (b"busy", "text/plain"),
    ],
)
def test_an_answer_that_is_not_a_completion_is_a_permanent_failure(
    stub: Stub, body: Any, content_type: str
) -> None:
    """Said in the project's words: "'str' object has no attribute 'usage'" reached the
    conversation."""
    stub.answer(200, body, {"content-type": content_type})
    with pytest.raises(ProviderFailed) as failed:
        provider(stub).answer(request(), Counter())
    assert failed.value.transient is False
    assert "attribute" not in str(failed.value) and "object" not in str(failed.value)


def test_a_closed_provider_fails_and_sends_nothing(stub: Stub) -> None:
    llm = provider(stub, max_retries=0)
    llm.close()
    with pytest.raises(ProviderFailed):
        llm.answer(request(), Counter())
    assert stub.received == []


@pytest.mark.parametrize(
    "denial", [ResourceStopError("work_item_tokens_exhausted"), TurnFenceLost("claim lost")]
)
def test_a_refusing_before_request_sends_nothing_and_propagates_unchanged(
    stub: Stub, denial: WorkcenterError
) -> None:
    stub.reply(json.dumps(DECISION))
    with pytest.raises(type(denial)) as raised:
        provider(stub).answer(request(), Counter(denial))
    assert raised.value is denial
    assert stub.received == []


def test_a_denial_before_a_hidden_retry_stops_the_retries(stub: Stub) -> None:
    stub.fail(429, "slow down")
    stub.reply(json.dumps(DECISION))
    denial = ResourceStopError("work_item_requests_exhausted")
    before = Counter(denial, on_call=2)
    with pytest.raises(ResourceStopError) as raised:
        provider(stub, max_retries=3).answer(request(), before)
    assert raised.value is denial
    assert len(stub.received) == 1


def test_each_call_charges_only_its_own_before_request(stub: Stub) -> None:
    """One provider shared by threads: the hook finds the caller's callback."""
    llm = provider(stub)
    stub.delay = 0.2
    counters = [Counter(), Counter()]
    for _ in counters:
        stub.reply(json.dumps(DECISION))
    threads = [
        threading.Thread(target=llm.answer, args=(request(), counter)) for counter in counters
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [counter.calls for counter in counters] == [1, 1]
    assert len(stub.received) == 2


def test_without_the_openai_package_the_error_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "openai", None)
    with pytest.raises(WorkcenterError, match=r"pip install 'workcenter\[llm\]'"):
        OpenAICompatibleProvider(base_url="http://127.0.0.1:1/v1", model="m")


@pytest.mark.parametrize(
    "options",
    [
        {"base_url": "127.0.0.1:8000"},
        {"base_url": "ftp://host/v1"},
        {"base_url": "http:///v1"},
        {"model": " "},
        {"timeout": 0},
        {"timeout": float("nan")},
        {"timeout": True},
        {"max_retries": -1},
        {"max_retries": 11},
        {"max_retries": 1.5},
        {"max_output_tokens": 0},
        {"max_output_tokens": True},
        {"max_output_tokens": 1.5},
    ],
)
def test_bad_settings_are_invalid_input(options: dict[str, Any]) -> None:
    settings: dict[str, Any] = {"base_url": "http://127.0.0.1:1/v1", "model": "m", **options}
    with pytest.raises(InvalidInput):
        OpenAICompatibleProvider(**settings)


def test_settings_from_the_environment(stub: Stub) -> None:
    llm = OpenAICompatibleProvider.from_env(
        {
            "WORKCENTER_LLM_BASE_URL": stub.url,
            "WORKCENTER_LLM_MODEL": "local-model",
            "WORKCENTER_LLM_API_KEY": "sk-env",
            "WORKCENTER_LLM_TIMEOUT": "7.5",
            "WORKCENTER_LLM_MAX_RETRIES": "0",
            "WORKCENTER_LLM_MAX_OUTPUT_TOKENS": "4096",
        }
    )
    assert (llm.model, llm.timeout, llm.max_retries) == ("local-model", 7.5, 0)
    assert llm.max_output_tokens == 4_096
    stub.reply(json.dumps(DECISION))
    llm.answer(request(), Counter())
    assert stub.received[0]["headers"]["authorization"] == "Bearer sk-env"
    assert stub.bodies[0]["model"] == "local-model"


@pytest.mark.parametrize(
    "env",
    [
        {},
        {"WORKCENTER_LLM_BASE_URL": "http://127.0.0.1:1/v1"},
        {
            "WORKCENTER_LLM_BASE_URL": "http://h/v1",
            "WORKCENTER_LLM_MODEL": "m",
            "WORKCENTER_LLM_TIMEOUT": "soon",
        },
    ],
)
def test_incomplete_environment_is_invalid_input(env: dict[str, str]) -> None:
    with pytest.raises(InvalidInput, match="WORKCENTER_LLM_"):
        OpenAICompatibleProvider.from_env(env)


def test_a_local_server_needs_no_key(stub: Stub, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    stub.reply(json.dumps(DECISION))
    OpenAICompatibleProvider(base_url=stub.url, model="m").answer(request(), Counter())
    assert stub.received[0]["headers"]["authorization"] == "Bearer EMPTY"


# --- the scripted provider -----------------------------------------------------------


def test_the_scripted_provider_plays_its_script_in_order() -> None:
    scripted = ScriptedProvider([Reply(DECISION, usage={"input_tokens": 5}), "plain text"])
    before = Counter()
    first = scripted.answer(request(), before)
    second = scripted.answer(request(attempt=2), before)
    assert json.loads(first.text) == DECISION
    assert first.usage == {"input_tokens": 5}
    assert (second.text, second.usage) == ("plain text", None)
    assert before.calls == 2
    assert [sent.attempt for sent in scripted.requests] == [1, 2]
    assert scripted.remaining == 0


def test_hidden_retries_call_before_request_once_per_attempt() -> None:
    scripted = ScriptedProvider([Reply("ok", attempts=3)])
    before = Counter()
    assert scripted.answer(request(), before).text == "ok"
    assert before.calls == 3
    assert len(scripted.requests) == 3
    assert scripted.calls == 1


@pytest.mark.parametrize(("step", "is_transient"), [(transient(), True), (permanent(), False)])
def test_failures_on_cue(step: Failure, is_transient: bool) -> None:
    scripted = ScriptedProvider([step, "after"])
    before = Counter()
    with pytest.raises(ProviderFailed) as failed:
        scripted.answer(request(), before)
    assert failed.value.transient is is_transient
    assert before.calls == 1  # the failing request was sent
    assert scripted.answer(request(), before).text == "after"


def test_a_failure_after_hidden_retries_charges_every_attempt() -> None:
    scripted = ScriptedProvider([transient("503 three times", attempts=3)])
    before = Counter()
    with pytest.raises(ProviderFailed, match="503"):
        scripted.answer(request(), before)
    assert before.calls == 3


def test_any_exception_can_stand_for_a_crash_mid_call() -> None:
    class Killed(BaseException):
        pass

    scripted = ScriptedProvider([Failure(Killed())])
    before = Counter()
    with pytest.raises(Killed):
        scripted.answer(request(), before)
    assert before.calls == 1


def test_a_denied_first_attempt_keeps_the_step_for_the_next_call() -> None:
    scripted = ScriptedProvider(["the answer"])
    denial = ResourceStopError("work_item_tokens_exhausted")
    with pytest.raises(ResourceStopError) as raised:
        scripted.answer(request(), Counter(denial))
    assert raised.value is denial
    assert scripted.requests == []
    assert scripted.remaining == 1
    assert scripted.answer(request(), Counter()).text == "the answer"


def test_a_denied_hidden_retry_spends_the_step() -> None:
    scripted = ScriptedProvider([Reply("late", attempts=2), "next"])
    with pytest.raises(ResourceStopError):
        scripted.answer(request(), Counter(ResourceStopError("stopped"), on_call=2))
    assert len(scripted.requests) == 1
    assert scripted.answer(request(), Counter()).text == "next"


def test_a_function_answers_past_the_script() -> None:
    seen: list[int] = []

    def respond(sent: Any) -> str:
        seen.append(sent.attempt)
        return f"answer to attempt {sent.attempt}"

    scripted = ScriptedProvider(["scripted"], respond=respond)
    assert scripted.answer(request(), Counter()).text == "scripted"
    assert scripted.answer(request(attempt=2), Counter()).text == "answer to attempt 2"
    assert seen == [2]


def test_an_exhausted_script_is_a_permanent_failure_and_sends_nothing() -> None:
    scripted = ScriptedProvider()
    before = Counter()
    with pytest.raises(ProviderFailed, match="no step left") as failed:
        scripted.answer(request(), before)
    assert failed.value.transient is False
    assert before.calls == 0


@pytest.mark.parametrize("step", [Reply("x", attempts=0), Failure(ValueError(), attempts=True), 42])
def test_a_malformed_step_is_invalid_input(step: Any) -> None:
    with pytest.raises(InvalidInput):
        ScriptedProvider([step])


def test_a_reply_past_its_size_fails_and_is_not_read_on(
    stub: Stub, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing bounded a reply's size: a body of gigabytes was read into memory whole
    (ADR-0142). Requests ask for replies uncompressed, so the body's size is its size."""
    monkeypatch.setattr(openai_compatible, "MAX_REPLY_BYTES", 4096)
    stub.reply(json.dumps(DECISION) + " " * 8000)  # JSON with trailing space: 8 KB
    with pytest.raises(ProviderFailed, match="larger than 4096 bytes") as failed:
        provider(stub, max_retries=0).answer(request(), Counter())
    assert failed.value.transient is True
    assert stub.received[0]["headers"]["accept-encoding"] == "identity"
    stub.reply(json.dumps(DECISION))  # a reply within the bound is read as before
    reply = provider(stub, max_retries=0).answer(request(), Counter())
    assert json.loads(reply.text) == DECISION


def test_a_compressed_reply_is_refused_unread(stub: Stub) -> None:
    """Its size is unknown until it is unpacked (a small body may unpack to gigabytes)."""
    packed = gzip.compress(json.dumps(completion(json.dumps(DECISION))).encode())
    stub.answer(200, packed, {"content-encoding": "gzip"})
    with pytest.raises(ProviderFailed, match="came compressed"):
        provider(stub, max_retries=0).answer(request(), Counter())
