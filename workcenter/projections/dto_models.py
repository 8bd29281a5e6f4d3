"""The browser DTOs' shapes as pydantic models: what the HTTP API's document declares.

The DTOs are built as plain dicts for speed (``dto.py``, ADR-0037) and served as bytes
already serialised; these models are their contract, one class per shape the builders
here produce (``dto.py``, ``views.py``, ``execution.py``, ``goal_progress_dto.py``,
``conversation_dto.py``, ``timeline.py``, and ``budget.py``'s trimmed forms). They
take the builders' closed sets (statuses, roles, modes) from the domain's own
``Literal`` types. They validate nothing on the read path; tests validate every DTO
the scenarios build against them (extra keys forbidden), so a key added to a builder
and not here fails a test, not a client (ADR-0066).

A key that a builder omits rather than sends as null is optional here and, in the
document, not nullable (``omitted``). A field marked "absent when truncated" is
dropped only by the 512 KiB budget's ladder (``budget.py``).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from workcenter.domain.action import ActionStatus
from workcenter.domain.conversation import MessageStatus, TurnStatus
from workcenter.domain.goal_progress import CriterionStatus
from workcenter.domain.work_item import DeliveryTarget, Mode, WorkItemStatus

Count = Annotated[int, Field(ge=0)]
Revision = Annotated[int, Field(ge=1)]
EpochMs = Annotated[int, Field(ge=0, description="Milliseconds since the epoch (0: unknown)")]


def not_null(schema: dict[str, Any]) -> None:
    """An omitted key's schema: its type without the ``null`` a Python default adds."""
    arms = schema.pop("anyOf", None)
    if arms is not None:
        schema.update(next(arm for arm in arms if arm.get("type") != "null"))
    schema.pop("default", None)


def omitted(description: str | None = None) -> Any:
    """A key the builder leaves out when it has nothing to say (never null)."""
    return Field(None, description=description, json_schema_extra=not_null)


class Dto(BaseModel):
    """A DTO as served: camelCase keys, nothing else."""

    model_config = ConfigDict(
        alias_generator=to_camel, validate_by_name=True, serialize_by_alias=True, extra="forbid"
    )


# --- shared pieces ------------------------------------------------------------------------


class ExecutionStats(Dto):
    llm_request_count: Count
    loop_count: Count
    tool_count: Count
    input_tokens: Count
    output_tokens: Count
    cache_read_tokens: Count
    cache_write_tokens: Count
    total_tokens: Count


class BudgetLimits(Dto):
    max_requests: Count
    max_tokens: Count
    max_run_requests: Count
    max_action_attempts: Count
    max_coordinator_failures: Count


class ActionAttempts(Dto):
    action_id: str
    attempts: Count
    original_max_attempts: Count
    effective_max_attempts: Count


class Usage(Dto):
    """One usage breakdown; ``reservedTokens`` is part of ``chargedTokens``."""

    llm_request_count: Count
    input_tokens: Count
    output_tokens: Count
    cache_read_tokens: Count
    cache_write_tokens: Count
    total_tokens: Count
    charged_tokens: Count
    reserved_tokens: Count
    unknown_requests: Count
    in_flight_requests: Count


class Breakdown(Dto):
    coordinator: Usage
    actions: Usage


class StopReason(Dto):
    """Why the budget stopped the item: its code, when, and the whitelisted details."""

    code: str
    at: EpochMs
    run_id: str | int = omitted()
    action_id: str | int = omitted()
    turn_id: str | int = omitted()
    estimated_next_tokens: str | int = omitted()
    attempts: str | int = omitted()
    original_max_attempts: str | int = omitted()
    effective_max_attempts: str | int = omitted()
    failures: str | int = omitted()


class ExecutionControl(Dto):
    """The ledger's snapshot (resource-ledger.md 4): ``revision`` is what extend and
    resume expect."""

    revision: Count
    data_revision: Count = omitted()
    limits: BudgetLimits
    action_attempts_extension: Count
    action_attempts: list[ActionAttempts]
    omitted_action_attempt_count: Count = omitted()
    usage: Usage
    breakdown: Breakdown
    stop_reason: StopReason = omitted()
    coordinator_failures: Count
    retry_after: EpochMs
    token_accounting: str


class ActionRef(Dto):
    id: str
    type: str
    status: ActionStatus


class GoalProgressCounts(Dto):
    """A list row's goal progress: the criteria met and in all, the delivery."""

    completed_criteria_count: Count
    total_criteria_count: Count
    delivery_status: Literal["passed", "unmet"]


# --- goal progress (read-models.md 2.5) -------------------------------------------------


