"""The demo: one dynamic WorkItem carried from goal to done by its Coordinator, a
worker and a scripted executor.

It walks the main paths on the embedded default: the scripted Coordinator plans
the Actions when the item starts, a retryable failure is retried automatically,
an Action waits for a human, the Coordinator asks the question once and passes
the human's message on as guidance, every criterion is proven by evidence, and
the Coordinator completes the item only once goal progress says the proof is
current and fresh.

Every scripted LLM request, the Coordinator's and the Actions', is admitted and
settled by the item's ResourceLedger. With a budget too small for the script
the ledger stops the item: the demo then ends needing attention, without
completing it, and no request past the budget reaches a provider.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import orjson

from workcenter.adapters.metered import MeteredProvider
from workcenter.adapters.providers.scripted_coordinator import scripted_coordinator
from workcenter.adapters.worker import WorkerStats, run_one
from workcenter.application import Claim, WorkCenter
from workcenter.coordinating import StepResult
from workcenter.domain.errors import ResourceStopError
from workcenter.ports import CoordinatorProvider

CRITERIA = (
    "The failing import is reproduced by a test",
    "The fix makes the whole test suite pass",
    "The change is explained in a short summary",
)
HUMAN_QUESTION = "Which Python version must the test matrix cover?"
HUMAN_ANSWER = "3.11 and 3.12"


def _checks(statuses: tuple[str, str, str]) -> list[dict[str, str]]:
    return [
        {"criterion": c, "status": s, "evidence": f"{s} per the run's log"}
        for c, s in zip(CRITERIA, statuses, strict=True)
    ]


SYSTEM_PROMPT = (
    "You are a careful software engineer working on one Action of a WorkItem. "
    "Follow the brief, keep changes minimal, run the relevant tests, and report "
    "evidence for every acceptance criterion: the command you ran, what it printed, "
    "and whether the criterion passed. If you need information only a human has, "
    "stop and ask one precise question instead of guessing. Never claim a check "
    "passed without evidence from this Run."
)
MAX_OUTPUT_TOKENS = 512
OUTPUT_TOKENS = 200

LlmCall = Callable[[str], str]


class ScriptedProvider:
    """A fake LLM provider with realistic usage: input about the prompt's size (four
    bytes a token), 200 output tokens. It counts the requests that reached it."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, request: Mapping[str, Any]) -> dict[str, Any]:
        self.calls += 1
        prompt = {key: request[key] for key in ("system", "messages") if key in request}
        return {
            "content": f"ok ({self.calls})",
            "stop_reason": "end_turn",
            "usage": {
                "input_tokens": math.ceil(len(orjson.dumps(prompt)) / 4),
                "output_tokens": OUTPUT_TOKENS,
            },
        }


def llm_request(prompt: str) -> dict[str, Any]:
    return {
        "system": SYSTEM_PROMPT,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": MAX_OUTPUT_TOKENS,
    }


def metered_llm(wc: WorkCenter, provider: ScriptedProvider) -> Callable[[Claim], LlmCall]:
    """Per claim, a metered provider around ``provider``, billed to the claim's Run."""

    def for_claim(claim: Claim) -> LlmCall:
        metered = MeteredProvider.for_claim(wc, claim, provider=provider)

        def call(prompt: str) -> str:
            return str(metered(llm_request(prompt))["content"])

        return call

    return for_claim


class ScriptedExecutor:
    """Answers like an agent would, following a fixed script per Action type and attempt.

    ``llm_for(claim)`` gives the seam every scripted LLM request of that claim goes
    through, so a metered provider can wrap it per Run. A request the ResourceLedger
    denies ends the Run ``failed`` with failure kind ``resource_limit``.
    """

    def __init__(self, llm_for: Callable[[Claim], LlmCall] | None = None) -> None:
        self.llm_for = llm_for or (lambda _claim: lambda prompt: f"ok: {prompt[:40]}")
        self.calls: dict[str, int] = {}

    def __call__(self, claim: Claim) -> dict[str, Any]:
        self.calls[claim.action_type] = self.calls.get(claim.action_type, 0) + 1
        llm = self.llm_for(claim)
        try:
            llm(f"{claim.action_type}: {claim.brief.objective}")
        except ResourceStopError as stop:
            return {
                "outcome": "failed",
                "summary": "The ResourceLedger refused the next LLM request.",
                "error": str(stop),
                "failureKind": stop.failure_kind,
                "failureCode": stop.code,
            }
        answered = any(
            HUMAN_ANSWER in (e.text or "") + (e.waiting_reason or "") for e in claim.context
        )
        match claim.action_type, self.calls[claim.action_type]:
            case "diagnose", _:
                return {
                    "outcome": "completed",
                    "summary": "The package init imports a module removed in 2.0.",
                    "evidence": ["pytest -k import: 1 failed (reproduced)"],
                    "acceptanceChecks": _checks(("passed", "deferred", "deferred")),
                }
            case "implement", 1:
                return {
                    "outcome": "retryable",
                    "summary": "The sandbox lost its network while installing dependencies.",
                    "error": "pip: connection reset",
                }
            case "implement", _:
                return {
                    "outcome": "completed",
                    "summary": "Replaced the removed import and added test_import.",
                    "evidence": ["pytest: 48 passed", {"tool": "bash", "isError": False}],
                    "outputs": [
                        {"kind": "file", "label": "package init", "ref": "src/pkg/__init__.py"}
                    ],
                    "acceptanceChecks": _checks(("passed", "passed", "deferred")),
                }
            case "test", _ if not answered:
                return {"outcome": "waiting", "waitingReason": HUMAN_QUESTION}
            case "test", _:
                return {
                    "outcome": "completed",
                    "summary": "Import fixed; regression test added; suite green on 3.11 and 3.12.",
                    "response": "The import error came from a module removed in 2.0; fixed.",
                    "evidence": [
                        {"kind": "test", "label": "pytest on 3.11: 48 passed", "status": "passed"},
                        {"kind": "test", "label": "pytest on 3.12: 48 passed", "status": "passed"},
                    ],
                    "acceptanceChecks": _checks(("passed", "passed", "passed")),
                }
        return {"outcome": "failed", "error": f"no script for {claim.action_type}"}


