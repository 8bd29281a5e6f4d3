"""The browser DTOs' shapes: the types their builders return, and what the HTTP API's
document declares.

Each shape is a ``TypedDict`` with the DTO's own camelCase keys. The builders
(``dto.py``, ``views.py``, ``execution.py``, ``goal_progress_dto.py``,
``conversation_dto.py``, ``timeline.py``) are annotated with them, so mypy checks
every key and value a builder writes; pydantic turns the same classes into the
document's schemas. At run time a DTO is still the plain dict it always was, built
for speed (ADR-0037) and serialised once: nothing here validates on the read path
(ADR-0071). Closed sets (statuses, roles, modes) are the domain's own ``Literal``
types.

A key that a builder omits rather than sends as null is ``NotRequired`` and, in the
document, not nullable. A field marked "absent when truncated" is dropped only by the
512 KiB budget's ladder (``budget.py``), which works on built DTOs as plain dicts.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, NotRequired

from pydantic import ConfigDict, Field, with_config
from typing_extensions import TypedDict

from workcenter.domain.action import ActionStatus
from workcenter.domain.conversation import MessageStatus, TurnStatus
from workcenter.domain.goal_progress import CriterionStatus
from workcenter.domain.work_item import DeliveryTarget, Mode, WorkItemStatus

Count = Annotated[int, Field(ge=0)]
Revision = Annotated[int, Field(ge=1)]
MessageRole = Literal["user", "assistant", "legacy_instruction"]
BriefKey = Literal["objective", "approach", "expectedOutcome"]
EpochMs = Annotated[int, Field(ge=0, description="Milliseconds since the epoch (0: unknown)")]


# Unknown keys are refused when a test validates a built DTO (pydantic reads this
# config on every subclass), so a key a builder adds without its type fails a test.
@with_config(ConfigDict(extra="forbid"))
class Dto(TypedDict):
    """A DTO as served: camelCase keys, nothing else."""


# --- shared pieces ------------------------------------------------------------------------


class ExecutionStats(Dto):
    llmRequestCount: Count
    loopCount: Count
    toolCount: Count
    inputTokens: Count
    outputTokens: Count
    cacheReadTokens: Count
    cacheWriteTokens: Count
    totalTokens: Count


class BudgetLimits(Dto):
    maxRequests: Count
    maxTokens: Count
    maxRunRequests: Count
    maxActionAttempts: Count
    maxCoordinatorFailures: Count


class ActionAttempts(Dto):
    actionId: str
    attempts: Count
    originalMaxAttempts: Count
    effectiveMaxAttempts: Count


class Usage(Dto):
    """One usage breakdown; ``reservedTokens`` is part of ``chargedTokens``."""

    llmRequestCount: Count
    inputTokens: Count
    outputTokens: Count
    cacheReadTokens: Count
    cacheWriteTokens: Count
    totalTokens: Count
    chargedTokens: Count
    reservedTokens: Count
    unknownRequests: Count
    inFlightRequests: Count


class Breakdown(Dto):
    coordinator: Usage
    actions: Usage


class StopReason(Dto):
    """Why the budget stopped the item: its code, when, and the whitelisted details."""

    code: str
    at: EpochMs
    runId: NotRequired[str | int]
    actionId: NotRequired[str | int]
    turnId: NotRequired[str | int]
    estimatedNextTokens: NotRequired[str | int]
    attempts: NotRequired[str | int]
    originalMaxAttempts: NotRequired[str | int]
    effectiveMaxAttempts: NotRequired[str | int]
    failures: NotRequired[str | int]


class ResumeNeeds(Dto, total=False):
    """The least addition to each limit before a resume is taken; only the limits that
    need one (ADR-0096)."""

    maxRequests: Count
    maxTokens: Count
    maxActionAttempts: Count
    maxCoordinatorFailures: Count


class ExecutionControl(Dto):
    """The ResourceLedger's snapshot: ``revision`` is what extend and
    resume expect."""

    revision: Count
    dataRevision: NotRequired[Count]
    limits: BudgetLimits
    actionAttemptsExtension: Count
    actionAttempts: list[ActionAttempts]
    omittedActionAttemptCount: NotRequired[Count]
    usage: Usage
    breakdown: Breakdown
    stopReason: NotRequired[StopReason]
    resumeNeeds: NotRequired[
        Annotated[ResumeNeeds, Field(description="Only while a resume would be refused")]
    ]
    coordinatorFailures: Count
    retryAfter: EpochMs
    tokenAccounting: str


class ActionRef(Dto):
    id: str
    type: str
    status: ActionStatus


class GoalProgressCounts(Dto):
    """A list row's goal progress: the criteria met and in all, the delivery."""

    completedCriteriaCount: Count
    totalCriteriaCount: Count
    deliveryStatus: Literal["passed", "unmet"]


