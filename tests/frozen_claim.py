"""A worker process frozen in the middle of a claim, run as a script by
``test_claim_hold_timeout.py``: it opens the store, takes its first candidate's hold,
says so on stdout and stops itself (SIGSTOP), as a process stopped by its operator or a
machine that stopped answering would. Continued, it ends the claim and prints how it
ended."""

from __future__ import annotations

import os
import signal
import sys

from workcenter.application import WorkCenter
from workcenter.domain.errors import WorkcenterError


def main(location: str) -> None:
    with WorkCenter.open(location, boot_id="frozen", create=False) as wc:
        try:
            with wc._runs.claim_candidates(16) as candidates:
                assert candidates is not None
                print(f"held {next(candidates).action_id}", flush=True)
                os.kill(os.getpid(), signal.SIGSTOP)
            print("ended", flush=True)
        except WorkcenterError as error:
            print(f"refused {type(error).__name__}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