class CriterionProgress(Dto):
    criterion: str
    status: CriterionStatus
    evidence_run_ids: list[str]
    conflicting_run_ids: list[str] = omitted("Only on a failed criterion")


class Blocker(Dto):
    action_id: str
    status: Literal["failed", "waiting"]
    reason: str


class Delivery(Dto):
    target: DeliveryTarget = omitted()
    status: Literal["passed", "unmet"]
    evidence_run_ids: list[str]


class GoalProgress(Dto):
    contract_revision: Revision
    criteria: list[CriterionProgress]
    remaining_criteria: list[str]
    remaining_criteria_count: Count
    completed_criteria_count: Count
    total_criteria_count: Count
    omitted_criteria_count: Count
    evidence_run_ids: list[str]
    blockers: list[Blocker]
    omitted_blocker_count: Count = omitted("Only when truncated")
    delivery: Delivery


# --- summary (2.3) ----------------------------------------------------------------------


class CurrentAction(Dto):
    id: str
    type: str
    stage_id: str = omitted("Linear items only")
    generation: Revision
    status: ActionStatus
    objective: str


class ActionStats(Dto):
    id: str
    generation: Revision
    status: ActionStatus
    content_summary: str = omitted("Absent when truncated")
    execution_stats: ExecutionStats = omitted("Absent when truncated")
    loop_count: Count = omitted("Absent when truncated")
    tool_count: Count = omitted("Absent when truncated")
    progress_revision: Count
    attempt: Count
    failure_reason: str = omitted()


class ItemBase(Dto):
    """What the summary and the detail share (``dto._base`` and the board)."""

    id: str
    revision: Revision
    plan_revision: Count
    ledger_revision: Count
    coordinator_revision: Count
    coordination_mode: Mode
    execution_mode: Mode
    title: str
    goal: str
    status: WorkItemStatus
    current_action_id: str = omitted()
    action_count: Count
    completed_action_count: Count
    execution_stats: ExecutionStats
    execution_control: ExecutionControl = omitted("Absent for an item without a ledger")
    failure_reason: str = omitted()
    linked_session_ids: list[str]
    attachment_count: Count
    created_at: EpochMs
    updated_at: EpochMs
    board_lane: Literal["active", "needs_attention", "closed"]
    action_counts: dict[str, Count] = Field(description="Actions by status")
    attention_action: ActionRef = omitted()
    active_action: ActionRef = omitted()
    active_action_ids: list[str] = omitted()
    attention_action_ids: list[str] = omitted()
    executors: list[str]
    truncated: bool = omitted("True when the 512 KiB budget trimmed the DTO")
    omitted_action_count: Count = omitted("Only when truncated")


class Summary(ItemBase):
    """A list row (read-models.md 2.3) with its goal progress counted."""

    current_action: CurrentAction = omitted()
    action_stats: list[ActionStats]
    goal_progress: GoalProgressCounts


class TruncatedItem(Dto):
    """The budget's last resorts (``budget._minimal`` and ``budget._bare``): an item too
    large to send any other way, ``truncated`` always true."""

    id: str
    revision: Revision
    title: str = omitted()
    goal: str = omitted()
    status: str = omitted()
    current_action_id: str = omitted()
    execution_stats: ExecutionStats = omitted()
    execution_control: ExecutionControl = omitted()
    action_count: Count = omitted()
    actions: list[Any] = Field(max_length=0)
    truncated: Literal[True]
    omitted_action_count: Count
    created_at: EpochMs = omitted()
    updated_at: EpochMs = omitted()
    coordinator_revision: Count = omitted()


class TruncatedSummary(TruncatedItem):
    goal_progress: GoalProgressCounts


# --- detail (2.4) -----------------------------------------------------------------------


class Output(Dto):
    kind: str
    label: str
    ref: str
    status: str = omitted()
    action_id: str
    run_id: str


class AcceptanceResult(Dto):
    criterion: str
    status: str
    evidence_run_ids: list[str]


class RunResponse(Dto):
    run_id: str
    summary: str
    evidence: list[str]


class FinalResult(Dto):
    summary: str
    acceptance_results: list[AcceptanceResult]
    evidence_run_ids: list[str]
    outputs: list[Output]
    responses: list[RunResponse]
    residual_risks: list[str]


class Counters(Dto):
    action_count: Count
    open_action_count: Count
    completed_action_count: Count
    run_count: Count
    outcome_revision: Count


class EvidenceView(Dto):
    """An evidence item or output of a Run's result; a tool's label (its output) is
    never sent."""

    kind: str
    label: str = omitted("Absent for a tool")
    ref: str = omitted()
    status: str = omitted()