# --- goal progress (read-models.md 2.5) -------------------------------------------------


class CriterionProgress(Dto):
    criterion: str
    status: CriterionStatus
    evidenceRunIds: list[str]
    conflictingRunIds: NotRequired[
        Annotated[list[str], Field(description="Only on a failed criterion")]
    ]


class Blocker(Dto):
    actionId: str
    status: Literal["failed", "waiting"]
    reason: str


class Delivery(Dto):
    target: NotRequired[DeliveryTarget]
    status: Literal["passed", "unmet"]
    evidenceRunIds: list[str]


class GoalProgress(Dto):
    contractRevision: Revision
    criteria: list[CriterionProgress]
    remainingCriteria: list[str]
    remainingCriteriaCount: Count
    completedCriteriaCount: Count
    totalCriteriaCount: Count
    omittedCriteriaCount: Count
    evidenceRunIds: list[str]
    blockers: list[Blocker]
    omittedBlockerCount: NotRequired[Annotated[Count, Field(description="Only when truncated")]]
    delivery: Delivery


# --- summary (2.3) ----------------------------------------------------------------------


class CurrentAction(Dto):
    id: str
    type: str
    stageId: NotRequired[Annotated[str, Field(description="Linear items only")]]
    generation: Revision
    status: ActionStatus
    objective: str


class ActionStats(Dto):
    id: str
    generation: Revision
    status: ActionStatus
    contentSummary: NotRequired[Annotated[str, Field(description="Absent when truncated")]]
    executionStats: NotRequired[
        Annotated[ExecutionStats, Field(description="Absent when truncated")]
    ]
    loopCount: NotRequired[Annotated[Count, Field(description="Absent when truncated")]]
    toolCount: NotRequired[Annotated[Count, Field(description="Absent when truncated")]]
    progressRevision: Count
    attempt: Count
    failureReason: NotRequired[str]


class ItemBase(Dto):
    """What the summary and the detail share (``dto._base`` and the board)."""

    id: str
    revision: Revision
    planRevision: Count
    ledgerRevision: Count
    coordinatorRevision: Count
    coordinationMode: Mode
    executionMode: Mode
    title: str
    goal: str
    status: WorkItemStatus
    currentActionId: NotRequired[str]
    actionCount: Count
    completedActionCount: Count
    executionStats: ExecutionStats
    executionControl: NotRequired[
        Annotated[ExecutionControl, Field(description="Absent for an item without a ledger")]
    ]
    failureReason: NotRequired[str]
    linkedSessionIds: list[str]
    attachmentCount: Count
    createdAt: EpochMs
    updatedAt: EpochMs
    boardLane: Literal["active", "needs_attention", "closed"]
    actionCounts: Annotated[dict[str, Count], Field(description="Actions by status")]
    attentionAction: NotRequired[ActionRef]
    activeAction: NotRequired[ActionRef]
    activeActionIds: NotRequired[list[str]]
    attentionActionIds: NotRequired[list[str]]
    executors: list[str]
    truncated: NotRequired[
        Annotated[bool, Field(description="True when the 512 KiB budget trimmed the DTO")]
    ]
    omittedActionCount: NotRequired[Annotated[Count, Field(description="Only when truncated")]]


