"""Typed refusals. Every refusal is raised before any event exists, so it writes nothing."""

from __future__ import annotations

from uuid import UUID


class WorkcenterError(Exception):
    """Base class of every error Workcenter raises on purpose."""

    code = "workcenter_error"


class InvalidInput(WorkcenterError, ValueError):
    """The command's input is malformed (missing title, unknown outcome, ...)."""

    code = "invalid_input"


class CommandRefused(WorkcenterError):
    """The command is well-formed but the aggregate's state does not allow it."""

    code = "command_refused"


class StaleRun(CommandRefused):
    """A Run's fence failed: stale lease epoch, other boot id, expired or finished."""

    code = "stale_run"

    def __init__(
        self, message: str = "Run is stale, cancelled, expired, or already finished"
    ) -> None:
        super().__init__(message)


class ClaimIdUsed(CommandRefused):
    """A claim's client claim id names a Run it cannot answer (ADR-0114): claimed by
    another worker, or ended. A worker that reuses an id has a bug; a new claim needs a
    new id."""

    code = "claim_id_used"


class RequestIdUsed(CommandRefused):
    """A create's request id names a WorkItem created with other input (ADR-0139): a
    retry must send what the first attempt sent; a new WorkItem needs a new id."""

    code = "request_id_used"


class NotFound(WorkcenterError, LookupError):
    """No WorkItem or Action has this id (or had the version asked for)."""

    code = "not_found"

    def __init__(self, kind: str, aggregate_id: UUID | str, version: int | None = None) -> None:
        at = "" if version is None else f" at version {version}"
        super().__init__(f"{kind} {aggregate_id} not found{at}")
        self.kind = kind
        self.aggregate_id = aggregate_id


# What a conflict names when the version the caller gave is not one the stream had.
UNKNOWN_VERSION = "unknown version"


class VersionConflict(WorkcenterError):
    """What the caller saw has changed in a way that conflicts with its command."""

    code = "version_conflict"

    def __init__(
        self,
        aggregate_id: UUID,
        expected: int,
        actual: int,
        conflicting: list[str],
        subject: str = "",
    ) -> None:
        if conflicting == [UNKNOWN_VERSION]:
            said = f"is at version {actual} and never had version {expected}"
        else:
            said = f"changed from version {expected} to {actual} ({', '.join(conflicting)})"
        super().__init__(f"{subject or aggregate_id} {said}; refresh and try again")
        self.aggregate_id = aggregate_id
        self.expected = expected
        self.actual = actual
        self.conflicting = conflicting


class ResourceStopError(WorkcenterError):
    """The ResourceLedger refused an LLM request; it was not sent and must not be retried.

    ``code`` is the denial code (a stop code such as ``work_item_tokens_exhausted``,
    or ``work_item_inactive`` / ``request_already_reserved``). Unlike other refusals
    it may follow a write: a denial that stops the item is saved before it is raised.
    Only a user's extend and resume let the WorkItem spend again.
    """

    code = "resource_stopped"
    failure_kind = "resource_limit"
    retryable = False

    def __init__(self, code: str, message: str | None = None) -> None:
        super().__init__(message or f"LLM request refused by the ResourceLedger: {code}")
        self.code = code


class ProviderFailed(WorkcenterError):
    """The Coordinator's LLM provider failed to answer a turn.

    ``transient`` marks rate limits, timeouts and server errors (coordinator.md
    3.4); either kind fails the turn, and a transient one lets an automatic
    turn be begun again after the ledger's retry-after."""

    code = "provider_failed"

    def __init__(self, message: str, *, transient: bool) -> None:
        super().__init__(message)
        self.transient = transient


class TurnFenceLost(WorkcenterError):
    """A Coordinator turn lost its mailbox claim (expired, taken over or released):
    nothing it computed may be sent or applied."""

    code = "turn_fence_lost"


class DecisionInvalid(InvalidInput):
    """A Coordinator reply failed a rule checked at parse (coordinator.md 9.1): the
    provider turn is rejected and the turn's second attempt is sent ``correction``."""

    code = "decision_invalid"
    CORRECTION_LIMIT = 2_000

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.correction = (
            "Your previous reply was not accepted: "
            f"{message}. Reply again with one JSON object that follows the schema."
        )[: self.CORRECTION_LIMIT]


class DecisionRefused(CommandRefused):
    """A parsed Coordinator decision failed a rule checked at apply (coordinator.md 9.1):
    nothing of it is written and the turn fails, with no second attempt."""

    code = "decision_refused"


class SnapshotTooLarge(CommandRefused):
    """The WorkItem's unfinished Actions do not fit the Coordinator's 64 KiB snapshot,
    even in the compact form: the turn fails (coordinator.md 1.3)."""

    code = "snapshot_too_large"


class UndecodableEvent(WorkcenterError):
    """A stored event whose bytes the store cannot decode (ADR-0099): they were damaged or
    edited in the database after they were written, so no load, fold or audit built on
    them can be trusted. Raised by the one place that decodes stored bytes, whatever the
    codec said; ``audit verify`` names the broken link. ``position`` is None where it
    could not be looked up (a bundle, a store in memory)."""

    code = "undecodable_event"

    def __init__(self, stream: UUID | str, version: int, position: int | None, reason: str) -> None:
        at = f"position {position} (stream {stream}, version {version})"
        if position is None:
            at = f"version {version} of stream {stream}"
        super().__init__(
            f"the stored event at {at} cannot be decoded ({reason}): its bytes were damaged"
            " or edited in the database; run `workcenter audit verify` to see where the"
            " history breaks"
        )
        self.stream = stream
        self.version = version
        self.position = position
        self.reason = reason


def snapshot_ignored(damaged: UndecodableEvent) -> str:
    """The warning of a snapshot that did not decode and was replaced by its events."""
    return (
        f"the snapshot of stream {damaged.stream} at version {damaged.version} cannot be"
        f" decoded ({damaged.reason}): it is ignored and the stream loaded from its events;"
        " `workcenter audit verify` lists damaged snapshots"
    )
