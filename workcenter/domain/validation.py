"""Pydantic's validation errors said in one line, as ``InvalidInput``."""

from __future__ import annotations

from pydantic import ValidationError

from workcenter.domain.errors import InvalidInput

MAX_PROBLEMS = 3


def describe(error: ValidationError) -> str:
    """``field: what is wrong`` for the first few problems, on one line. The rejected
    values are left out: they may be long, or hold what must not be printed."""
    problems = [
        f"{'.'.join(str(part) for part in e['loc']) or 'value'}: {e['msg']}"
        for e in error.errors(include_url=False, include_input=False)
    ]
    more = len(problems) - MAX_PROBLEMS
    text = "; ".join(problems[:MAX_PROBLEMS]) + (f"; and {more} more" if more > 0 else "")
    return " ".join(text.split())


def invalid_input(what: str, error: ValidationError) -> InvalidInput:
    return InvalidInput(f"{what}: {describe(error)}")
