"""The Coordinator's commands: user messages, mailbox claims, turns, provider turns,
failures and recovery (coordinator.md 1, 2, 3, 5, 6 and 9.5).

Each command loads the WorkItem, its Conversation (and the ledger when it
spends or counts), lets the Conversation decider and the ledger decide, and
saves every event in one write. Mailbox claims fence every turn step: a
command under a claim that is no longer active raises ``TurnFenceLost`` and
writes nothing.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from workcenter.domain import action as act
from workcenter.domain import actor as actors
from workcenter.domain import conversation as conv
from workcenter.domain import inputs, turns
from workcenter.domain import resource_ledger as rl
from workcenter.domain import work_item as wi
from workcenter.domain.actor import Actor
from workcenter.domain.errors import (
    UNKNOWN_VERSION,
    NotFound,
    ResourceStopError,
    TurnFenceLost,
    VersionConflict,
)
from workcenter.domain.model import DomainEvent
from workcenter.domain.unit import Unit
from workcenter.projections.mailbox import Mailbox, MailboxView
from workcenter.service_layer.handlers.coordinator_rules import (
    DecisionRules,
    ParsedReply,
    RequestBody,
)
from workcenter.service_layer.handlers.decision_verdict import check_before_apply
from workcenter.service_layer.ports import Clock
from workcenter.service_layer.read_models import ReadModels
from workcenter.service_layer.repository import Repository


@dataclass(frozen=True)
class PostedMessage:
    """The turn a user message began; ``duplicate`` when its client id was known."""

    work_item_id: UUID
    turn_id: UUID
    duplicate: bool


def turn_actor(turn: conv.Turn) -> Actor:
    """A turn's decisions are the Coordinator's, caused by the user of a user turn."""
    actor = Actor(kind="coordinator", id=str(turn.id))
    return actor.because_of(turn.requested_by) if turn.requested_by else actor


def response_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


# What a user's expected version is checked against (5.3): contract, plan, Run
# outcomes, lifecycle and stops. A Run claim, a renewal or a title edit never
# refuses a message: they are not what the user's message is about.
def message_conflicts(events: list[DomainEvent]) -> list[str]:
    clashing = []
    for event in events:
        if isinstance(event, wi.ActionStatusRecorded) and event.status == "running":
            continue
        if isinstance(event, wi.StatusChanged) and event.status == "running":
            continue
        if isinstance(event, wi.TitleChanged | wi.WorkItemStarted):
            continue
        clashing.append(type(event).__name__)
    return clashing


class CoordinatorCommands:
    def __init__(
        self,
        repository: Repository,
        read_models: ReadModels,
        clock: Clock,
        boot_id: str,
        rules: DecisionRules,
    ) -> None:
        self.repo = repository
        self.read_models = read_models
        self.clock = clock
        self.rules = rules
        self.owner = f"coordinator@{boot_id}"
        self.actor = Actor(kind="coordinator", id=self.owner)

    def mailbox(self) -> MailboxView:
        return self.read_models.fresh(Mailbox.name)  # type: ignore[no-any-return]

    def conversation(self, work_item_id: UUID) -> conv.ConversationState | None:
        self.repo.work_item(work_item_id)  # NotFound for an id that names no WorkItem
        return self.repo.conversation(work_item_id)

    # --- the user's message ---------------------------------------------------------

    def post_user_message(
        self,
        work_item_id: UUID,
        text: str,
        *,
        client_message_id: str | None,
        expected_version: int | None,
        actor: Actor | str | None,
    ) -> PostedMessage:
        """Begin a user turn, checked in the order of coordinator.md 9.2."""
        by = actors.resolve(actor, actors.USER)
        work_item_id = inputs.aggregate_id(work_item_id, "WorkItem")
        text = inputs.text(text, "text", conv.TEXT_LIMIT)
        if client_message_id is not None:
            client_message_id = inputs.text(
                client_message_id, "client_message_id", conv.CLIENT_ID_LIMIT, required=True
            )
        expected_version = inputs.optional_version(expected_version, "expected_version")

        def attempt() -> Unit:
            conversation = self.repo.conversation(work_item_id)
            known = (
                conversation.client_message_ids.get(client_message_id)
                if conversation is not None and client_message_id is not None
                else None
            )
            if known is not None:
                duplicate.append(known)
                return Unit(self.repo.work_item(work_item_id), {}, self.clock.now(), by=by)
            item = self.repo.work_item(work_item_id)
            if item.stopped:
                # The user sent no LLM request: say what stopped the item and the way on.
                raise ResourceStopError(
                    item.stopped,
                    f"the WorkItem is stopped by its budget ({item.stopped}): no message is"
                    " taken until a user extends the budget and resumes it",
                )
            wi.refuse_if_terminal(item, "message")
            if expected_version is not None and expected_version != item.version:
                self._check_message_version(item, expected_version)
            actions = self.repo.actions(item)
            unit = Unit(item, {}, self.clock.now(), by=by)
            talk = unit.attach_conversation(conversation)
            turn_ids.append(
                talk.begin_user_turn(
                    text=text.strip(),
                    client_message_id=client_message_id,
                    item_version=item.version,
                    fingerprint=self.rules.action_fingerprint(item, actions),
                )
            )
            return unit

        duplicate: list[UUID] = []
        turn_ids: list[UUID] = []
        self.repo.execute(attempt)
        if duplicate:
            return PostedMessage(work_item_id=work_item_id, turn_id=duplicate[-1], duplicate=True)
        return PostedMessage(work_item_id=work_item_id, turn_id=turn_ids[-1], duplicate=False)

    def _check_message_version(self, item: wi.WorkItemState, expected: int) -> None:
        if expected > item.version or expected < 1:
            raise VersionConflict(item.id, expected, item.version, [UNKNOWN_VERSION])
        clashing = message_conflicts(self.repo.events(item.id, after=expected))
        if clashing:
            raise VersionConflict(item.id, expected, item.version, clashing)

    # --- running a command on the Conversation ---------------------------------------

    def _command(
        self,
        work_item_id: UUID,
        decide: Callable[[Unit, turns.Decider], None],
        *,
        ledger: bool = False,
        by: Actor | None = None,
    ) -> Unit:
        def attempt() -> Unit:
            item = self.repo.work_item(work_item_id)
            unit = Unit(
                item,
                {},
                self.clock.now(),
                self.repo.ledger(work_item_id) if ledger else None,
                by=by or self.actor,
            )
            decide(unit, unit.attach_conversation(self.repo.conversation(work_item_id)))
            return unit

        return self.repo.execute(attempt)

    def _turn_command(
        self,
        claim: conv.ClaimRef,
        decide: Callable[[Unit, turns.Decider, conv.Turn], None],
        *,
        ledger: bool = False,
    ) -> Unit:
        """A step of the claimed turn, by the turn's actor; TurnFenceLost if the claim is
        no longer active (nothing written)."""

        def attempt() -> Unit:
            item = self.repo.work_item(claim.work_item_id)
            conversation = self.repo.conversation(claim.work_item_id)
            turn = self._active_turn(conversation, claim)
            unit = Unit(
                item,
                {},
                self.clock.now(),
                self.repo.ledger(claim.work_item_id) if ledger else None,
                by=turn_actor(turn),
            )
            decide(unit, unit.attach_conversation(conversation), turn)
            return unit

        return self.repo.execute(attempt)

    def _active_turn(
        self, conversation: conv.ConversationState | None, claim: conv.ClaimRef
    ) -> conv.Turn:
        at = self.clock.now()
        if conversation is None or claim.turn_id is None or not conversation.is_active(claim, at):
            raise TurnFenceLost(f"the mailbox claim on WorkItem {claim.work_item_id} is lost")
        turn = conversation.turns.get(claim.turn_id)
        if turn is None or turn.status != "thinking":
            raise TurnFenceLost(f"turn {claim.turn_id} is no longer thinking")
        return turn

    # --- the mailbox ------------------------------------------------------------------

    def claim_due(self, work_item_id: UUID, lease: timedelta) -> conv.ClaimRef | None:
        """Claim the item's next wake: the thinking turn's entry if there is one (claim
        by turn), else the lowest-sequence entry (strict order), when its gate allows."""
        claims: list[conv.ClaimRef] = []

        def decide(unit: Unit, talk: turns.Decider) -> None:
            claims.clear()
            state = talk.state
            if state is None:
                return
            at = unit.at
            thinking = state.thinking_turn()
            if thinking is not None:
                entry = state.entry(thinking.entry_id)
                if entry is None or not entry.available(at):
                    return
                claims.append(talk.claim(entry, self.owner, lease))
                return
            entry = state.next_available(at)
            if entry is None or not self._may_begin(unit, at, entry):
                return
            claims.append(talk.claim(entry, self.owner, lease))

        try:
            self._command(work_item_id, decide, ledger=True)
        except NotFound:
            return None
        return claims[0] if claims else None

    def _may_begin(self, unit: Unit, at: datetime, entry: conv.Entry) -> bool:
        """can_automatically_coordinate (6.3) and no Action running (2.3)."""
        item, ledger = unit.item, unit.ledger
        if item.status in wi.TERMINAL or item.stopped or ledger is None:
            return False
        if item.entries("running"):
            return False
        user = entry.kind == "message"
        return user or ledger.retry_after is None or at >= ledger.retry_after

    def renew(self, claim: conv.ClaimRef, lease: timedelta) -> bool:
        renewed: list[bool] = []

        def decide(unit: Unit, talk: turns.Decider) -> None:
            renewed[:] = [talk.state is not None and talk.renew(claim, lease)]

        self._command(claim.work_item_id, decide)
        return renewed[0]

    def release(self, claim: conv.ClaimRef, reason: str) -> bool:
        released: list[bool] = []

        def decide(unit: Unit, talk: turns.Decider) -> None:
            released[:] = [talk.state is not None and talk.release(claim, reason)]

        self._command(claim.work_item_id, decide)
        return released[0]

    def begin_automatic(self, claim: conv.ClaimRef) -> conv.ClaimRef | None:
        """An automatic turn on the claimed entry, or None (the claim released) when the
        gate no longer allows one."""
        begun: list[conv.ClaimRef] = []

        def decide(unit: Unit, talk: turns.Decider) -> None:
            begun.clear()
            state = talk.state
            entry = state.entry(claim.entry_id) if state else None
            if state is None or entry is None or not state.is_active(claim, unit.at):
                raise TurnFenceLost("the mailbox claim is lost")
            if state.thinking_turn() is not None or not self._may_begin(unit, unit.at, entry):
                talk.release(claim, "no automatic turn now")
                return
            actions = self.repo.actions(unit.item)
            begun.append(
                talk.begin_automatic_turn(
                    claim,
                    item_version=unit.item.version,
                    fingerprint=self.rules.action_fingerprint(unit.item, actions),
                )
            )

        self._command(claim.work_item_id, decide, ledger=True)
        return begun[0] if begun else None

    # --- provider turns ---------------------------------------------------------------

    def prepare(self, claim: conv.ClaimRef, attempt: int, body: RequestBody) -> conv.ProviderTurn:
        prepared: list[conv.ProviderTurn] = []
        request: dict[str, Any] = {
            "messages": list(body.messages),
            "replySchema": body.reply_schema,
        }
        if body.max_output_tokens is not None:
            request["maxOutputTokens"] = body.max_output_tokens

        def decide(unit: Unit, talk: turns.Decider, turn: conv.Turn) -> None:
            prepared[:] = [
                talk.prepare(claim, attempt=attempt, request=request, request_hash=body.hash())
            ]

        self._turn_command(claim, decide)
        return prepared[0]

    def dispatch(
        self, claim: conv.ClaimRef, provider_turn_id: UUID, body: RequestBody, lease: timedelta
    ) -> str:
        """Reserve through the ledger and move the provider turn to dispatching in ONE
        write, before any byte is sent (3.3), renewing the claim's lease for the call. A
        denial raises ResourceStopError (a stopping denial is saved first); a lost claim
        raises TurnFenceLost."""
        estimate = rl.estimate_tokens(
            {"messages": list(body.messages), "max_tokens": body.max_output_tokens}
        )
        admissions: list[rl.Admission] = []

        def decide(unit: Unit, talk: turns.Decider, turn: conv.Turn) -> None:
            assert unit.ledger is not None
            admission = rl.reserve_coordinator(
                unit.ledger,
                turn_id=str(provider_turn_id),
                retry_id=uuid.uuid4().hex,
                estimated_tokens=estimate,
                item_active=unit.item.status not in wi.TERMINAL,
                at=unit.at,
                by=unit.by,
            )
            admissions[:] = [admission]
            unit.apply_ledger(admission.events)
            if admission.allowed:
                talk.renew(claim, lease)
                talk.dispatch(claim, provider_turn_id, admission.request_id)

        self._turn_command(claim, decide, ledger=True)
        admission = admissions[0]
        if not admission.allowed:
            raise ResourceStopError(admission.code or "denied")
        return admission.request_id

    def respond(
        self,
        claim: conv.ClaimRef,
        provider_turn_id: UUID,
        text: str,
        usage: Mapping[str, Any] | None,
    ) -> None:
        """dispatching -> responded, the turn's reservations settled with the usage."""
        normalised = rl.normalize_usage(inputs.mapping(usage, "usage")) if usage else None

        def decide(unit: Unit, talk: turns.Decider, turn: conv.Turn) -> None:
            talk.respond(claim, provider_turn_id, text, response_hash(text))
            _settle(unit, provider_turn_id, normalised)

        self._turn_command(claim, decide, ledger=True)

    def settle_late(
        self, work_item_id: UUID, provider_turn_id: UUID, usage: Mapping[str, Any] | None
    ) -> None:
        """A response that arrived after its claim was lost: its decision stays fenced,
        but what it cost is still recorded (3.3); a ledger-only write."""
        normalised = rl.normalize_usage(inputs.mapping(usage, "usage")) if usage else None

        def decide(unit: Unit, talk: turns.Decider) -> None:
            _settle(unit, provider_turn_id, normalised)

        self._command(work_item_id, decide, ledger=True)

    def reject(self, claim: conv.ClaimRef, provider_turn_id: UUID, error: str) -> None:
        self._turn_command(
            claim, lambda unit, talk, turn: talk.reject(claim, provider_turn_id, error)
        )

    # --- ending a turn --------------------------------------------------------------

    def check_fences(self, claim: conv.ClaimRef) -> None:
        """What ``apply`` checks before it decides anything (a stop, a closed item, a
        conflicting change since the turn began), read now: once broken, no decision of
        the turn can apply, so none is asked for again."""
        item = self.repo.work_item(claim.work_item_id)
        turn = self._active_turn(self.repo.conversation(claim.work_item_id), claim)
        since = self.repo.events(item.id, after=turn.item_version)
        ledger = self.repo.ledger(item.id)
        check_before_apply(self.rules, turn, item, self.repo.actions(item), ledger, since)

    def apply(self, claim: conv.ClaimRef, provider_turn_id: UUID, reply: ParsedReply) -> Unit:
        """Apply the decision behind the turn's fences (5.2), complete the turn and ack
        its entry, in one write. CommandRefused (a conflict or an at-apply rule) or
        ResourceStopError (stopped) leave everything as it was."""

        def attempt() -> Unit:
            item = self.repo.work_item(claim.work_item_id)
            conversation = self.repo.conversation(claim.work_item_id)
            turn = self._active_turn(conversation, claim)
            ledger = self.repo.ledger(item.id)
            actions = self.repo.actions(item)
            since = self.repo.events(item.id, after=turn.item_version)
            check_before_apply(self.rules, turn, item, actions, ledger, since)
            unit = self.rules.apply_decision(
                reply, turn, item, actions, ledger, at=self.clock.now(), by=turn_actor(turn)
            )
            touched = (e.originator_id for e in unit.events if isinstance(e, act.ActionEvent))
            summary = self.rules.summary(reply).model_copy(
                update={"affected_action_ids": tuple(dict.fromkeys(touched))}
            )
            unit.attach_conversation(conversation).decide(claim, reply.reply, summary)
            return unit

        return self.repo.execute(attempt)

    def fail_turn(
        self, claim: conv.ClaimRef, error: str, *, interrupted: bool = False, retry: bool = True
    ) -> bool:
        """fail_turn (6.1, 9.5), all or nothing: responded provider turns rejected, a
        dispatch of this claim settled unknown, the failure recorded on the ledger first
        (unless ``interrupted``), then the entry released for a new automatic turn (an
        automatic turn, ``retry``, the item not stopped) or acked. False when the claim
        was already lost (nothing written)."""

        def decide(unit: Unit, talk: turns.Decider, turn: conv.Turn) -> None:
            self._end_provider_turns(unit, talk, turn, claim, error)
            if not interrupted:
                self._count_failure(unit, turn)
            again = turn.automatic and retry and not unit.item.stopped
            again = again and unit.item.status not in wi.TERMINAL
            talk.fail(claim, error, counted=not interrupted, retry=again)

        try:
            self._turn_command(claim, decide, ledger=True)
        except TurnFenceLost:
            return False
        return True

    def _end_provider_turns(
        self,
        unit: Unit,
        talk: turns.Decider,
        turn: conv.Turn,
        claim: conv.ClaimRef,
        error: str,
    ) -> None:
        assert talk.state is not None
        for provider_turn in talk.state.attempts(turn.id):
            if provider_turn.status == "responded":
                talk.reject(claim, provider_turn.id, error)
            elif provider_turn.status == "dispatching":
                self._unknown(unit, talk, provider_turn)

    @staticmethod
    def _unknown(unit: Unit, talk: turns.Decider, provider_turn: conv.ProviderTurn) -> None:
        """A dispatch whose answer never arrived: unknown, its reservations settled
        unknown (charged at least their estimate)."""
        assert unit.ledger is not None
        talk.mark_unknown(provider_turn)
        unit.settle_dispatch(provider_turn.id, None, complete=False)

    @staticmethod
    def _count_failure(unit: Unit, turn: conv.Turn) -> None:
        assert unit.ledger is not None
        unit.apply_ledger(
            rl.record_coordinator_failure(unit.ledger, turn_id=str(turn.id), at=unit.at, by=unit.by)
        )

    # --- recovery ---------------------------------------------------------------------

    def recover(self, *, at_open: bool) -> int:
        """Crash recovery (2.4): expired claims back to pending; dispatches without an
        active claim unknown; at store open, orphaned thinking turns interrupted
        (counted); and thinking turns of stopped or closed items failed. Returns the
        number of Conversations changed."""
        at_open = inputs.flag(at_open, "at_open")
        changed = 0
        for work_item_id in self.mailbox().to_recover(self.clock.now(), at_open=at_open):

            def decide(unit: Unit, talk: turns.Decider) -> None:
                self._recover_one(unit, talk, at_open=at_open)

            if self._command(work_item_id, decide, ledger=True).events:
                changed += 1
        return changed

    def _recover_one(self, unit: Unit, talk: turns.Decider, *, at_open: bool) -> None:
        state = talk.state
        if state is None:
            return
        at = unit.at
        talk.expire_claims()
        state = talk.state
        assert state is not None
        for provider_turn in list(state.provider_turns):
            entry = state.entry_of_turn(provider_turn.turn_id)
            active = entry is not None and state.is_active(
                conv.ClaimRef(
                    work_item_id=unit.item.id,
                    entry_id=entry.id,
                    owner=provider_turn.claim_owner,
                    epoch=provider_turn.claim_epoch,
                ),
                at,
            )
            if provider_turn.status == "dispatching" and not active:
                self._unknown(unit, talk, provider_turn)
        state = talk.state
        assert state is not None
        turn = state.thinking_turn()
        entry = state.entry(turn.entry_id) if turn else None
        if turn is None or entry is None or entry.status == "claimed":
            return  # no turn, or one a live process holds
        closed = unit.item.status in wi.TERMINAL or unit.item.stopped
        if closed:
            # While stopped (or once closed) a turn cannot dispatch or apply: it ends now.
            claim = talk.claim(entry, self.owner, conv.MIN_LEASE)
            claim = claim.model_copy(update={"turn_id": turn.id})
            self._end_provider_turns(unit, talk, turn, claim, "the WorkItem stopped")
            status = unit.item.stopped or unit.item.status
            talk.fail(claim, f"the WorkItem is {status}", counted=False, retry=False)
        elif at_open and entry.claim_epoch > 0 and not state.resumable(turn):
            # A process claimed it and died before any request: orphaned. A user turn
            # never claimed yet is waiting for its first step, not orphaned.
            self._count_failure(unit, turn)
            talk.interrupt_orphan(turn, "the process running this turn ended")


def _settle(unit: Unit, provider_turn_id: UUID, usage: rl.Usage | None) -> None:
    """Settle a provider turn's reservations in ``unit``: the newest with ``usage``."""
    assert unit.ledger is not None
    unit.settle_dispatch(provider_turn_id, usage, complete=True)
