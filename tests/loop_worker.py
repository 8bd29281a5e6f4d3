"""One worker process of the restart and 16-worker tests (``test_restart.py``,
``test_scaleout_16.py``), run as a script.

It runs the library's worker loop (``run_worker``) with an executor that works for
a moment and completes, until SIGTERM. It says "ready" once its signals are caught;
every claim (with its Action and the
candidates it tried) and finish it saw accepted is appended to its log, one JSON
line each; the store's own log lines (one per lost database) go to stderr.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from typing import Any

from workcenter.adapters.worker import run_worker
from workcenter.adapters.worker_run import StopSignals
from workcenter.application import Claim, WorkCenter


def main(store: str, name: str, log_path: str, work: float, lease: float) -> None:
    logging.basicConfig(level=logging.WARNING, format="%(name)s %(levelname)s %(message)s")

    def execute(claim: Claim) -> dict[str, Any]:
        time.sleep(work)
        return {
            "outcome": "completed",
            "summary": "done",
            "evidence": ["worked"],
            "acceptanceChecks": [
                {"criterion": c, "status": "passed", "evidence": "ok"}
                for c in claim.acceptance_criteria
            ],
        }

    with (
        WorkCenter.open(store, boot_id=f"{name}-{os.getpid()}", create=False) as wc,
        open(log_path, "a", buffering=1) as log,
        StopSignals() as signals,
    ):
        # Its stop signals are caught from here: a SIGTERM before would end it unheard
        # (a worker still starting on a loaded machine printed nothing, found in CI).
        log.write(json.dumps([name, "ready", "", ""]) + "\n")

        def record(event: str, claim: Claim, detail: str) -> None:
            if event == "claimed":
                detail = f"{claim.action_id} {claim.candidates_tried}"
            log.write(json.dumps([name, event, str(claim.run_id), detail]) + "\n")

        stats = run_worker(
            wc,
            execute,
            worker=name,
            lease_seconds=lease,
            poll_seconds=0.2,
            signals=signals,
            on_event=record,
        )
    print(json.dumps(stats.json()))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), float(sys.argv[5]))
