"""One Coordinator step: claim a due wake, run its turn through the provider, end it.

claim -> begin (automatic) -> build the request -> prepare -> dispatch with a
reservation -> provider -> respond -> parse -> apply, or a corrective second
attempt -> decided or failed (coordinator.md 2.3, 3, 6, 9.5). A resumed turn
continues from its latest provider turn: a responded one is validated again
without a call, a prepared one is dispatched, an unknown one fails the turn.
Every write is fenced by the mailbox claim; a step that loses it stops and
writes nothing more.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Literal, TypeVar
from uuid import UUID

from workcenter.domain import bounds, inputs, planning
from workcenter.domain import conversation as conv
from workcenter.domain import work_item as wi
from workcenter.domain.errors import (
    CommandRefused,
    InvalidInput,
    ProviderFailed,
    ResourceStopError,
    TurnFenceLost,
    WorkcenterError,
)
from workcenter.domain.usage import reported_usage
from workcenter.service_layer.handlers.coordinator import CoordinatorCommands, response_hash
from workcenter.service_layer.handlers.coordinator_rules import RequestBody
from workcenter.service_layer.ports import (
    CoordinatorProvider,
    ProviderTurnRequest,
    StoreUnreachable,
)

CORRECTION_LIMIT = 2_000
# A dispatch, or a reply in hand, is written again after these waits, doubling, while
# the store is away.
STORE_RETRY_FIRST_WAIT = 0.1
STORE_RETRY_LAST_WAIT = 2.0
MAX_STEPS = 10_000  # due wakes one pass takes on
TurnStatus = Literal["decided", "failed", "lost", "skipped"]
_T = TypeVar("_T")


@dataclass(frozen=True)
class StepResult:
    """What one step did to one WorkItem's wake."""

    work_item_id: UUID
    status: TurnStatus
    turn_id: UUID | None = None
    error: str | None = None
    attempts: int = 0


@dataclass
class _Attempt:
    claim: conv.ClaimRef
    correction: str | None = None
    details: list[str] = field(default_factory=list)


def check_provider(provider: object, name: str = "provider") -> None:
    """``InvalidInput`` unless ``provider`` can answer a turn (a CoordinatorProvider)."""
    if not callable(getattr(provider, "answer", None)):
        kind = type(provider).__name__
        raise InvalidInput(f"{name} must be a CoordinatorProvider (answer()), not {kind}")


