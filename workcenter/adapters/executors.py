"""Example executors for ``workcenter worker --executor module:callable``."""

from __future__ import annotations

from typing import Any

from workcenter.application import Claim


def echo(claim: Claim) -> dict[str, Any]:
    """Completes every Action, claiming each criterion with the brief as evidence (a
    review approves: a completed review must decide).

    Useful to exercise a store end to end; it proves nothing about real work.
    """
    decision = {"reviewDecision": "approved"} if claim.action_type == "review" else {}
    return decision | {
        "outcome": "completed",
        "summary": f"{claim.action_type}: {claim.brief.objective}",
        "evidence": [f"echo executor ran {claim.action_type}"],
        "acceptanceChecks": [
            {"criterion": c, "status": "passed", "evidence": "echoed"}
            for c in claim.acceptance_criteria
        ],
    }