class SummaryRow(ItemBase):
    """A list row as the projection builds it."""

    currentAction: NotRequired[CurrentAction]
    actionStats: list[ActionStats]


class Summary(SummaryRow):
    """A list row as served: with its goal progress counted."""

    goalProgress: GoalProgressCounts


class TruncatedItem(Dto):
    """The budget's last resorts (``budget._minimal`` and ``budget._bare``): an item too
    large to send any other way, ``truncated`` always true."""

    id: str
    revision: Revision
    title: NotRequired[str]
    goal: NotRequired[str]
    status: NotRequired[str]
    currentActionId: NotRequired[str]
    executionStats: NotRequired[ExecutionStats]
    executionControl: NotRequired[ExecutionControl]
    actionCount: NotRequired[Count]
    actions: Annotated[list[Any], Field(max_length=0)]
    truncated: Literal[True]
    omittedActionCount: Count
    createdAt: NotRequired[EpochMs]
    updatedAt: NotRequired[EpochMs]
    coordinatorRevision: NotRequired[Count]


class TruncatedSummary(TruncatedItem):
    goalProgress: GoalProgressCounts


# --- detail (2.4) -----------------------------------------------------------------------


class Output(Dto):
    kind: str
    label: str
    ref: str
    status: NotRequired[str]
    actionId: str
    runId: str


class AcceptanceResult(Dto):
    criterion: str
    status: str
    evidenceRunIds: list[str]


class RunResponse(Dto):
    runId: str
    summary: str
    evidence: list[str]


class FinalResult(Dto):
    summary: str
    acceptanceResults: list[AcceptanceResult]
    evidenceRunIds: list[str]
    outputs: list[Output]
    responses: list[RunResponse]
    residualRisks: list[str]


class Counters(Dto):
    actionCount: Count
    openActionCount: Count
    completedActionCount: Count
    runCount: Count
    outcomeRevision: Count


class EvidenceView(Dto):
    """An evidence item or output of a Run's result; a tool's label (its output) is
    never sent."""

    kind: str
    label: NotRequired[Annotated[str, Field(description="Absent for a tool")]]
    ref: NotRequired[str]
    status: NotRequired[str]


class CanonicalResult(Dto):
    runId: str
    status: str
    summary: NotRequired[Annotated[str, Field(description="Absent when truncated")]]
    evidence: NotRequired[Annotated[list[EvidenceView], Field(description="Absent when truncated")]]
    outputs: NotRequired[Annotated[list[EvidenceView], Field(description="Absent when truncated")]]
    waitingReason: NotRequired[str]
    reviewDecision: NotRequired[str]


class CanonicalAction(Dto):
    actionId: str
    type: str
    status: ActionStatus
    result: NotRequired[
        Annotated[CanonicalResult, Field(description="The current Run's result, when it has one")]
    ]


class Mainline(Dto):
    contractRevision: Revision
    criteria: list[str]
    deliveryTarget: NotRequired[DeliveryTarget]
    counters: Counters
    actions: list[CanonicalAction]


class Speaker(Dto):
    id: str
    name: str


class DecisionView(Dto):
    kind: str
    reason: NotRequired[str]
    affectedActionIds: list[str]
    question: NotRequired[str]


class MessageView(Dto):
    """One Coordinator entry, sanitised and capped."""

    id: str
    turnId: str
    role: MessageRole
    text: str
    status: MessageStatus
    speaker: NotRequired[Speaker]
    error: NotRequired[str]
    decision: NotRequired[DecisionView]
    createdAt: EpochMs
    updatedAt: EpochMs


class Attachment(Dto):
    id: str
    name: str
    mimeType: str
    size: Count
    isImage: bool


class BriefView(Dto):
    objective: NotRequired[str]
    approach: NotRequired[str]
    expectedOutcome: NotRequired[str]


class Failure(Dto):
    kind: str
    code: NotRequired[str]
    error: NotRequired[str]
    summary: NotRequired[str]
    failedAt: NotRequired[EpochMs]


