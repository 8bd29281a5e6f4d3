"""The demo stopped by its budget and left there, for the tests of the budget and resume
verbs (the CLI's demo goes on past the stop: it extends, resumes and plans again)."""

from __future__ import annotations

from typing import Any

from workcenter.adapters import presenters
from workcenter.adapters.demo import ScriptedLlm, run_demo
from workcenter.adapters.providers.scripted_coordinator import scripted_coordinator
from workcenter.application import WorkCenter

# Small enough to stop the demo midway (a Coordinator turn is estimated at its prompt
# plus an unknown output of 16,384 tokens), large enough for its first steps.
SMALL_BUDGET = 20_000


def stopped_demo(db: str) -> dict[str, Any]:
    """The stopped item as ``demo --json`` shows an item: its detail, its budget and the
    requests that reached the fake providers."""
    llm, coordinator = ScriptedLlm(), scripted_coordinator()
    with WorkCenter.open(db) as wc:
        item_id = run_demo(
            wc,
            llm=llm,
            coordinator=coordinator,
            limits={"max_tokens": SMALL_BUDGET},
            resume_after_stop=False,
        )
        detail = presenters.detail_json(wc, wc.work_item(item_id))
        budget = presenters.budget_json(wc, item_id)
    return detail | {
        "budget": budget,
        "provider_calls": llm.calls,
        "coordinator_calls": len(coordinator.requests),
    }
