"""Refusals in the project's own words, for the CLI's refusal line and the API's problems.

A refusal may carry words that are not the project's: a validation library's class
names ("1 validation error for Limits"), its error codes and echoed input
(``[type=greater_than, input_value=-5, ...]``) and its documentation links with the
library's version. ``plain`` removes them and, for a remote client, any URL (a
link is never the refusal's point there, and one quoted from the input may carry a
token). ``field_message`` says what one failed field needs in the same plain words,
naming the field as the caller spelled it (ADR-0057).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

_VALIDATION_HEADER = re.compile(r"\d+ validation errors? for \w+\s*")
_LIBRARY_DETAIL = re.compile(r"\s*\[type=[^\]]*\]")
_FURTHER = re.compile(r"\s*For further information visit \S+")
_URL = re.compile(r"\b(?:https?|ftp)://\S+", re.IGNORECASE)

# What a field needs, by the kind of failure the request models report.
_NEEDS: Mapping[str, str] = {
    "missing": "is required",
    "extra_forbidden": "is not a field of this request",
    "int_type": "must be an integer",
    "int_parsing": "must be an integer",
    "int_from_float": "must be an integer",
    "string_type": "must be a string",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "list_type": "must be a list",
    "dict_type": "must be an object",
    "model_type": "must be an object",
    "model_attributes_type": "must be an object",
    "uuid_type": "must be a UUID",
    "uuid_parsing": "must be a UUID",
    "json_invalid": "is not valid JSON",
    "json_type": "is not valid JSON",
}
_BOUNDS: Mapping[str, str] = {
    "greater_than": "must be greater than {gt}",
    "greater_than_equal": "must be at least {ge}",
    "less_than": "must be less than {lt}",
    "less_than_equal": "must be at most {le}",
    "string_too_long": "must be at most {max_length} characters",
    "string_too_short": "must be at least {min_length} characters",
    "too_long": "must hold at most {max_length} entries",
}


def plain(message: str, *, links: bool = False) -> str:
    """``message`` without a validation library's class names, codes, echoed input or
    documentation links, on one line; any other URL is removed too unless ``links``
    (a terminal's user may need the server address a refusal names; a remote
    client of the API is never shown one)."""
    message = _VALIDATION_HEADER.sub("", message)
    message = _FURTHER.sub("", message)
    message = _LIBRARY_DETAIL.sub("", message)
    if not links:
        message = _URL.sub("[link removed]", message)
    return " ".join(message.split())


def field_message(kind: str, library_message: str, context: Mapping[str, Any] | None) -> str:
    """What a field needs, from one validation error's kind, message and context."""
    if kind in _NEEDS:
        return _NEEDS[kind]
    if kind in _BOUNDS and context:
        # A number's bound as the integer it is (2^53 - 1 bounds floats too).
        bounds = {
            key: int(value) if isinstance(value, float) and value.is_integer() else value
            for key, value in context.items()
        }
        try:
            return _BOUNDS[kind].format(**bounds)
        except (KeyError, IndexError):
            pass
    if kind == "literal_error" and context and "expected" in context:
        return f"must be {context['expected']}"
    said = plain(library_message)
    return said.replace("Input should be", "must be").replace("Value error, ", "")