class CanonicalResult(Dto):
    run_id: str
    status: str
    summary: str = omitted("Absent when truncated")
    evidence: list[EvidenceView] = omitted("Absent when truncated")
    outputs: list[EvidenceView] = omitted("Absent when truncated")
    waiting_reason: str = omitted()
    review_decision: str = omitted()


class CanonicalAction(Dto):
    action_id: str
    type: str
    status: ActionStatus
    result: CanonicalResult = omitted("The current Run's result, when it has one")


class Mainline(Dto):
    contract_revision: Revision
    criteria: list[str]
    delivery_target: DeliveryTarget = omitted()
    counters: Counters
    actions: list[CanonicalAction]


class Speaker(Dto):
    id: str
    name: str


class DecisionView(Dto):
    kind: str
    reason: str = omitted()
    affected_action_ids: list[str]
    question: str = omitted()


class MessageView(Dto):
    """One Coordinator entry (coordinator.md 1.1), sanitised and capped."""

    id: str
    turn_id: str
    role: Literal["user", "assistant", "legacy_instruction"]
    text: str
    status: MessageStatus
    speaker: Speaker = omitted()
    error: str = omitted()
    decision: DecisionView = omitted()
    created_at: EpochMs
    updated_at: EpochMs


class Attachment(Dto):
    id: str
    name: str
    mime_type: str
    size: Count
    is_image: bool


class BriefView(Dto):
    objective: str = omitted()
    approach: str = omitted()
    expected_outcome: str = omitted()


class Failure(Dto):
    kind: str
    code: str = omitted()
    error: str = omitted()
    summary: str = omitted()
    failed_at: EpochMs = omitted()


class ActionEntry(Dto):
    """One Action of the detail; the body Action (the current one, else the last)
    carries its response, failure, live message and turns."""

    id: str
    sequence: Count
    type: str
    stage_id: str = omitted("Linear items only")
    workspace_mode: str
    depends_on_action_ids: list[str]
    generation: Revision
    contract_revision: Revision
    status: ActionStatus
    attempt: Count
    max_attempts: Count
    close_reason: str = omitted()
    brief: BriefView = omitted("Absent when truncated")
    content_summary: str
    execution_stats: ExecutionStats
    message_count: Count
    updated_at: EpochMs
    failure_reason: str = omitted()
    response: str = omitted()
    failure: Failure = omitted()
    live_message: str = omitted()
    turns: list[MessageView] = omitted("The body Action only")


class Detail(ItemBase):
    """The detail DTO (read-models.md 2.4); its ETag names ``planRevision`` and
    ``executionControl.revision``."""

    acceptance_criteria: list[str]
    delivery_target: DeliveryTarget = omitted()
    goal_progress: GoalProgress = omitted()
    outputs: list[Output]
    final_result: FinalResult = omitted()
    waiting_reason: str = omitted()
    mainline: Mainline
    messages: list[MessageView]
    omitted_message_count: Count = omitted()
    attachments: list[Attachment]
    action_summary: str
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
    started_at: EpochMs
    ended_at: EpochMs = omitted()
    lease_expired: bool = omitted("A running Run whose lease has lapsed")
    deferred: bool = omitted()


class TimelineAction(Dto):
    id: str
    sequence: int
    type: str
    status: ActionStatus
    generation: Revision
    runs: list[TimelineRun]
    omitted_run_count: Count = omitted()


class Timeline(Dto):
    work_item_id: str
    status: WorkItemStatus
    now: EpochMs
    actions: list[TimelineAction]
    omitted_action_count: Count = omitted()


class ConversationDecision(Dto):
    kind: str
    reason: str
    affected_action_ids: list[str]
    question: str = omitted()


class ConversationMessage(Dto):
    id: str
    turn_id: str
    role: Literal["user", "assistant"]
    status: MessageStatus
    text: str
    automatic: bool
    created_at: EpochMs
    speaker: str = omitted()
    finished_at: EpochMs = omitted()
    error: str = omitted()
    decision: ConversationDecision = omitted()


class ProviderAttempt(Dto):
    attempt: int
    status: str


class ConversationTurn(Dto):
    id: str
    status: TurnStatus
    user_originated: bool
    automatic: bool
    wake: str | None = Field(description="What woke the turn (null: not known)")
    attempts: list[ProviderAttempt]


class Conversation(Dto):
    conversation_version: Count
    coordinator_revision: Count
    thinking: bool
    pending_wakes: Count
    omitted_messages: Count
    messages: list[ConversationMessage]
    turns: list[ConversationTurn]
