"""Schemathesis hooks for the contract test (loaded through ``SCHEMATHESIS_HOOKS``).

A claim with nothing to claim waits ``waitSeconds`` (up to 30) by design: a long poll.
Generated claims would spend most of the run's time waiting, so a valid wait is cut
to a tenth of a second before the request is sent; an out-of-bounds one is left as
generated, for the server to refuse.
"""

from __future__ import annotations

from typing import Any

import schemathesis

CLAIM = "/api/worker/claim"
SHORT_WAIT = 0.1


@schemathesis.hook
def before_call(ctx: Any, case: Any, **kwargs: Any) -> None:
    body = case.body
    if case.path != CLAIM or not isinstance(body, dict):
        return
    wait = body.get("waitSeconds")
    if isinstance(wait, int | float) and not isinstance(wait, bool) and 0 <= wait <= 30:
        body["waitSeconds"] = min(wait, SHORT_WAIT)
