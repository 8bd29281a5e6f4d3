"""A Run's reported outcome and its normalisation (lifecycle.md 1.6 and 3.4).

Malformed payloads are command errors (nothing is written). Everything else is
normalised in the spec's order; a rule that fails rewrites the outcome to
``failed`` with the reason as the Run's error, so a bad report is recorded as
a failure rather than lost.
"""

from __future__ import annotations

import hashlib
from typing import Any, Literal

import orjson
from pydantic import ConfigDict, ValidationError
from pydantic.alias_generators import to_camel

from workcenter.domain import action as act
from workcenter.domain import bounds, inputs, modes
from workcenter.domain import work_item as wi
from workcenter.domain.errors import InvalidInput
from workcenter.domain.evidence import (
    checks_match_criteria,
    normalize_checks,
    normalize_evidence,
    normalize_outputs,
)
from workcenter.domain.model import Immutable

Outcome = Literal["completed", "waiting", "retryable", "failed"]
OUTCOMES: tuple[str, ...] = ("completed", "waiting", "retryable", "failed")
RESPONSE_LIMIT = 65_536
TEXT_LIMIT = 8_000
CODE_LIMIT = 128


class RunReport(Immutable):
    """What an executor returns for a Run; camelCase and snake_case keys both work."""

    model_config = ConfigDict(
        extra="ignore", frozen=True, alias_generator=to_camel, populate_by_name=True
    )

    outcome: str
    summary: str = ""
    response: str = ""
    evidence: Any = None
    outputs: Any = None
    acceptance_checks: Any = None
    waiting_reason: str = ""
    error: str = ""
    failure_kind: str = ""
    failure_code: str = ""
    review_decision: Any = None
    contract_patch: Any = None

    @classmethod
    def parse(cls, payload: RunReport | dict[str, Any]) -> RunReport:
        inputs.payload(
            payload.model_dump() if isinstance(payload, RunReport) else payload, "run report"
        )
        if isinstance(payload, RunReport):
            return payload
        try:
            return cls.model_validate(payload)
        except ValidationError as error:
            raise InvalidInput(f"malformed run report: {inputs.describe(error)}") from None


class ContractPatch(Immutable):
    title: str | None = None
    goal: str | None = None
    acceptance_criteria: tuple[str, ...] | None = None
    delivery_target: wi.DeliveryTarget | None = None

    @property
    def is_empty(self) -> bool:
        return self == ContractPatch()


class NormalisedOutcome(Immutable):
    outcome: Outcome
    result: act.RunResult
    contract_patch: ContractPatch | None
    # The report as sent, so that the same finish sent again is recognised (ADR-0063).
    digest: str | None = None


def report_digest(report: RunReport) -> str:
    """SHA-256 of the report's fields as JSON with sorted keys: equal for the same
    report however its keys were ordered or spelled (camelCase or snake_case)."""
    fields = orjson.dumps(
        report.model_dump(mode="json"), option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS
    )
    return hashlib.sha256(fields).hexdigest()


def _patch(raw: Any) -> ContractPatch | None:
    if raw is None or raw == {}:
        return None
    if not isinstance(raw, dict):
        raise InvalidInput("contractPatch must be an object")
    fields: dict[str, Any] = {}
    # The patch refines the contract, so the contract's bounds hold: past one it is
    # refused like a user's edit, never cut.
    for key, limit in (("title", bounds.TITLE), ("goal", bounds.GOAL)):
        value = raw.get(key)
        if isinstance(value, str) and value.strip():
            fields[key] = inputs.text(value, f"contractPatch.{key}", limit)
    criteria = raw.get("acceptanceCriteria", raw.get("acceptance_criteria"))
    if criteria is not None:
        fields["acceptance_criteria"] = inputs.texts(
            criteria,
            "contractPatch.acceptanceCriteria",
            limit=bounds.CRITERION,
            count=bounds.CRITERIA,
        )
    target = raw.get("deliveryTarget", raw.get("delivery_target"))
    if target is not None:
        if target not in wi.DELIVERY_TARGETS:
            raise InvalidInput(f"contractPatch.deliveryTarget {target!r} is not known")
        fields["delivery_target"] = target
    patch = ContractPatch(**fields)
    return None if patch.is_empty else patch


def _is_final_gate(item: wi.WorkItemState, action: act.ActionState, decision: str | None) -> bool:
    """A deliver Action, or an approved review with nothing downstream to deliver."""
    if action.type == "deliver":
        return True
    if decision != "approved":
        return False
    return modes.of(item).is_last_stage(item, action)


def normalise(
    payload: RunReport | dict[str, Any], *, item: wi.WorkItemState, action: act.ActionState
) -> NormalisedOutcome:
    report = RunReport.parse(payload)
    digest = report_digest(report)
    if report.outcome not in OUTCOMES:
        raise InvalidInput(f"outcome must be one of {', '.join(OUTCOMES)}, not {report.outcome!r}")
    waiting_reason = report.waiting_reason.strip()[:TEXT_LIMIT]
    if report.outcome == "waiting" and not inputs.visible(waiting_reason):
        raise InvalidInput("a waiting outcome needs a waitingReason")
    patch = _patch(report.contract_patch)
    decision = (
        report.review_decision
        if report.review_decision in ("approved", "changes_requested")
        else None
    )
    result = act.RunResult(
        summary=report.summary.strip()[:TEXT_LIMIT],
        response=report.response[:RESPONSE_LIMIT],
        evidence=normalize_evidence(report.evidence),
        outputs=normalize_outputs(report.outputs),
        checks=normalize_checks(report.acceptance_checks),
        waiting_reason=waiting_reason or None,
        error=report.error.strip()[:TEXT_LIMIT] or None,
        failure_kind=report.failure_kind.strip()[:CODE_LIMIT] or None,
        failure_code=report.failure_code.strip()[:CODE_LIMIT] or None,
        review_decision=decision,
    )
    outcome: Outcome = report.outcome  # type: ignore[assignment]

    def failed(reason: str) -> NormalisedOutcome:
        return NormalisedOutcome(
            outcome="failed",
            result=result.model_copy(update={"error": reason, "failure_kind": "invalid_outcome"}),
            contract_patch=None,
            digest=digest,
        )

    if patch is not None and not modes.of(item).takes_contract_patches:
        patch = None
    if patch is not None and action.type != "triage":
        return failed("Only a triage Action may patch the contract")
    if outcome != "completed":
        return NormalisedOutcome(outcome=outcome, result=result, contract_patch=None, digest=digest)
    if action.type == "review" and decision is None:
        return failed("A completed review must decide approved or changes_requested")
    if not result.evidence:
        return failed("A completed outcome needs evidence")
    criteria = (
        patch.acceptance_criteria
        if patch is not None and patch.acceptance_criteria is not None
        else item.acceptance_criteria
    )
    if not checks_match_criteria(result.checks, criteria):
        return failed("A completed outcome needs exactly one check per criterion, in order")
    if _is_final_gate(item, action, decision) and any(
        check.status != "passed" for check in result.checks
    ):
        return failed("The final gate needs every acceptance check passed")
    return NormalisedOutcome(
        outcome="completed", result=result, contract_patch=patch, digest=digest
    )
