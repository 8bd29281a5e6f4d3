"""The Coordinator's verbs: ``coordinate``, ``message`` and ``conversation``, and the
provider the command line uses (``--provider`` or ``$WORKCENTER_PROVIDER``)."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from typing import Any

import click

from workcenter.adapters.cli_common import (
    MAX_POLL,
    F,
    Seconds,
    actor_option,
    command_hint,
    console,
    db_option,
    emit_json,
    json_option,
    open_center,
    work_item_id,
)
from workcenter.adapters.providers.openai_compatible import (
    BASE_URL_ENV,
    OpenAICompatibleProvider,
)
from workcenter.adapters.providers.scripted_coordinator import scripted_coordinator
from workcenter.adapters.terminal import safe, text
from workcenter.domain import conversation as conv
from workcenter.domain.errors import InvalidInput
from workcenter.projections.conversation_dto import TEXT_BYTES
from workcenter.projections.sanitize import sanitize_personal
from workcenter.service_layer.handlers.coordinator_step import StepResult
from workcenter.service_layer.ports import CoordinatorProvider

PROVIDER_ENV = "WORKCENTER_PROVIDER"
PROVIDERS = ("scripted", "openai")


def make_provider(name: str | None) -> CoordinatorProvider:
    """``scripted`` (the scripted Coordinator, no model; the demo's too) or ``openai``
    (an OpenAI-compatible server named by ``WORKCENTER_LLM_BASE_URL`` and
    ``WORKCENTER_LLM_MODEL``). Unnamed: ``$WORKCENTER_PROVIDER``, else ``openai`` once
    a server is configured, else ``scripted``."""
    configured = "openai" if os.environ.get(BASE_URL_ENV) else "scripted"
    chosen = (name or os.environ.get(PROVIDER_ENV) or configured).strip().lower()
    if chosen == "scripted":
        return scripted_coordinator()
    if chosen == "openai":
        return OpenAICompatibleProvider.from_env()
    raise InvalidInput(f"provider must be one of {', '.join(PROVIDERS)}, not {chosen!r}")


provider_option = click.option(
    "--provider",
    "provider_name",
    default=None,
    help=f"scripted or openai (default: ${PROVIDER_ENV}, else openai if ${BASE_URL_ENV}"
    " is set, else scripted).",
)


def lease_option(help_text: str) -> Callable[[F], F]:
    """``--lease``: the mailbox lease of a Coordinator turn, in seconds."""
    return click.option(
        "--lease",
        "lease_seconds",
        type=Seconds(min=5, max=86_400),
        default=60.0,
        show_default=True,
        help=help_text,
    )


def step_line(result: StepResult) -> str:
    turn = f" turn {result.turn_id}" if result.turn_id else ""
    error = f": {sanitize_personal(result.error)}" if result.error else ""
    return f"{result.status} {result.work_item_id}{turn}{error}"


def step_json(result: StepResult) -> dict[str, Any]:
    return {
        "work_item_id": str(result.work_item_id),
        "status": result.status,
        "turn_id": str(result.turn_id) if result.turn_id else None,
        "error": sanitize_personal(result.error) if result.error else None,
        "attempts": result.attempts,
    }


@click.command()
@db_option
@provider_option
@click.option("--once", is_flag=True, help="Run the due Coordinator steps once, then exit.")
@click.option(
    "--poll", "poll_seconds", type=Seconds(min=0.01, max=MAX_POLL), default=2.0, show_default=True
)
@lease_option("Mailbox lease in seconds (renewed while the model works).")
@click.option("--json", "as_json", is_flag=True, help="Print the steps as JSON.")
@click.pass_context
def coordinate(
    ctx: click.Context,
    provider_name: str | None,
    once: bool,
    poll_seconds: float,
    lease_seconds: float,
    as_json: bool,
) -> None:
    """Run due Coordinator steps: user messages and automatic wakes (Ctrl-C or SIGTERM
    stops: a turn in hand fails as interrupted, not counted, and the command exits 130
    or 143)."""
    provider = make_provider(provider_name)
    results: list[StepResult] = []
    stop = threading.Event()
    stopped_by: list[int] = []

    def stopping(signum: int, _frame: object) -> None:
        # A service manager's stop is Ctrl-C's: coordinator.md 6.2 fails the turn in hand
        # as a shutdown, uncounted, where the signal's default would kill the process
        # and leave the turn thinking until its lease ran out, then count it.
        stopped_by.append(signum)
        raise KeyboardInterrupt

    with open_center(ctx) as wc:
        wc.recover_coordinator(at_open=True)
        previous = signal.signal(signal.SIGTERM, stopping)
        try:
            while True:
                done = wc.coordinate_once(provider, lease_seconds=lease_seconds)
                results += done
                if not as_json:
                    for result in done:
                        # A failed turn on stderr, as a worker's failed Run is, where a
                        # monitor reads errors (found by acceptance testing, ADR-0142).
                        if result.status == "failed":
                            click.echo(safe(" ".join(step_line(result).split())), err=True)
                        else:
                            console.print(text(step_line(result)), highlight=False)
                if once or stop.wait(poll_seconds):
                    break
        except KeyboardInterrupt:
            if not stopped_by:
                stopped_by.append(signal.SIGINT)
        finally:
            signal.signal(signal.SIGTERM, previous)
    if as_json:
        emit_json({"steps": [step_json(r) for r in results]})
    elif once and not results:
        console.print("no Coordinator step was due")
    if stopped_by:
        ctx.exit(128 + stopped_by[0])
    if once and any(result.status == "failed" for result in results):
        ctx.exit(1)  # the verb's own "no": a script that runs it sees the failure


@click.command()
@db_option
@click.argument("item_id")
@click.argument("message_text", metavar="TEXT")
@click.option("--client-id", default=None, help="Idempotency key: a repeat writes nothing.")
@click.option("--expected-version", type=int, default=None, help="The WorkItem version you saw.")
@actor_option
@json_option
@click.pass_context
def message(
    ctx: click.Context,
    item_id: str,
    message_text: str,
    client_id: str | None,
    expected_version: int | None,
    actor: str | None,
    as_json: bool,
) -> None:
    """Post a user message to a WorkItem's Coordinator (it answers in its next step)."""
    with open_center(ctx) as wc:
        target = work_item_id(wc, item_id)
        posted = wc.post_user_message(
            target,
            message_text,
            client_message_id=client_id,
            expected_version=expected_version,
            actor=actor,
        )
    if as_json:
        emit_json(
            {
                "work_item_id": str(posted.work_item_id),
                "turn_id": str(posted.turn_id),
                "duplicate": posted.duplicate,
            }
        )
        return
    said = "already posted" if posted.duplicate else "posted"
    hint = command_hint(ctx, "coordinate", "--once")
    console.print(f"{said}: turn {posted.turn_id}; the Coordinator answers on `{hint}`")


def conversation_json(state: conv.ConversationState | None) -> dict[str, Any]:
    if state is None:
        return {"messages": [], "turns": [], "mailbox": [], "coordinator_revision": 0}
    return {
        "coordinator_revision": state.coordinator_revision,
        "messages": [_message_json(m) for m in state.messages],
        "turns": [
            {
                "id": str(t.id),
                "status": t.status,
                "user_originated": t.user_originated,
                "automatic": t.automatic,
                "attempts": [
                    {"attempt": p.attempt, "status": p.status, "request_hash": p.request_hash}
                    for p in state.attempts(t.id)
                ],
            }
            for t in state.turns.values()
        ],
        "mailbox": [
            {
                "id": str(e.id),
                "sequence": e.sequence,
                "kind": e.kind,
                "status": e.status,
                "turn_id": str(e.turn_id) if e.turn_id else None,
            }
            for e in state.entries
        ],
    }


def _message_json(m: conv.Message) -> dict[str, Any]:
    return {
        "id": str(m.id),
        "turn_id": str(m.turn_id),
        "role": m.role,
        "status": m.status,
        "text": sanitize_personal(m.text, TEXT_BYTES),
        "automatic": m.automatic,
        "decision": m.decision.kind if m.decision else None,
        "question": sanitize_personal(m.decision.question, TEXT_BYTES)
        if m.decision and m.decision.question
        else None,
        "error": sanitize_personal(m.error, conv.ERROR_LIMIT) if m.error else None,
        "at": m.created_at.isoformat(),
        # A reply's own time: ``at`` is when its turn began (found by acceptance testing:
        # a reply seemed to come with the message it answered, ADR-0142).
        "finished_at": m.finished_at.isoformat() if m.finished_at else None,
    }


@click.command()
@db_option
@click.argument("item_id")
@json_option
@click.pass_context
def conversation(ctx: click.Context, item_id: str, as_json: bool) -> None:
    """A WorkItem's messages and Coordinator turns (secrets and home paths masked)."""
    with open_center(ctx) as wc:
        target = work_item_id(wc, item_id)
        state = wc.conversation(target)
        closed = wc.work_item(target).status in ("done", "cancelled")
    data = conversation_json(state)
    if as_json:
        emit_json(data)
        return
    if not data["messages"]:
        console.print("no messages yet")
    for m in data["messages"]:
        who = "you" if m["role"] == "user" else "coordinator"
        status = "" if m["status"] == "completed" else f" [{m['status']}]"
        body = m["error"] if m["status"] == "failed" else m["text"]
        decided = f" ({m['decision']})" if m["decision"] else ""
        at = m["finished_at"] if m["role"] == "assistant" and m["finished_at"] else m["at"]
        console.print(text(f"{at} {who}{status}{decided}: {body or ''}"), highlight=False)
    pending = [e for e in data["mailbox"] if e["status"] in ("pending", "claimed")]
    # The Coordinator wakes for open items only: on a done or cancelled one a wake left
    # waits for nothing (found by acceptance testing: "waiting" for ever, ADR-0142).
    if pending and not closed:
        console.print(text(f"{len(pending)} wake(s) waiting for the Coordinator"))
