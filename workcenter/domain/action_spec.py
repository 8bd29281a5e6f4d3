"""What an Action is asked to do: its brief, its context and the hash of its spec.

A new generation starts whenever the spec hash changes, and a Run is fenced by
the hash it was claimed under.
"""

from __future__ import annotations

import hashlib
from typing import Literal
from uuid import UUID

import orjson
from pydantic import Field

from workcenter.domain.evidence import EvidenceItem
from workcenter.domain.model import Immutable
from workcenter.domain.run import ReviewDecision

WorkspaceMode = Literal["shared", "read", "isolated-write", "integrate"]


class Brief(Immutable):
    objective: str
    approach: str = ""
    expected_outcome: str = ""
    # Why a Coordinator repeats earlier work (coordinator.md 9.2); kept with the brief.
    # Briefs without one serialise (and hash) exactly as they did before it existed.
    rationale: str = Field(default="", exclude_if=lambda rationale: not rationale)


class ContextEntry(Immutable):
    """What an Action knows beyond its brief: earlier results, guidance, user input."""

    kind: Literal["prior_result", "guidance", "input"]
    text: str = ""
    action_type: str | None = None
    run_id: UUID | None = None
    evidence: tuple[EvidenceItem, ...] = ()
    review_decision: ReviewDecision | None = None
    waiting_reason: str | None = None


def spec_hash(
    *,
    type: str,
    brief: Brief,
    workspace_mode: str,
    max_attempts: int,
    context: tuple[ContextEntry, ...],
    contract_revision: int,
) -> str:
    """SHA-256 of the canonical JSON of what the Action is asked to do."""
    spec = {
        "type": type,
        "brief": brief.model_dump(mode="json"),
        "workspace_mode": workspace_mode,
        "max_attempts": max_attempts,
        "context": [entry.model_dump(mode="json") for entry in context],
        "contract_revision": contract_revision,
    }
    return hashlib.sha256(orjson.dumps(spec, option=orjson.OPT_SORT_KEYS)).hexdigest()