def run_demo(
    wc: WorkCenter,
    *,
    say: Callable[[str], None] = lambda _: None,
    executor: ScriptedExecutor | None = None,
    provider: ScriptedProvider | None = None,
    coordinator: CoordinatorProvider | None = None,
    limits: Mapping[str, int] | None = None,
) -> Any:
    """Run the scenario; returns the WorkItem id.

    Without ``executor``, the scripted one sends its requests to ``provider`` (a new
    ``ScriptedProvider`` by default) through a metered provider per claim; the
    Coordinator is ``coordinator`` (the scripted one by default). When the ledger
    stops the item (``limits`` too small), the demo ends there: the item needs
    attention and is not completed.
    """
    provider = provider or ScriptedProvider()
    executor = executor or ScriptedExecutor(metered_llm(wc, provider))
    coordinator = coordinator or scripted_coordinator()
    item = wc.create_work_item(
        title="Fix the failing import in the test suite",
        goal="The test suite passes again and the cause is explained",
        acceptance_criteria=list(CRITERIA),
        delivery_target="response",
        start=True,
        limits=limits,
    )
    say(f"created WorkItem {item.id} ({len(CRITERIA)} criteria, delivery: response)")
    stats = WorkerStats()

    def on_event(kind: str, claim: Claim, detail: str) -> None:
        if kind == "claimed":
            say(
                f"  worker claimed {claim.action_type} "
                f"(attempt {claim.attempt}, epoch {claim.lease_epoch})"
            )
        else:
            say(f"  {claim.action_type} {kind}: {detail}")

    answered = False
    for _ in range(MAX_ROUNDS):
        steps = wc.coordinate_once(coordinator)
        for step in steps:
            say(_coordinator_line(wc, step))
        item = wc.work_item(item.id)
        if item.status == "done" or item.stopped:
            break
        if item.status == "waiting" and _asked(wc, item.id) and not answered:
            say(f"  human answers {HUMAN_QUESTION!r} with {HUMAN_ANSWER!r}")
            wc.post_user_message(item.id, HUMAN_ANSWER, client_message_id="demo-answer")
            answered = True
            continue
        ran = run_one(wc, executor, worker="demo-worker", stats=stats, on_event=on_event)
        if ran is None and not steps:
            break

    item = wc.work_item(item.id)
    if item.stopped:
        ledger = wc.ledger(item.id)
        say(
            f"stopped by its budget: {item.stopped} after {ledger.request_count} LLM requests, "
            f"{ledger.charged_tokens} of {ledger.limits.max_tokens} tokens charged; "
            f"WorkItem is {item.status}, not completed"
        )
        return item.id
    progress = wc.goal_progress(item.id)
    say(
        f"goal progress: {progress.completed_criteria_count}/{progress.total_criteria_count} "
        f"criteria passed, delivery {progress.delivery.status}"
    )
    say(
        f"completed: WorkItem is {item.status}"
        if item.status == "done"
        else f"WorkItem is {item.status}"
    )
    return item.id


# Enough passes for the script (plan, four Runs, a question, an answer, completion).
MAX_ROUNDS = 40


def _asked(wc: WorkCenter, item_id: Any) -> bool:
    """The Coordinator's latest message asks the human something."""
    conversation = wc.conversation(item_id)
    last = conversation.messages[-1] if conversation and conversation.messages else None
    return bool(last and last.role == "assistant" and last.decision and last.decision.question)


def _coordinator_line(wc: WorkCenter, step: StepResult) -> str:
    conversation = wc.conversation(step.work_item_id)
    turn = conversation.turns.get(step.turn_id) if conversation and step.turn_id else None
    message = conversation.message(turn.assistant_message_id) if conversation and turn else None
    if message is None or message.decision is None:
        return f"  coordinator turn {step.status}: {step.error or ''}".rstrip(": ")
    origin = "answering the human" if turn and turn.user_originated else "woken"
    return f"  coordinator ({origin}) decided {message.decision.kind}: {message.text}"
