"""A scripted Coordinator: decides from the snapshot in its request, as a model would,
with fixed rules instead of a model (the demo's, and the CLI's ``scripted`` provider).

It reads the WorkItem snapshot and the turn's input from the request
(``coordinator_request``'s framing) and answers one decision:

- a user's turn with an Action waiting for an answer: guide that Action with the
  user's text;
- the goal met (every criterion passed, the delivery evidenced) and nothing
  running: complete, citing the Runs goal progress lists;
- an Action waiting: ask the human its question; one that failed: ask what to do;
- nothing left to do and the goal not met: plan the script's Actions whose type has
  not completed yet (only read Actions while no delivery target is set, so it asks
  for the target first);
- otherwise: answer (a user's turn) or ask the human (an automatic one).
"""

from __future__ import annotations

import json
import math
from typing import Any

from workcenter.adapters.providers.scripted import Reply, ScriptedProvider
from workcenter.domain.coordinator_request import (
    CORRECTION_HEADING,
    PROMPT_HEADING,
    SNAPSHOT_HEADING,
)
from workcenter.ports import ProviderRequest

OPEN = ("ready", "running", "waiting", "failed")
# The script's plan: three Actions a software fix needs (the demo's executor answers them).
PLAN: tuple[dict[str, str], ...] = (
    {
        "type": "diagnose",
        "objective": "Reproduce the failing import and find its root cause",
        "approach": "Run the suite, bisect the failing module",
        "expectedOutcome": "A failing test and the cause",
        "workspaceMode": "read",
    },
    {
        "type": "implement",
        "objective": "Fix the import and add the regression test",
        "approach": "Smallest change in the package init",
        "expectedOutcome": "A passing regression test",
        "workspaceMode": "shared",
    },
    {
        "type": "test",
        "objective": "Verify every criterion on the supported Python versions",
        "approach": "Run the full matrix",
        "expectedOutcome": "Evidence for each criterion",
        "workspaceMode": "read",
    },
)


def scripted_coordinator() -> ScriptedProvider:
    """A provider that answers every turn with ``decide``."""
    return ScriptedProvider(respond=respond)


def respond(request: ProviderRequest) -> Reply:
    text = json.dumps(decide(*read(request)))
    return Reply(text, usage=_usage(request, text))


def read(request: ProviderRequest) -> tuple[dict[str, Any], str | None]:
    """(the snapshot, the user's text, or None in an automatic turn)."""
    content = request.messages[-1]["content"] if request.messages else ""
    framed, _, rest = content.partition(f"\n\n{PROMPT_HEADING}\n")
    prompt = rest.partition(f"\n\n{CORRECTION_HEADING}\n")[0]
    heading, _, body = framed.partition("\n")
    snapshot = json.loads(body) if heading == SNAPSHOT_HEADING else {}
    return snapshot, None if _is_trigger(prompt) else prompt


def _is_trigger(prompt: str) -> bool:
    try:
        value = json.loads(prompt)
    except ValueError:
        return False
    return isinstance(value, dict) and "source_key" in value


def decide(snapshot: dict[str, Any], user_text: str | None) -> dict[str, Any]:
    item = snapshot.get("workItem", {})
    actions = snapshot.get("actions", [])
    progress = snapshot.get("goalProgress", {})
    open_actions = [a for a in actions if a["status"] in OPEN]
    waiting = [a for a in open_actions if a["status"] == "waiting"]
    if user_text is not None and waiting:
        target = waiting[0]
        return _decision(
            "guide_actions",
            f"Thanks, I passed your answer to the {target['type']} Action.",
            "The human answered the waiting Action's question",
            guidance=[{"actionId": target["id"], "instruction": user_text}],
        )
    if _goal_met(item, progress) and not any(a["status"] == "running" for a in open_actions):
        return _complete(item, progress, open_actions)
    if waiting:
        question = (waiting[0].get("result") or {}).get("waitingReason") or "How should I go on?"
        return _ask(question, f"The {waiting[0]['type']} Action needs an answer")
    failed = [a for a in open_actions if a["status"] == "failed"]
    if failed:
        error = (failed[0].get("result") or {}).get("error") or "it failed"
        return _ask(f"The {failed[0]['type']} Action failed ({error}). Retry it?", "A blocker")
    if not open_actions:
        return _plan(item, actions)
    if user_text is not None:
        return _decision("answer", "The planned Actions are under way.", "Nothing to change")
    return _ask("What should happen next?", "Nothing the script knows to do")


def _goal_met(item: dict[str, Any], progress: dict[str, Any]) -> bool:
    criteria = item.get("acceptanceCriteria", [])
    delivered = progress.get("delivery", {}).get("status") == "passed"
    return bool(criteria) and delivered and all(c["status"] == "passed" for c in criteria)


def _plan(item: dict[str, Any], actions: list[dict[str, Any]]) -> dict[str, Any]:
    if item.get("deliveryTarget") is None:
        return _ask("Where should the result be delivered?", "No delivery target yet")
    done = {a["type"] for a in actions if a["status"] == "completed"}
    planned = [brief for brief in PLAN if brief["type"] not in done]
    if not planned:
        return _ask("Every planned step is done but the goal is not met: what next?", "Stuck")
    names = ", ".join(brief["type"] for brief in planned)
    return _decision(
        "create_actions",
        f"I planned {len(planned)} Actions: {names}.",
        "The goal is not met and nothing is planned",
        actions=list(planned),
    )


def _complete(
    item: dict[str, Any], progress: dict[str, Any], open_actions: list[dict[str, Any]]
) -> dict[str, Any]:
    results = [
        {"criterion": c["criterion"], "status": "passed", "evidenceRunIds": c["evidenceRunIds"]}
        for c in item.get("acceptanceCriteria", [])
    ]
    cited = {run for c in results for run in c["evidenceRunIds"]}
    cited |= set(progress.get("delivery", {}).get("evidenceRunIds", []))
    return _decision(
        "complete",
        "Every criterion is proven; the WorkItem is done.",
        "Goal progress shows every criterion passed and the delivery evidenced",
        closeActions=[
            {"actionId": a["id"], "reason": "not needed once the goal is met"} for a in open_actions
        ]
        or None,
        completion={
            "summary": "Every acceptance criterion is met, with current evidence.",
            "acceptanceResults": results,
            "evidenceRunIds": sorted(cited),
            "residualRisks": None,
        },
    )


def _ask(question: str, reason: str) -> dict[str, Any]:
    return _decision("request_human", question, reason, question=question)


def _decision(kind: str, reply: str, reason: str, **fields: Any) -> dict[str, Any]:
    return {"reply": reply, "decision": {"kind": kind, "reason": reason, **fields}}


def _usage(request: ProviderRequest, text: str) -> dict[str, int]:
    """Realistic usage: about four bytes a token."""
    sent = sum(len(m.get("content", "").encode()) for m in request.messages)
    return {"input_tokens": math.ceil(sent / 4), "output_tokens": math.ceil(len(text) / 4)}