class Coordinator:
    """Runs Coordinator turns with one provider; a process has one (its boot id owns
    the claims)."""

    def __init__(
        self,
        commands: CoordinatorCommands,
        provider: CoordinatorProvider,
        lease_seconds: float = conv.DEFAULT_LEASE.total_seconds(),
    ) -> None:
        # Refused before a turn is claimed: a turn whose provider cannot answer is a
        # counted failure, which this caller's mistake is not.
        check_provider(provider)
        self.commands = commands
        self.provider = provider
        self.max_output_tokens = _declared_bound(provider)
        lease = timedelta(seconds=inputs.lease_seconds(lease_seconds))
        self.lease = max(lease, conv.MIN_LEASE)

    def run_due(self, limit: int = 100, steps: int | None = None) -> list[StepResult]:
        """One step for each item with a wake due (of the ``limit`` oldest), after
        recovery; with ``steps``, the first ``steps`` that run. A wake that may not begin
        (its item's Action running) is passed over, so that it holds up no other."""
        limit = inputs.version(limit, "limit")
        if not 1 <= limit <= MAX_STEPS:
            raise InvalidInput(f"limit must be from 1 to {MAX_STEPS}, not {limit}")
        if steps is not None and not 1 <= inputs.version(steps, "steps") <= limit:
            raise InvalidInput(f"steps must be from 1 to the limit ({limit}), not {steps}")
        self.commands.recover(at_open=False)
        now = self.commands.clock.now()
        results = []
        for work_item_id in self.commands.mailbox().due(now, limit):
            result = self.step(work_item_id)
            if result.status != "skipped":
                results.append(result)
                if len(results) == steps:
                    break
        return results

    def step(self, work_item_id: UUID) -> StepResult:
        claim = self.commands.claim_due(work_item_id, self.lease)
        if claim is None:
            return StepResult(work_item_id, "skipped")
        if claim.turn_id is None:
            try:
                begun = self.commands.begin_automatic(claim)
            except TurnFenceLost as lost:
                return StepResult(work_item_id, "lost", error=str(lost))
            if begun is None:
                return StepResult(work_item_id, "skipped")
            claim = begun
        return self._run_turn(claim)

    # --- the turn -----------------------------------------------------------------

    def _run_turn(self, claim: conv.ClaimRef) -> StepResult:
        state = _Attempt(claim)
        try:
            for attempt in range(1, conv.MAX_ATTEMPTS + 1):
                result = self._attempt(state, attempt)
                if result is not None:
                    return result
            detail = " | ".join(state.details)[: conv.ERROR_LIMIT]
            # The validator's detail stays on the rejected provider turns (the audit).
            return self._fail(claim, conv.INVALID_TWICE, attempts=2, audit=detail)
        except TurnFenceLost as lost:
            return StepResult(claim.work_item_id, "lost", claim.turn_id, str(lost))
        except BaseException as stopped:
            # Shutdown (Ctrl-C, SIGTERM) ends the turn as interrupted, not counted (9.5);
            # a failure of our own ends it counted. Either way it is not left thinking.
            interrupted = not isinstance(stopped, Exception)
            with contextlib.suppress(WorkcenterError):
                reason = "shutdown" if interrupted else f"internal error: {type(stopped).__name__}"
                self.commands.fail_turn(claim, reason, interrupted=interrupted)
            raise

    def _attempt(self, state: _Attempt, attempt: int) -> StepResult | None:
        """One decision attempt; None when it was invalid and another may follow."""
        claim = state.claim
        commands = self.commands
        item, conversation, turn = self._current(claim)
        existing = next((p for p in conversation.attempts(turn.id) if p.attempt == attempt), None)
        if existing is not None and existing.status == "rejected":
            state.correction = (existing.error or "")[:CORRECTION_LIMIT]
            state.details.append(existing.error or "")
            return None
        if existing is not None and existing.status == "unknown":
            return self._fail(claim, "a request's outcome is unknown; needs review", retry=False)
        if (
            existing is not None
            and existing.status == "dispatching"
            and ((existing.claim_owner, existing.claim_epoch) != (claim.owner, claim.epoch))
        ):
            return self._fail(claim, "a request is in flight under another claim", retry=False)
        actions = commands.repo.actions(item)
        try:
            body = commands.rules.build_request(
                item,
                actions,
                planning.progress(item, actions),
                _lines(conversation),
                turn,
                _prompt(turn),
                state.correction,
                self.max_output_tokens,
                ledger=commands.repo.ledger(item.id),
            )
        except WorkcenterError as error:  # the snapshot cannot be built (too large)
            return self._fail(claim, str(error), retry=False)
        if existing is not None and existing.request_hash != body.hash():
            return self._fail(claim, "the WorkItem changed since this turn's request was made")
        if not commands.renew(claim, self.lease):
            raise TurnFenceLost("the mailbox claim could not be renewed")
        try:
            provider_turn = commands.prepare(claim, attempt, body)
        except CommandRefused as refused:
            return self._fail(claim, str(refused), retry=False)
        if provider_turn.status == "responded":
            text = provider_turn.response or ""
        else:
            answered = self._call(claim, provider_turn, body)
            if isinstance(answered, StepResult):
                return answered
            text = answered
        return self._decide(state, provider_turn.id, text, attempt)

    def _call(
        self, claim: conv.ClaimRef, provider_turn: conv.ProviderTurn, body: RequestBody
    ) -> str | StepResult:
        """Send the request (each HTTP attempt reserved first); the reply's text."""
        request = ProviderTurnRequest(
            turn_id=str(provider_turn.turn_id),
            attempt=provider_turn.attempt,
            messages=tuple(body.messages),
            reply_schema=body.reply_schema,
            max_output_tokens=body.max_output_tokens,
        )

        ours: list[BaseException] = []
        dispatched = [provider_turn.dispatches]

        def before_request() -> None:
            try:
                self._dispatch(claim, provider_turn.id, body, dispatched[0])
            except BaseException as error:
                ours.append(error)
                raise
            dispatched[0] += 1

        keeper = _LeaseKeeper(self.commands, claim, self.lease)
        keeper.start()
        try:
            reply = self.provider.answer(request, before_request)
        except TurnFenceLost:
            raise
        except ResourceStopError as stop:
            if stop.code == "work_item_inactive":
                # Cancelled (or ended) while the turn ran: no budget refused it (found by
                # acceptance testing: a cancel read as a budget failure).
                why = "the WorkItem was cancelled or ended before the request was sent"
                return self._fail(claim, why, retry=False)
            return self._fail(claim, f"budget: {stop}", retry=False)
        except ProviderFailed as failed:
            return self._fail(claim, f"provider: {failed}", retry=failed.transient)
        except WorkcenterError as error:
            return self._fail(claim, f"provider: {error}", retry=False)
        except Exception as error:
            if error in ours:
                raise  # not the provider's: our own refusal, or a bug of ours
            # The embedder's code: a bug there fails the turn instead of the loop.
            return self._fail(claim, f"provider error: {type(error).__name__}", retry=False)
        finally:
            keeper.stop()
        try:
            text, usage = reply.text, reply.usage
        except Exception:  # the embedder's code, as the answer above
            what = type(reply).__name__
            return self._fail(claim, f"provider error: a reply without text ({what})", retry=False)
        text = text if isinstance(text, str) else ""
        too_large = len(text) > bounds.PAYLOAD_TEXT
        # Text that cannot be stored (lone surrogates) is kept readable, not refused; a
        # reply past the bound is kept cut, and recorded with its usage all the same:
        # failed unrecorded, what it cost was charged at the estimate (found by
        # acceptance testing: 402,000 tokens reported, 17,211 charged, no stop).
        text = text[: bounds.PAYLOAD_TEXT].encode("utf-8", "replace").decode("utf-8")
        try:
            # Any mapping or SDK object, as a Run's metered provider takes it: only a
            # dict was, and an SDK's usage object was charged at the estimate (ADR-0136).
            usage = reported_usage(usage)
        except Exception:  # the embedder's object: a dump that fails reports no usage
            usage = None
        try:
            recorded = self._record(claim, provider_turn.id, text, usage)
        except TurnFenceLost:
            self.commands.settle_late(claim.work_item_id, provider_turn.id, usage)
            raise
        if not recorded:
            # The provider answered without calling before_request: nothing was reserved.
            return self._fail(claim, "the provider sent no reserved request", retry=False)
        if too_large:
            return self._fail(claim, "the provider's reply is too large", retry=False)
        return text

    def _dispatch(
        self, claim: conv.ClaimRef, provider_turn_id: UUID, body: RequestBody, dispatches: int
    ) -> None:
        """Reserve the request and move the provider turn to dispatching, its
        ``dispatches + 1``-th, before the request is sent. A try whose answer was lost is
        read back first, as a reply's record is (``_record``): dispatched again, the request
        it reserved would end unknown, charged its whole estimate, for a call never sent
        (ADR-0137). Only this step dispatches under its claim, so one dispatch more under it
        is this try's."""

        def dispatch(failed: bool) -> None:
            if failed:
                conversation = self.commands.repo.conversation(claim.work_item_id)
                sent = conversation.provider_turn(provider_turn_id) if conversation else None
                if (
                    sent is not None
                    and sent.status == "dispatching"
                    and sent.dispatches > dispatches
                    and (sent.claim_owner, sent.claim_epoch) == (claim.owner, claim.epoch)
                ):
                    return
            self.commands.dispatch(claim, provider_turn_id, body, self.lease)

        self._waiting_out_the_store(dispatch)

    def _record(
        self,
        claim: conv.ClaimRef,
        provider_turn_id: UUID,
        text: str,
        usage: Mapping[str, Any] | None,
    ) -> bool:
        """Record the reply to the dispatched provider turn; False when it was never
        dispatched. Given up while the store was away, the reply, paid for, left the
        request's outcome unknown, the turn failed for good and the whole estimate charged
        (found by acceptance testing, ADR-0128). The claim's fence still decides whether
        it is recorded."""

        def record(failed: bool) -> bool:
            conversation = self.commands.repo.conversation(claim.work_item_id)
            sent = conversation.provider_turn(provider_turn_id) if conversation else None
            if sent is not None and sent.status == "dispatching":
                self.commands.respond(claim, provider_turn_id, text, usage)
                return True
            if sent is not None and sent.status == "unknown" and not failed:
                # Given up while it was in flight (its claim lapsed, or a resume
                # retired its turn): the decision is fenced, what it cost is settled.
                raise TurnFenceLost("the turn ended while its request was in flight")
            # Not dispatched; or, after a failed try, made by it with this reply.
            return failed and sent is not None and sent.response_hash == response_hash(text)

        return self._waiting_out_the_store(record)

    def _waiting_out_the_store(self, write: Callable[[bool], _T]) -> _T:
        """``write(failed)``, tried again while the store cannot be reached, for up to one
        lease; ``failed`` says an earlier try's answer was lost, so its write may have been
        made: ``write`` reads that back first."""
        deadline = time.monotonic() + self.lease.total_seconds()
        delay, failed = STORE_RETRY_FIRST_WAIT, False
        while True:
            try:
                return write(failed)
            except StoreUnreachable:
                if time.monotonic() + delay > deadline:
                    raise
            failed = True
            time.sleep(delay)
            delay = min(delay * 2, STORE_RETRY_LAST_WAIT)

    def _decide(
        self, state: _Attempt, provider_turn_id: UUID, text: str, attempt: int
    ) -> StepResult | None:
        claim = state.claim
        commands = self.commands
        item, _, turn = self._current(claim)
        actions = commands.repo.actions(item)
        try:
            parsed = commands.rules.parse_reply(text, turn, item, actions)
        except InvalidInput as invalid:
            # Parsed against the item as it is now: a reply refused because it changed
            # meanwhile (cancelled, stopped, a user's retry) fails as apply fails it, and
            # no second request is sent and charged for a turn that can decide nothing
            # (found by acceptance testing; coordinator.md 9.1).
            try:
                commands.check_fences(claim)
            except (CommandRefused, ResourceStopError) as fenced:
                return self._fail(claim, str(fenced), attempts=attempt)
            detail = str(getattr(invalid, "correction", "") or invalid)[:CORRECTION_LIMIT]
            commands.reject(claim, provider_turn_id, detail)
            state.correction = detail
            state.details.append(detail)
            return None
        try:
            commands.apply(claim, provider_turn_id, parsed)
        except (CommandRefused, InvalidInput, ResourceStopError) as refused:
            return self._fail(claim, str(refused), attempts=attempt)
        return StepResult(claim.work_item_id, "decided", claim.turn_id, attempts=attempt)

    def _current(
        self, claim: conv.ClaimRef
    ) -> tuple[wi.WorkItemState, conv.ConversationState, conv.Turn]:
        """The claimed turn's item, Conversation and turn as they are now (each attempt
        reads them afresh: the provider's answer may have taken minutes)."""
        item = self.commands.repo.work_item(claim.work_item_id)
        conversation = self.commands.repo.conversation(claim.work_item_id)
        assert conversation is not None and claim.turn_id is not None
        return item, conversation, conversation.turns[claim.turn_id]

    def _fail(
        self,
        claim: conv.ClaimRef,
        error: str,
        *,
        retry: bool = True,
        attempts: int = 0,
        audit: str = "",
    ) -> StepResult:
        if not self.commands.fail_turn(claim, error, retry=retry):
            return StepResult(claim.work_item_id, "lost", claim.turn_id, error)
        return StepResult(claim.work_item_id, "failed", claim.turn_id, audit or error, attempts)


