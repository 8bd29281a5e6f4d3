"""The scripted Coordinator: a pure policy from a Coordinator request to a reply, the
CLI's ``scripted`` provider and the demo's model (ADR-0039).

It reads what a model would read, the WorkItem snapshot, the turn's input and a
second attempt's correction inside the request's messages
(``domain/coordinator_request.py``), and decides the way a careful Coordinator would,
following the playbook of a software fix: diagnose read-only first, then implement,
then verify on the Python versions only the human can name. Whatever the item's
criteria, each stage serves those still unproven. It plans the next stage while a
criterion is unproven, guides a failed Action once, asks the human once for what it
cannot know (the matrix, a delivery target before changing files, criteria when there
are none), relays a waiting Action's question, and completes, citing the Runs that
prove each criterion, only when goal progress shows nothing remaining and the
delivery passed. After a budget stop and a resume it asks before spending again. A
correction means its rules misjudged the item: it asks the human instead of replying
the same.

It keeps no memory between turns: everything it knows is in the request, so a
replayed or resumed turn decides the same. ``scripted_coordinator()`` is the provider:
a ``ScriptedProvider`` answering with ``respond`` and the usage a model would report.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from workcenter.adapters.providers.scripted import Reply, ScriptedProvider
from workcenter.domain.coordinator_request import (
    CORRECTION_HEADING,
    KINDS_HEADING,
    PROMPT_HEADING,
    SNAPSHOT_HEADING,
)
from workcenter.domain.errors import ProviderFailed
from workcenter.domain.work_item import DELIVERY_TARGETS
from workcenter.service_layer.ports import ProviderRequest

MATRIX_QUESTION = "Which Python versions must the test matrix cover?"
# What an automatic turn is woken by (coordinator.md 2.1); anything else is a user's text.
WAKE_KINDS = frozenset(
    {"work_item_started", "contract_changed", "work_item_resumed", "action_settled"}
)
ANSWER_LIMIT = 200
GOAL_QUOTE = 200  # of the goal, quoted in a brief
CORRECTION_QUOTE = 500  # of a correction, quoted to the human
DELIVERY_QUESTION = (
    "Where should the result be delivered (response, workspace_files, pull_request or merge)?"
)
CRITERIA_QUESTION = "This WorkItem has no acceptance criteria: what proves it done?"


@dataclass(frozen=True)
class Stage:
    """One kind of Action the playbook plans and what to tell a failed Run's next
    generation; it serves whichever criteria are still unproven when it is planned. Its
    objective names the item's ``{goal}`` and the human's ``{answer}`` where it needs
    them."""

    type: str
    objective: str
    approach: str
    expected_outcome: str
    workspace_mode: str
    guidance: str
    question: str | None = None  # the human's answer is part of the brief


PLAYBOOK: tuple[Stage, ...] = (
    Stage(
        type="diagnose",
        objective="Reproduce what stands in the way of the goal and find its cause ({goal})",
        approach="Run the suite, narrow the failure down, write the failing test",
        expected_outcome="A failing regression test and the cause",
        workspace_mode="read",
        guidance="Narrow the reproduction down to the smallest case before bisecting",
    ),
    Stage(
        type="implement",
        objective="Make the smallest change that meets the goal, with the regression test ({goal})",
        approach="The smallest change where the diagnosis found the cause",
        expected_outcome="The regression test and the whole suite pass",
        workspace_mode="shared",
        guidance=(
            "Keep what still depends on the old behaviour working (a deprecated alias "
            "where a name moved); then run the whole suite again"
        ),
    ),
    Stage(
        type="test",
        objective="Verify every criterion on Python {answer}",
        approach="Run the full suite on each version the human named ({answer}); "
        "write the short summary of the change",
        expected_outcome="Evidence for each criterion on every version, and the summary",
        workspace_mode="read",
        guidance="Rerun the matrix from a clean environment",
        question=MATRIX_QUESTION,
    ),
)


@dataclass(frozen=True)
class Turn:
    """What the model is given: the snapshot, the turn's input, the automatic trigger
    when a wake (not a user) began the turn, and why its previous reply was refused
    (a second attempt)."""

    snapshot: Mapping[str, Any]
    prompt: str
    trigger: Mapping[str, Any] | None
    correction: str | None = None
    kinds: tuple[str, ...] | None = None  # None: every kind

    @property
    def automatic(self) -> bool:
        return self.trigger is not None

    @property
    def actions(self) -> list[Mapping[str, Any]]:
        return list(self.snapshot.get("actions", ()))

    @property
    def progress(self) -> Mapping[str, Any]:
        return self.snapshot["goalProgress"]

    @property
    def criteria(self) -> list[Mapping[str, Any]]:
        return list(self.snapshot["workItem"]["acceptanceCriteria"])

    @property
    def lines(self) -> list[Mapping[str, Any]]:
        """The conversation, newest first."""
        return list(self.snapshot.get("conversation", ()))

    def remaining(self) -> list[str]:
        return [c["criterion"] for c in self.criteria if c["status"] != "passed"]

    def with_status(self, *statuses: str) -> list[Mapping[str, Any]]:
        return sorted(
            (a for a in self.actions if a["status"] in statuses), key=lambda a: a["sequence"]
        )


# --- reading the request ------------------------------------------------------------


def read_request(messages: Sequence[Mapping[str, str]]) -> Turn:
    """The snapshot, the turn's input and its trigger, from the request's user message."""
    content = next((m["content"] for m in messages if m.get("role") == "user"), "")
    _, heading, rest = content.partition(f"{SNAPSHOT_HEADING}\n")
    snapshot_text, _, tail = rest.partition(f"\n\n{PROMPT_HEADING}\n")
    try:
        snapshot = json.loads(snapshot_text) if heading else None
    except ValueError:
        snapshot = None
    if not isinstance(snapshot, dict) or not all(
        isinstance(snapshot.get(part), dict) for part in ("workItem", "goalProgress")
    ):
        raise ProviderFailed("the request holds no WorkItem snapshot", transient=False)
    # A second attempt carries a correction after the input.
    prompt, heading, correction = tail.rpartition(f"\n\n{CORRECTION_HEADING}\n")
    if not heading:
        prompt, correction = tail, ""
    # Fewer kinds than all are named after the input.
    given, heading, kinds = prompt.rpartition(f"\n\n{KINDS_HEADING} ")
    if heading:
        prompt = given
    return Turn(
        snapshot=snapshot,
        prompt=prompt,
        trigger=_trigger(prompt),
        correction=correction.strip() or None,
        kinds=tuple(k.strip() for k in kinds.split(",")) if heading else None,
    )


def _trigger(prompt: str) -> Mapping[str, Any] | None:
    try:
        value = json.loads(prompt)
    except ValueError:
        return None
    if isinstance(value, dict) and value.get("kind") in WAKE_KINDS:
        return value
    return None


def respond(request: ProviderRequest) -> str:
    """The reply text to one Coordinator request."""
    return json.dumps(decide(read_request(request.messages)))


def scripted_coordinator() -> ScriptedProvider:
    """The policy as a Coordinator provider, with usage at about four bytes a token."""

    def answer(request: ProviderRequest) -> Reply:
        text = respond(request)
        sent = sum(len(m.get("content", "").encode()) for m in request.messages)
        usage = {"input_tokens": math.ceil(sent / 4), "output_tokens": math.ceil(len(text) / 4)}
        return Reply(text, usage=usage)

    return ScriptedProvider(respond=answer)


# --- deciding ------------------------------------------------------------------------


def decide(turn: Turn) -> dict[str, Any]:
    """``{reply, decision}`` for one turn, in the order a careful Coordinator weighs it."""
    if turn.kinds == ("answer",):
        # A linear item or a draft: the Coordinator can only talk (coordinator.md 4.2).
        return _reply(
            "I can only answer here: this WorkItem takes no plan from me until it is a "
            "started dynamic item.",
            "answer",
            "this turn may only answer",
        )
    if turn.correction is not None:
        return _ask_after_correction(turn.correction)
    if not turn.criteria:
        return _ask(CRITERIA_QUESTION, "without criteria nothing can prove the goal met")
    if _goal_met(turn) and not turn.with_status("ready", "running"):
        return _complete(turn)
    trigger = turn.trigger or {}
    if trigger.get("kind") == "work_item_resumed":
        return _ask_after_resume(turn)
    failed = turn.with_status("failed")
    if failed:
        return _after_failure(turn, failed[0])
    waiting = turn.with_status("waiting")
    if waiting:
        return _relay(turn, waiting[0])
    if turn.with_status("ready", "running"):
        return _in_progress(turn)
    stage = _next_stage(turn)
    if stage is None:
        delivery = turn.progress["delivery"]
        left_out = turn.snapshot["workItem"]["criteriaLeftOut"]
        target = delivery["target"] or "no target named"
        missing = f"{left_out} criteria past the snapshot" if left_out else "the delivery"
        return _ask(
            f"Every criterion shown is proven, yet {missing} ({target}) is not. "
            "How should I go on?",
            "the playbook has nothing left to prove and the goal is not met",
        )
    if stage.workspace_mode != "read" and turn.snapshot["workItem"]["deliveryTarget"] is None:
        return _set_delivery(turn, stage)
    answer: str | None = None
    if stage.question is not None:
        answer = _answer_to(turn, stage.question)
        if answer is None:
            return _ask(stage.question, f"the {stage.type} Action needs the human's answer")
    if turn.automatic and any(
        a["type"] == stage.type and a["status"] == "completed" for a in turn.actions
    ):
        # It ran and did not prove what it should: running it again is the human's call.
        return _ask(
            f"{stage.type} ran but did not prove: {'; '.join(turn.remaining())}. "
            "Shall I run it again?",
            f"a repeat of {stage.type} needs a reason the evidence does not give",
        )
    return _plan(turn, stage, answer)


def _set_delivery(turn: Turn, stage: Stage) -> dict[str, Any]:
    """A stage that changes files needs a delivery target: ask for it; a user's answer
    naming one sets it (only a user turn's request_human may) and asks to go on."""
    answer = None if turn.automatic else _answer_to(turn, DELIVERY_QUESTION)
    target = (answer or "").strip(" .").lower()
    if target not in DELIVERY_TARGETS:
        return _ask(DELIVERY_QUESTION, f"{stage.type} changes files: it needs a delivery target")
    question = f"The result goes to {target}. Shall I go on with {stage.type}?"
    patch = {"title": None, "goal": None, "acceptanceCriteria": None, "deliveryTarget": target}
    return _reply(
        question,
        "request_human",
        "the user named the delivery target",
        question=question,
        contractPatch=patch,
    )


def _goal_met(turn: Turn) -> bool:
    progress = turn.progress
    return (
        progress["totalCriteria"] > 0
        and progress["remainingCriteria"] == 0
        and progress["delivery"]["status"] == "passed"
        and not turn.snapshot["workItem"]["criteriaLeftOut"]
    )


def _next_stage(turn: Turn) -> Stage | None:
    """While a criterion is unproven: the first stage that has not completed, else the
    last one again (the verification re-checks every criterion). A stage's Runs re-check
    what the stages before it proved, so a proof made stale by a later writer is renewed
    by going on. None once every criterion is proven (what is missing is the human's)."""
    if not turn.remaining():
        return None
    ran = {a["type"] for a in turn.actions if a["status"] == "completed"}
    return next((s for s in PLAYBOOK if s.type not in ran), PLAYBOOK[-1])


def _answer_to(turn: Turn, question: str) -> str | None:
    """The user's first message after the newest assistant message that asked
    ``question``: the answer to it, whatever the user said later."""
    answer: str | None = None
    for line in turn.lines:  # newest first
        if line["role"] == "assistant" and question in line["text"]:
            return answer
        if line["role"] == "user":
            answer = line["text"].strip()[:ANSWER_LIMIT] or answer
    return None


def _reply(text: str, kind: str, reason: str, **fields: Any) -> dict[str, Any]:
    """Every decision key present, the unused ones null, as a strict schema asks."""
    decision: dict[str, Any] = {
        "kind": kind,
        "reason": reason,
        "question": None,
        "workItemType": None,
        "contractPatch": None,
        "closeActions": None,
        "supersedeActionIds": None,
        "guidance": None,
        "actions": None,
        "completion": None,
    }
    return {"reply": text, "decision": decision | fields}


def _ask(question: str, reason: str) -> dict[str, Any]:
    return _reply(question, "request_human", reason, question=question)


def _plan(turn: Turn, stage: Stage, answer: str | None) -> dict[str, Any]:
    goal = " ".join(str(turn.snapshot["workItem"].get("goal", "")).split())[:GOAL_QUOTE]
    objective = stage.objective.format(answer=answer, goal=goal)
    serves = turn.remaining()
    brief: dict[str, Any] = {
        "type": stage.type,
        "objective": objective,
        "approach": stage.approach.format(answer=answer),
        "expectedOutcome": stage.expected_outcome,
        "workspaceMode": stage.workspace_mode,
        "maxAttempts": 2,
        "goalRefs": {
            "criteria": serves,
            "blockerActionIds": None,
            "delivery": None,
            "rationale": None,
        },
        "rationale": None,
    }
    # A repeat needs a rationale; the compact snapshot shows no objectives, so any
    # standing Action of the same type gets one (harmless on a first run).
    if any(a["type"] == stage.type and a["status"] != "closed" for a in turn.actions):
        brief["rationale"] = "Its earlier Run no longer proves: " + "; ".join(serves)
    said = f"I planned {stage.type}: {objective}." + (f" (You said: {answer}.)" if answer else "")
    return _reply(
        said,
        "create_actions",
        f"{stage.type} proves what is still unproven: {'; '.join(serves)}",
        actions=[brief],
    )


def _after_failure(turn: Turn, action: Mapping[str, Any]) -> dict[str, Any]:
    """Guide a failed Action once; a second failure, or one with no attempt left, goes to
    the human."""
    result = action.get("result") or {}
    # A Run that ended without a report (interrupted) has its reason only in the blockers.
    blockers: list[Mapping[str, Any]] = list(turn.progress.get("blockers", ()))
    blocker = next((b for b in blockers if b.get("actionId") == action["id"]), {})
    error = (
        result.get("error")
        or result.get("summary")
        or (blocker.get("reason") if not result else None)
        or "no error reported"
    )
    stage = next((s for s in PLAYBOOK if s.type == action["type"]), None)
    if action.get("noAttemptLeft"):
        return _ask(
            f"{action['type']} failed ({error}) and has no attempt left. Extend its Action"
            " attempts and tell me to go on, or say what to do instead.",
            "guidance would run it again with no attempt left; the human decides",
        )
    if action["generation"] == 1 and stage is not None:
        instruction = f"{stage.guidance}. The last Run failed: {error}"
        return _reply(
            f"{action['type']} failed ({error}). I am sending it back with guidance: "
            f"{stage.guidance}.",
            "guide_actions",
            "a first failure with a clear cause is worth one guided retry",
            guidance=[{"actionId": action["id"], "instruction": instruction}],
        )
    return _ask(
        f"{action['type']} failed again after my guidance ({error}). How should I go on?",
        "a guided retry failed too; the human decides",
    )


def _relay(turn: Turn, action: Mapping[str, Any]) -> dict[str, Any]:
    """A Run that waits for a human: relay its question, or pass the answer on."""
    result = action.get("result") or {}
    question = result.get("waitingReason") or "The Action needs your input."
    if turn.automatic:
        return _ask(question, f"the {action['type']} Run asked a question only a human can answer")
    return _reply(
        f"Passing your answer to {action['type']}.",
        "guide_actions",
        "the user answered the waiting Action's question",
        guidance=[{"actionId": action["id"], "instruction": f"The human answers: {turn.prompt}"}],
    )


def _in_progress(turn: Turn) -> dict[str, Any]:
    """Work is planned and not settled: a user hears where it stands; a wake with
    nothing new passes the state on to the next Action unchanged."""
    first = turn.with_status("ready", "running")[0]
    progress = turn.progress
    status = (
        f"{progress['completedCriteria']} of {progress['totalCriteria']} criteria proven; "
        f"{first['type']} is {first['status']}."
    )
    if not turn.automatic:
        return _reply(status, "answer", "the plan already covers the goal; nothing to change")
    return _reply(
        status,
        "guide_actions",
        "woken with work already planned; the next Action carries on as briefed",
        guidance=[{"actionId": first["id"], "instruction": "Carry on as briefed."}],
    )


def _ask_after_correction(correction: str) -> dict[str, Any]:
    """Its rules misjudged the item; the same reply would be refused again."""
    quoted = correction[:CORRECTION_QUOTE]
    return _ask(
        f"My previous reply was refused ({quoted}). How should I go on?",
        "a refused reply means the rules do not fit this item; the human decides",
    )


def _ask_after_resume(turn: Turn) -> dict[str, Any]:
    stage = _next_stage(turn)
    plan = f"go on with {stage.type}" if stage else "go on"
    # A resume follows a cancel or a budget stop, and the wake does not say which.
    return _ask(
        "This WorkItem was stopped (cancelled, or by its budget) and its unfinished work "
        f"was set aside. Now that it is resumed, shall I {plan}?",
        "after a stop the human decides before more is spent",
    )


def _complete(turn: Turn) -> dict[str, Any]:
    criteria = turn.criteria
    delivery = turn.progress["delivery"]["evidenceRunIds"]
    cited = sorted({r for c in criteria for r in c["evidenceRunIds"]} | set(delivery))
    closes = [
        {"actionId": a["id"], "reason": "the goal is proven without it"}
        for a in turn.with_status("waiting", "failed")
    ]
    summaries = [
        a["result"]["summary"]
        for a in turn.actions
        if a["status"] == "completed" and a.get("result") and a["result"].get("summary")
    ]
    summary = " ".join(reversed(summaries)) or "Every criterion is proven."
    return _reply(
        f"Done: every criterion is proven by current evidence (Runs {', '.join(cited)}).",
        "complete",
        "goal progress shows no remaining criterion and the delivery passed",
        closeActions=closes or None,
        completion={
            "summary": summary,
            "acceptanceResults": [
                {
                    "criterion": c["criterion"],
                    "status": "passed",
                    "evidenceRunIds": c["evidenceRunIds"],
                }
                for c in criteria
            ],
            "evidenceRunIds": cited,
            "residualRisks": None,
        },
    )
