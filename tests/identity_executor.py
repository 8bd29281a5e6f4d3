"""The executor of ``test_worker_identity.py``'s worker processes, loaded by the CLI
as ``identity_executor:run`` (the tests directory is on their ``PYTHONPATH``).

It "works" for a moment, long enough for a peer to poll idle and run its recovery
while this Run is live, then reports the stage completed."""

from __future__ import annotations

import time
from typing import Any

from workcenter.application import Claim

WORK_SECONDS = 0.1


def run(claim: Claim) -> dict[str, Any]:
    time.sleep(WORK_SECONDS)
    return {
        "outcome": "completed",
        "summary": "delivered",
        "evidence": ["sent the answer"],
        "acceptanceChecks": [
            {"criterion": c, "status": "passed", "evidence": "ok"}
            for c in claim.acceptance_criteria
        ],
    }
