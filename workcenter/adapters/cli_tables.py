"""The CLI's tables: an item with its criteria and Actions, and a budget."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from rich.table import Table
from rich.text import Text

from workcenter.adapters.terminal import text
from workcenter.projections.sanitize import sanitize_personal

# What a text view says of an item with no delivery target (Python's "None" was printed).
NO_TARGET = "no target named"


def delivery_status(target: str | None, status: str) -> str:
    """With no target nothing is to be delivered: "none asked", as the dashboard says,
    not "unmet" on an item done without one (found by acceptance testing)."""
    return status if target else "none asked"


def utc(moment: str) -> str:
    """A time to the second in UTC, saying so: the time without its zone was read as
    local time under another TZ (found by acceptance testing, ADR-0138)."""
    return datetime.fromisoformat(moment).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def item_table(detail: dict[str, Any], now: datetime) -> Table:
    item, progress = detail["item"], detail["goal_progress"]
    table = Table(title=text(sanitize_personal(item["title"])), show_lines=False)
    table.add_column("field", style="bold")
    table.add_column("value")
    table.add_row("id", text(item["id"]))
    table.add_row("status", text(item["status"]))
    table.add_row("mode", text(item["mode"]))
    table.add_row("version", str(item["version"]))
    table.add_row("contract revision", str(item["contract_revision"]))
    target = item["delivery_target"] or NO_TARGET
    status = delivery_status(item["delivery_target"], progress["delivery"]["status"])
    table.add_row("delivery", text(f"{target} ({status})"))
    for row in progress["criteria"]:
        style = {"passed": "green", "failed": "red"}.get(row["status"], "")
        table.add_row(
            "criterion",
            Text.assemble(
                text(row["status"], style), "  ", text(sanitize_personal(row["criterion"]))
            ),
        )
    for action in detail["actions"]:
        table.add_row(
            f"action {action['sequence']}",
            text(
                f"{action['type']}: {action['status']} (generation {action['generation']}, "
                f"{len(action['runs'])} runs)"
            ),
        )
        for run in action["runs"]:
            # Who holds it and until when: an Action whose worker went away runs again
            # only once this lease ends (found by acceptance testing, ADR-0140).
            if run["status"] != "running":
                continue
            # A lapsed lease is said as such: its worker is gone or stalled, and the Run
            # ends at the next recovery (found by acceptance testing, ADR-0142).
            lapsed = datetime.fromisoformat(run["expires_at"]) <= now
            lease = "lease lapsed at" if lapsed else "lease until"
            table.add_row(
                "  its Run",
                text(
                    f"held by {run['worker']}@{run['owner_boot_id']}, {lease}"
                    f" {utc(run['expires_at'])} (epoch {run['lease_epoch']})"
                    + ("; it ends at the next recovery" if lapsed else "")
                ),
            )
    return table


# `budget extend`'s option for each limit.
EXTEND_FLAGS = {
    "max_requests": "requests",
    "max_tokens": "tokens",
    "max_run_requests": "run-requests",
    "max_action_attempts": "action-attempts",
    "max_coordinator_failures": "coordinator-failures",
}


def _details(details: dict[str, Any]) -> str:
    """A stop's details in words (`--json` has them as they are): what is known only."""
    said = [
        f"{name.replace('_', ' ')} {value}" for name, value in details.items() if value is not None
    ]
    return f" ({', '.join(said)})" if said else ""


def budget_table(budget: dict[str, Any]) -> Table:
    usage, limits = budget["usage"], budget["limits"]
    stop = budget["stop_reason"]
    table = Table(title=text(f"Budget of {budget['work_item_id']}  [{budget['status']}]"))
    table.add_column("field", style="bold")
    table.add_column("value")
    table.add_row(
        "stop",
        Text.assemble(
            text(stop["code"], "red"), text(f" at {stop['at']}{_details(stop['details'])}")
        )
        if stop
        else "none",
    )
    if needs := budget["resume_needs"]:
        flags = " ".join(f"--{EXTEND_FLAGS[name]} {need}" for name, need in needs.items())
        table.add_row("resume", text(f"refused until `budget extend` adds at least {flags}", "red"))
    table.add_row(
        "requests",
        f"{usage['requests']} / {limits['max_requests']} (reported {usage['reported_requests']}, "
        f"in flight {usage['in_flight_requests']}, unknown {usage['unknown_requests']})",
    )
    table.add_row(
        "charged tokens",
        f"{usage['charged_tokens']} / {limits['max_tokens']} "
        f"(of which reserved {usage['reserved_tokens']})",
    )
    table.add_row(
        "reported usage",
        ", ".join(
            f"{key.removesuffix('_tokens')} {usage[key]}"
            for key in (
                "input_tokens",
                "output_tokens",
                "cache_read_tokens",
                "cache_write_tokens",
                "total_tokens",
            )
        ),
    )
    for part, totals in budget["breakdown"].items():
        table.add_row(
            part, f"{totals['requests']} requests, {totals['charged_tokens']} tokens charged"
        )
    table.add_row("max run requests", str(limits["max_run_requests"]))
    table.add_row(
        "coordinator failures",
        f"{budget['coordinator_failures']} / {limits['max_coordinator_failures']}",
    )
    for row in budget["action_attempts"]:
        table.add_row(
            f"action {row['sequence']}",
            text(
                f"{row['type']}: {row['attempts']} attempts of {row['effective_max_attempts']} "
                f"(planned {row['original_max_attempts']}, cap {limits['max_action_attempts']})"
            ),
        )
    table.add_row(
        "versions",
        f"item {budget['item_version']}, ledger {budget['ledger_version']}, "
        f"control {budget['control_version']}",
    )
    return table
