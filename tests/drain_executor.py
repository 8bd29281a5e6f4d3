"""The executor of ``test_worker_drain.py``'s real ``workcenter worker`` processes.

It marks each Run's start and return in ``DRAIN_MARKS`` (a directory), so the test
signals the worker only once the executor is at work and can tell whether it
returned; a delivery works ``DRAIN_DELIVER_SECONDS`` and any other Action
``DRAIN_OTHER_SECONDS``, then it completes as ``echo`` does.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from workcenter.adapters.executors import echo
from workcenter.application import Claim


def slow(claim: Claim) -> dict[str, Any]:
    marks = Path(os.environ["DRAIN_MARKS"])
    (marks / f"{claim.action_type}-{claim.run_id}.started").touch()
    kind = "DELIVER" if claim.action_type == "deliver" else "OTHER"
    time.sleep(float(os.environ.get(f"DRAIN_{kind}_SECONDS", "1.5")))
    (marks / f"{claim.action_type}-{claim.run_id}.returned").touch()
    return echo(claim)
