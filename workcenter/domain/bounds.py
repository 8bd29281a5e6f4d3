"""The bounds of command input: every text and list a caller hands Workcenter.

Input past a bound is refused with ``InvalidInput`` and writes nothing; it is
never cut short. docs/limits.md lists the same figures for users. Run reports
are the exception the report rules define: an executor's summary, evidence and
outputs are normalised (clipped or dropped) to their own limits, and only a
report past the raw ceilings below is refused.
"""

from __future__ import annotations

# --- the WorkItem contract --------------------------------------------------------
TITLE = 200
GOAL = 8_000
CRITERION = 1_000
# Past the goal-progress DTO's cap of 100 criteria (read-models.md 2.5), so that cap
# applies and omittedCriteriaCount counts what it left out (ADR-0045).
CRITERIA = 200
STAGE = 64
STAGES = 16

# --- user input to a WorkItem or Action ---------------------------------------------
REASON = 2_000  # cancel reasons, close reasons
ANSWER = 8_000  # retry answers
GUIDANCE = 8_000
RATIONALE = 2_000
BRIEF_FIELD = 2_000  # objective, approach, expected outcome
ACTION_TYPE = 64
COMPLETION_SUMMARY = 8_000
RISK = 2_000
RISKS = 24
IDS = 256  # Action or Run ids one command names

# Versions, generations and counts: the largest integer every JSON reader keeps exact.
INTEGER = 2**53 - 1


def saturated(count: int) -> int:
    """A sum of counts, each within INTEGER, held to it: tokens past 2^53 - 1 are past
    every budget anyway, and a JSON reader would take the sum for another number."""
    return count if count <= INTEGER else INTEGER


# --- workers and the ledger -----------------------------------------------------------
WORKER = 200
LEASE_MIN_SECONDS = 1
LEASE_MAX_SECONDS = 24 * 60 * 60
POLL_MAX_SECONDS = 60 * 60  # between a worker's or runner's polls: longer looks hung
RUNS_AT_ONCE = 256  # a worker process's Runs at once, each a thread (ADR-0097)
REQUEST_ID = 200  # request and Coordinator turn ids

# --- raw payloads (run reports, planning decisions) before they are parsed ------------
PAYLOAD_TEXT = 1_000_000
PAYLOAD_ITEMS = 1_000  # entries of one list or object
PAYLOAD_VALUES = 10_000  # values in all
PAYLOAD_DEPTH = 32