class BodyFields(Dto):
    """What the body Action's entry carries besides the others' (``views.add_body_fields``)."""

    response: NotRequired[str]
    failure: NotRequired[Failure]
    liveMessage: NotRequired[str]


class ActionEntry(Dto):
    """One Action of the detail; the body Action (the current one, else the last)
    carries its response, failure, live message and turns."""

    id: str
    sequence: Count
    type: str
    stageId: NotRequired[Annotated[str, Field(description="Linear items only")]]
    workspaceMode: str
    dependsOnActionIds: list[str]
    generation: Revision
    contractRevision: Revision
    status: ActionStatus
    attempt: Count
    maxAttempts: Count
    closeReason: NotRequired[str]
    brief: NotRequired[Annotated[BriefView, Field(description="Absent when truncated")]]
    contentSummary: str
    executionStats: ExecutionStats
    messageCount: Count
    updatedAt: EpochMs
    failureReason: NotRequired[str]
    response: NotRequired[str]
    failure: NotRequired[Failure]
    liveMessage: NotRequired[str]
    turns: NotRequired[Annotated[list[MessageView], Field(description="The body Action only")]]


class Detail(ItemBase):
    """An item's detail; its ETag names ``planRevision`` and
    ``executionControl.revision``."""

    acceptanceCriteria: list[str]
    deliveryTarget: NotRequired[DeliveryTarget]
    goalProgress: NotRequired[GoalProgress]
    outputs: list[Output]
    finalResult: NotRequired[FinalResult]
    waitingReason: NotRequired[str]
    mainline: Mainline
    messages: list[MessageView]
    omittedMessageCount: NotRequired[Count]
    attachments: list[Attachment]
    actionSummary: str
    actions: list[ActionEntry]


DetailDto = Detail | TruncatedItem
SummaryDto = Summary | TruncatedSummary


# --- timeline and conversation ------------------------------------------------------------


class TimelineRun(Dto):
    id: str
    ordinal: int
    generation: Revision
    attempt: int
    status: str
    worker: Annotated[str, Field(description="The name of the worker that claimed the Run")]
    startedAt: EpochMs
    endedAt: NotRequired[EpochMs]
    leaseExpired: NotRequired[
        Annotated[bool, Field(description="A running Run whose lease has lapsed")]
    ]
    deferred: NotRequired[bool]


class TimelineAction(Dto):
    id: str
    sequence: int
    type: str
    status: ActionStatus
    generation: Revision
    noAttemptLeft: NotRequired[
        Annotated[
            bool,
            Field(
                description="A retry, an answer or guidance of this Action is refused until"
                " max_action_attempts is extended: it would run again with no attempt left"
            ),
        ]
    ]
    runs: list[TimelineRun]
    omittedRunCount: NotRequired[Count]


class Timeline(Dto):
    workItemId: str
    status: WorkItemStatus
    now: EpochMs
    actions: list[TimelineAction]
    omittedActionCount: NotRequired[Count]


class ConversationDecision(Dto):
    kind: str
    reason: str
    affectedActionIds: list[str]
    question: NotRequired[str]


class ConversationMessage(Dto):
    id: str
    turnId: str
    role: Literal["user", "assistant"]
    status: MessageStatus
    text: str
    automatic: bool
    createdAt: EpochMs
    speaker: NotRequired[str]
    finishedAt: NotRequired[EpochMs]
    error: NotRequired[str]
    decision: NotRequired[ConversationDecision]


class ProviderAttempt(Dto):
    attempt: int
    status: str


class ConversationTurn(Dto):
    id: str
    status: TurnStatus
    userOriginated: bool
    automatic: bool
    wake: Annotated[str | None, Field(description="What woke the turn (null: not known)")]
    attempts: list[ProviderAttempt]


class Conversation(Dto):
    conversationVersion: Count
    coordinatorRevision: Count
    thinking: bool
    pendingWakes: Count
    omittedMessages: Count
    messages: list[ConversationMessage]
    turns: list[ConversationTurn]