class _LeaseKeeper(threading.Thread):
    """Renews the turn's claim every third of its lease while the provider works (2.2);
    a refused renewal ends the renewals, and the turn's next write finds the claim lost."""

    def __init__(
        self, commands: CoordinatorCommands, claim: conv.ClaimRef, lease: timedelta
    ) -> None:
        super().__init__(daemon=True)
        self.commands, self.claim, self.lease = commands, claim, lease
        self.stopped = threading.Event()

    def run(self) -> None:
        interval = max(1.0, self.lease.total_seconds() / 3)
        while not self.stopped.wait(interval):
            try:
                if not self.commands.renew(self.claim, self.lease):
                    return
            except WorkcenterError:
                return

    def stop(self) -> None:
        self.stopped.set()
        self.join()


def _prompt(turn: conv.Turn) -> str:
    """The latest user text, or the automatic trigger as JSON (9.6)."""
    if turn.user_text is not None:
        return turn.user_text
    return json.dumps(turn.trigger or {}, sort_keys=True, separators=(",", ":"))


def _lines(conversation: conv.ConversationState) -> list[conv.Message]:
    """The last 20 finished messages, newest first (9.6)."""
    finished = [m for m in conversation.messages if m.status != "thinking"]
    return list(reversed(finished[-20:]))


def _declared_bound(provider: CoordinatorProvider) -> int | None:
    """The bound on a reply's tokens the provider declares (``max_output_tokens``), if
    any: its requests carry it, and the budget reserves it instead of 16,384 tokens."""
    bound = getattr(provider, "max_output_tokens", None)
    if bound is None:
        return None
    if isinstance(bound, bool) or not isinstance(bound, int) or not 1 <= bound <= bounds.INTEGER:
        raise InvalidInput(
            f"the provider's max_output_tokens must be a whole number from 1 to {bounds.INTEGER},"
            f" not {bound!r}"
        )
    return bound
