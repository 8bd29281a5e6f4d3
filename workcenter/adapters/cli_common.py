"""What every ``workcenter`` verb shares: the console, JSON output, opening the store."""

from __future__ import annotations

import sys
from typing import Any
from uuid import UUID

import click
import orjson
from rich.console import Console

from workcenter.adapters.terminal import escape_json
from workcenter.application import WorkCenter

console = Console()


def emit_json(data: Any) -> None:
    serialised = orjson.dumps(data, option=orjson.OPT_INDENT_2).decode()
    sys.stdout.write(escape_json(serialised) + "\n")


def open_center(ctx: click.Context) -> WorkCenter:
    return WorkCenter.open(ctx.obj["db"])


def parse_uuid(value: str) -> UUID:
    try:
        return UUID(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a WorkItem id") from None
