"""One worker process of the scale-out tests (``test_scaleout.py``), run as a script.

It opens the store with inline projections off (a separate runner keeps the read
models), and loops until the stop file appears: recover dead Runs now and then,
claim, spend one metered LLM request through the item's ledger, "work", finish.
Every command it saw accepted is appended to its log, one JSON line each, flushed
at once, so the controller can check the log of a SIGKILLed worker against the
store. A few first attempts report ``retryable``, and a few outlive their lease
on purpose (no renewal) so that their finish must be refused as stale.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

from workcenter.adapters.metered import MeteredProvider
from workcenter.application import Claim, WorkCenter
from workcenter.domain.errors import ResourceStopError, StaleRun, WorkcenterError

RECOVER_EVERY = 0.5


def retried(claim: Claim) -> bool:
    return claim.attempt == 1 and claim.run_id.int % 5 == 0


def outlives_its_lease(claim: Claim) -> bool:
    return claim.attempt == 1 and claim.run_id.int % 61 == 0


def fake_llm(request: Any) -> dict[str, Any]:
    return {"text": "ok", "usage": {"input_tokens": 40, "output_tokens": 10}}


def execute(wc: WorkCenter, claim: Claim, work_seconds: float, lease: float) -> dict[str, Any]:
    llm = MeteredProvider.for_claim(wc, claim, provider=fake_llm)
    try:
        llm({"messages": [{"role": "user", "content": claim.brief.objective}], "max_tokens": 50})
    except ResourceStopError as stop:
        return {
            "outcome": "failed",
            "error": str(stop),
            "failureKind": stop.failure_kind,
            "failureCode": stop.code,
        }
    time.sleep(lease + 1.0 if outlives_its_lease(claim) else work_seconds)
    if retried(claim):
        return {"outcome": "retryable", "error": "flaky network"}
    return {
        "outcome": "completed",
        "summary": "answered",
        "evidence": ["ran the query"],
        "acceptanceChecks": [
            {"criterion": c, "status": "passed", "evidence": "ok"}
            for c in claim.acceptance_criteria
        ],
    }


def main(store: str, name: str, log_path: str, lease: float, work: float, stop: str) -> None:
    with (
        WorkCenter.open(
            store, boot_id=f"{name}-{os.getpid()}", inline_projections=False, create=False
        ) as wc,
        open(log_path, "a", buffering=1) as log,
    ):

        def record(*fields: Any) -> None:
            log.write(json.dumps([name, *fields]) + "\n")

        record("start", os.getpid())
        recovered_at = 0.0
        while not os.path.exists(stop):
            try:
                if time.monotonic() - recovered_at > RECOVER_EVERY:
                    recovered_at = time.monotonic()
                    for run_id in wc.recover():
                        record("recovered", str(run_id))
                claim = wc.claim_next(name, lease_seconds=lease)
            except WorkcenterError:  # contention: try again
                continue
            if claim is None:
                time.sleep(0.02)
                continue
            record("claim", str(claim.action_id), str(claim.run_id), claim.lease_epoch)
            report = execute(wc, claim, work, lease)
            try:
                wc.finish_run(claim, report)
            except StaleRun:
                record("stale", str(claim.run_id))
                continue
            except WorkcenterError as error:  # reported to the controller, which fails
                record("refused", str(claim.run_id), f"{type(error).__name__}: {error}")
                continue
            record("finish", str(claim.run_id), report["outcome"])


if __name__ == "__main__":
    store, name, log_path, lease, work, stop = sys.argv[1:7]
    main(store, name, log_path, float(lease), float(work), stop)
