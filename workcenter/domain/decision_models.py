"""The Coordinator's reply on the wire: ``{reply, decision}`` (coordinator.md 4.1).

Frozen pydantic models, camelCase on the wire. Their validators apply the
clamps of coordinator.md 9.2 (texts cut to their limits, ``maxAttempts`` and
``workspaceMode`` normalised, risks de-duplicated and cut), so a reply that
only overshoots a bound is accepted as the spec says; everything the models
refuse is a parse failure. The JSON schema a provider is asked to follow is
generated from them (``reply_schema``).
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Mapping
from typing import Annotated, Any, Literal, get_args
from uuid import UUID

from pydantic import AfterValidator, BeforeValidator, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

from workcenter.domain import bounds
from workcenter.domain.model import Immutable

DecisionKind = Literal["answer", "create_actions", "guide_actions", "request_human", "complete"]
DECISION_KINDS: tuple[str, ...] = get_args(DecisionKind)
WireWorkspaceMode = Literal["read", "shared", "isolated-write", "integrate"]
WIRE_WORKSPACE_MODES: tuple[str, ...] = get_args(WireWorkspaceMode)
PATCH_KEYS: tuple[str, ...] = ("title", "goal", "acceptanceCriteria", "deliveryTarget")

REPLY_LIMIT = 8_000
REASON_LIMIT = 2_000
QUESTION_LIMIT = 8_000
INSTRUCTION_LIMIT = 8_000
DEFAULT_MAX_ATTEMPTS = 2
_DEPENDENCY_KEYS = ("dependsOnActionIds", "dependsOnStageIds")


def _cut(limit: int) -> BeforeValidator:
    """Texts past their limit are truncated, not refused (9.2); non-text stays an error."""
    return BeforeValidator(lambda v: v[:limit] if isinstance(v, str) else v)


def clamp_max_attempts(value: object) -> int:
    """Missing or invalid gives the default; any integer is then bounded to 1..5 (4.3)."""
    if isinstance(value, bool) or not isinstance(value, int):
        return DEFAULT_MAX_ATTEMPTS
    return min(5, max(1, value))


def clamp_workspace_mode(value: object) -> object:
    """An unknown mode becomes shared; an absent one stays absent (it counts as mutating)."""
    return value if value is None or value in WIRE_WORKSPACE_MODES else "shared"


def _risks(value: object) -> object:
    if not isinstance(value, list | tuple) or not all(isinstance(r, str) for r in value):
        return value
    kept = dict.fromkeys(r.strip()[: bounds.RISK] for r in value if r.strip())
    return tuple(kept)[: bounds.RISKS]


def _unique_ids(value: tuple[UUID, ...] | None) -> tuple[UUID, ...] | None:
    return None if value is None else tuple(dict.fromkeys(value))


class Wire(Immutable):
    model_config = ConfigDict(
        extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=True
    )


Reply = Annotated[str, _cut(REPLY_LIMIT)]
Reason = Annotated[str, _cut(REASON_LIMIT)]
BriefText = Annotated[str, _cut(bounds.BRIEF_FIELD)]


class ContractPatch(Wire):
    """Keys as given; which keys were present matters (authority, 4.7), so the raw
    presence is kept in ``model_fields_set``. Null means "unchanged"."""

    title: str | None = None
    goal: str | None = None
    acceptance_criteria: Any = Field(
        default=None, json_schema_extra={"type": ["array", "null"], "items": {"type": "string"}}
    )
    delivery_target: str | None = Field(
        default=None,
        description="response | workspace_files | pull_request | merge; request_human only",
    )

    @property
    def present_keys(self) -> tuple[str, ...]:
        return tuple(to_camel(name) for name in self.model_fields_set)


class GoalRefs(Wire):
    criteria: tuple[str, ...] | None = Field(
        default=None, description="unmet acceptance criteria, exact text"
    )
    blocker_action_ids: tuple[UUID, ...] | None = Field(
        default=None, description="failed or waiting Actions this work unblocks"
    )
    delivery: bool | None = Field(default=None, description="true if it serves the delivery")
    rationale: str | None = None


class ActionBrief(Wire):
    type: str | None = Field(default=None, description="a slug; default custom; never triage")
    objective: BriefText
    approach: BriefText
    expected_outcome: BriefText
    workspace_mode: Annotated[WireWorkspaceMode | None, BeforeValidator(clamp_workspace_mode)] = (
        Field(default=None, description="absent counts as mutating")
    )
    max_attempts: Annotated[int, BeforeValidator(clamp_max_attempts)] = Field(
        default=DEFAULT_MAX_ATTEMPTS, description="1 to 5"
    )
    goal_refs: GoalRefs | None = None
    source_action_ids: tuple[UUID, ...] | None = Field(
        default=None,
        description="earlier Actions of this item this one builds on (audit links only)",
    )
    rationale: Annotated[str | None, _cut(bounds.RATIONALE)] = Field(
        default=None, description="why a repeat of earlier work is needed (20+ characters)"
    )

    @model_validator(mode="before")
    @classmethod
    def _no_dependencies(cls, data: Any) -> Any:
        if isinstance(data, Mapping):
            found = [k for k in _DEPENDENCY_KEYS if k in data]
            if found:
                raise ValueError(f"dynamic Actions have no dependencies; drop {', '.join(found)}")
        return data


class CloseAction(Wire):
    action_id: UUID
    reason: Reason


class GuidanceEntry(Wire):
    action_id: UUID
    instruction: Annotated[str, _cut(INSTRUCTION_LIMIT)]


class AcceptanceResult(Wire):
    criterion: str
    status: str = Field(description="passed")
    evidence_run_ids: tuple[UUID, ...] | None = None


class Completion(Wire):
    """Only its shape is checked at parse; every completion rule is checked at apply."""

    summary: Annotated[str | None, _cut(bounds.COMPLETION_SUMMARY)] = None
    acceptance_results: tuple[AcceptanceResult, ...] | None = None
    evidence_run_ids: tuple[UUID, ...] | None = None
    residual_risks: Annotated[tuple[str, ...] | None, BeforeValidator(_risks)] = None


class Decision(Wire):
    kind: DecisionKind
    reason: Reason
    question: Annotated[str | None, _cut(QUESTION_LIMIT)] = Field(
        default=None, description="request_human: what the human must answer"
    )
    work_item_type: str | None = None
    contract_patch: ContractPatch | None = Field(
        default=None, description="user turns only; create_actions or request_human"
    )
    close_actions: tuple[CloseAction, ...] | None = None
    supersede_action_ids: Annotated[tuple[UUID, ...] | None, AfterValidator(_unique_ids)] = None
    guidance: tuple[GuidanceEntry, ...] | None = None
    actions: tuple[ActionBrief, ...] | None = None
    completion: Completion | None = None


class CoordinatorReply(Wire):
    reply: Reply
    decision: Decision


class TurnAuthority(Immutable):
    """Who began the turn, read from its PERSISTED assistant message, never from a fence."""

    user_originated: bool
    automatic: bool

    @model_validator(mode="after")
    def _one_origin(self) -> TurnAuthority:
        if self.user_originated and self.automatic:
            raise ValueError("a turn is user-originated or automatic, not both")
        return self

    @property
    def allowed_kinds(self) -> tuple[str, ...]:
        if self.user_originated:
            return DECISION_KINDS
        if self.automatic:
            return ("create_actions", "guide_actions", "request_human", "complete")
        # A recovery turn (legacy graph mode, out of scope) could only guide or ask.
        return ("guide_actions", "request_human")


USER_TURN = TurnAuthority(user_originated=True, automatic=False)
AUTOMATIC_TURN = TurnAuthority(user_originated=False, automatic=True)


# --- the schema -------------------------------------------------------------------

# Keywords strict structured-output decoders refuse or ignore; the bounds they carry
# are clamped at parse instead (9.2).
_DROPPED_KEYWORDS = ("title", "default", "maxLength", "minLength")


def _strictish(node: Any, *, names: bool = False) -> Any:
    if isinstance(node, dict):
        out = {
            k: _strictish(v, names=k in ("properties", "$defs"))
            for k, v in node.items()
            if names or k not in _DROPPED_KEYWORDS
        }
        if names:
            return out
        if out.get("type") == "object" and "properties" in out:
            # Strict mode: every property listed as required (optional ones are
            # nullable) and no others allowed.
            out["required"] = list(out["properties"])
            out["additionalProperties"] = False
        return out
    if isinstance(node, list):
        return [_strictish(v) for v in node]
    return node


def _nullable(node: dict[str, Any]) -> dict[str, Any]:
    """An optional property stays optional for a decoder that must emit every key."""
    if "anyOf" in node or "$ref" in node:
        return node if "anyOf" in node else {"anyOf": [node, {"type": "null"}]}
    kind = node.get("type")
    if isinstance(kind, list):
        return node
    return {**node, "type": [kind, "null"]} if kind else node


@functools.cache
def _schema() -> dict[str, Any]:
    raw = CoordinatorReply.model_json_schema(by_alias=True, mode="validation")
    for definition in [raw, *raw.get("$defs", {}).values()]:
        definition.pop("description", None)  # class docstrings are for readers of the code
        required = set(definition.get("required", ()))
        for name, prop in definition.get("properties", {}).items():
            if name not in required:
                definition["properties"][name] = _nullable(prop)
    result: dict[str, Any] = _strictish(raw)
    return result


def reply_schema(kinds: tuple[str, ...] = DECISION_KINDS) -> dict[str, Any]:
    """The JSON schema of ``{reply, decision}``, camelCase, usable as an OpenAI
    ``response_format={"type": "json_schema", "json_schema": {"name": ..., "schema":
    reply_schema(), "strict": True}}``: every object closed, every key required and the
    optional ones nullable. ``kinds`` narrows the decision kinds offered to the ones the
    turn may take, so a model is never offered a kind it would be refused. A fresh copy
    each call."""
    unknown = [k for k in kinds if k not in DECISION_KINDS]
    if not kinds or unknown:
        raise ValueError(f"kinds must be a non-empty subset of {DECISION_KINDS}; got {kinds}")
    schema = copy.deepcopy(_schema())
    schema["$defs"]["Decision"]["properties"]["kind"]["enum"] = list(kinds)
    return schema
