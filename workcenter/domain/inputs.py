"""Validators for command input at the service's boundary.

Each either returns the value in the type the domain expects or raises
``InvalidInput`` (``NotFound`` for an id that names nothing), so a command
refused here has written nothing and no other exception reaches the caller.
Texts must be encodable: a lone surrogate would only fail later, at save.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Final
from uuid import UUID

from pydantic import ValidationError

from workcenter.domain import bounds
from workcenter.domain.errors import InvalidInput, NotFound

# Characters that show nothing (ADR-0083): white space, control and format characters
# (zero-width spaces and joiners, direction marks, the byte-order mark, the soft hyphen),
# and blank fillers (Hangul's, Braille's blank, variation selectors, the grapheme
# joiner). A required text needs a character outside them. Spelled out, so that the HTTP
# document's pattern is this very set (``tests/test_invisible_texts.py`` derives it from
# ``unicodedata``).
INVISIBLE_RANGES: Final = (
    (0x0000, 0x0020),
    (0x007F, 0x00A0),
    (0x00AD, 0x00AD),
    (0x034F, 0x034F),
    (0x061C, 0x061C),
    (0x115F, 0x1160),
    (0x1680, 0x1680),
    (0x17B4, 0x17B5),
    (0x180B, 0x180F),
    (0x2000, 0x200F),
    (0x2028, 0x202F),
    (0x205F, 0x2064),
    (0x2066, 0x206F),
    (0x2800, 0x2800),
    (0x3000, 0x3000),
    (0x3164, 0x3164),
    (0xFE00, 0xFE0F),
    (0xFEFF, 0xFEFF),
    (0xFFA0, 0xFFA0),
    (0xFFF9, 0xFFFB),
)
# Past U+FFFF, which the document's pattern cannot name in every regex dialect, so the
# service alone refuses them: format characters (tags, Egyptian, shorthand and musical
# format controls) and the supplement's variation selectors. A title of tags showed as a
# blank row (found by acceptance testing, ADR-0144).
ASTRAL_INVISIBLE_RANGES: Final = (
    (0x13430, 0x1343F),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    (0xE0001, 0xE0001),
    (0xE0020, 0xE007F),
    (0xE0100, 0xE01EF),
)
INVISIBLE: Final = frozenset(
    chr(c) for a, b in INVISIBLE_RANGES + ASTRAL_INVISIBLE_RANGES for c in range(a, b + 1)
)


def visible(value: str) -> bool:
    """Whether ``value`` shows anything: a text of spaces and zero-width characters is
    as empty to its reader as a blank one."""
    return any(c not in INVISIBLE for c in value)


def encodable(value: str, name: str) -> str:
    """``value`` unchanged, or refused if it cannot be stored (a lone surrogate)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInput(f"{name} is not valid text (it holds a lone surrogate)") from None
    return value


def token(value: str, name: str) -> str:
    """``value`` unchanged, or refused if it holds a control character (U+0000 to U+001F,
    U+007F to U+009F): for an identifier a client chooses, kept in a view's text column,
    which on PostgreSQL cannot hold a NUL (ADR-0114's claim ids)."""
    if any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in value):
        raise InvalidInput(f"{name} must not hold control characters")
    return value


def text(value: object, name: str, limit: int, *, required: bool = False) -> str:
    """A string of at most ``limit`` characters once stripped (non-blank if ``required``)."""
    if not isinstance(value, str):
        raise InvalidInput(f"{name} must be a string, not {type(value).__name__}")
    encodable(value, name)
    stripped = value.strip()
    if required and not visible(stripped):
        # Given, so say what was wrong with it, not that it is missing.
        why = "it shows nothing" if stripped else "it is blank" if value else "it is empty"
        raise InvalidInput(f"{name} is required ({why})")
    if len(stripped) > limit:
        raise InvalidInput(f"{name} is longer than {limit} characters ({len(stripped)})")
    return stripped


def strings(value: object, name: str, *, limit: int, count: int) -> tuple[str, ...]:
    """A list of at most ``count`` strings of at most ``limit`` characters, as given."""
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise InvalidInput(f"{name} must be a list of strings")
    if len(value) > count:
        raise InvalidInput(f"{name} holds more than {count} entries ({len(value)})")
    for entry in value:
        encodable(entry, name)
        if len(entry) > limit:
            raise InvalidInput(f"each of {name} must be at most {limit} characters")
    return tuple(value)


def texts(value: object, name: str, *, limit: int, count: int) -> tuple[str, ...]:
    """Like ``strings``, each stripped first and blank ones (or ones that show nothing)
    dropped."""
    if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
        value = [v.strip() for v in value]
    return tuple(
        entry for entry in strings(value, name, limit=limit, count=count) if visible(entry)
    )


def version(value: object, name: str = "expected_version") -> int:
    """An aggregate version as the caller saw it (or a count): an int, not a bool,
    str or float, of a size storage can compare."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(f"{name} must be an integer, not {value!r}")
    if abs(value) > bounds.INTEGER:
        raise InvalidInput(f"{name} must be at most {bounds.INTEGER} in size, not {value}")
    return value


def optional_version(value: object, name: str) -> int | None:
    return None if value is None else version(value, name)


def flag(value: object, name: str) -> bool:
    if not isinstance(value, bool):
        raise InvalidInput(f"{name} must be true or false, not {value!r}")
    return value


def lease_seconds(value: object) -> float:
    """A lease length in seconds, within the documented bounds."""
    low, high = bounds.LEASE_MIN_SECONDS, bounds.LEASE_MAX_SECONDS
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or not low <= value <= high
    ):
        raise InvalidInput(f"lease_seconds must be a number from {low} to {high}, not {value!r}")
    return float(value)


def aggregate_id(value: object, kind: str) -> UUID:
    """A UUID, or its string form; a string that is no UUID names nothing."""
    if isinstance(value, UUID):
        return value
    if not isinstance(value, str):
        raise InvalidInput(f"a {kind} id must be a UUID, not {type(value).__name__}")
    try:
        return UUID(value)
    except ValueError:
        raise NotFound(kind, ascii(value)[1:-1][:80]) from None


def optional_id(value: object, kind: str) -> UUID | None:
    return None if value is None else aggregate_id(value, kind)


def moment(value: object, name: str) -> datetime:
    if not isinstance(value, datetime) or value.utcoffset() is None:
        raise InvalidInput(f"{name} must be a timezone-aware datetime")
    return value


def mapping(value: object, name: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise InvalidInput(f"{name} must be a mapping, not {type(value).__name__}")
    return value


# Keys a JSON object can carry (numbers and the like are written as their text), and ids
# (UUIDs, as the Python API takes them) go as their text too.
JSON_KEYS = (str, int, float, bool, type(None), UUID)
ORJSON_DEPTH = 254  # the deepest nesting orjson writes


def payload(value: object, name: str) -> None:
    """A JSON payload within the raw ceilings, every text encodable: nothing but objects,
    lists, texts, numbers, booleans, nulls and ids, else it would fail later as it is stored.

    Run reports and planning decisions are parsed and normalised later; this only
    keeps a hostile payload from costing unbounded work or failing at save.
    """
    _json(value, name, bounded=True)


def json_document(value: object, name: str) -> None:
    """JSON as ``payload`` takes it, without its ceilings (an LLM request: its size is
    what the budget charges), bar the nesting orjson can write."""
    _json(value, name, bounded=False)


def _json(value: object, name: str, *, bounded: bool) -> None:
    depth_limit = bounds.PAYLOAD_DEPTH if bounded else ORJSON_DEPTH
    pending: list[tuple[object, int]] = [(value, 0)]
    seen = 0
    while pending:
        node, depth = pending.pop()
        seen += 1
        if depth > depth_limit or (bounded and seen > bounds.PAYLOAD_VALUES):
            raise InvalidInput(f"{name} is nested too deeply or holds too many values")
        if isinstance(node, str):
            encodable(node, name)
            if bounded and len(node) > bounds.PAYLOAD_TEXT:
                raise InvalidInput(f"{name} holds a text longer than {bounds.PAYLOAD_TEXT}")
        elif isinstance(node, int | float) and not isinstance(node, bool):
            if isinstance(node, float) and not math.isfinite(node):
                raise InvalidInput(f"{name} holds a number that is not finite ({node})")
            if bounded and abs(node) > bounds.INTEGER:
                raise InvalidInput(f"{name} holds a number past {bounds.INTEGER}")
        elif isinstance(node, Mapping | list | tuple):
            if bounded and len(node) > bounds.PAYLOAD_ITEMS:
                kind = "an object" if isinstance(node, Mapping) else "a list"
                raise InvalidInput(
                    f"{name} holds {kind} of more than {bounds.PAYLOAD_ITEMS} entries"
                )
            if isinstance(node, Mapping):
                if not all(isinstance(key, JSON_KEYS) for key in node):
                    raise InvalidInput(f"{name} holds a key that is not JSON")
                pending.extend((child, depth + 1) for child in [*node.keys(), *node.values()])
            else:
                pending.extend((child, depth + 1) for child in node)
        elif node is not None and not isinstance(node, bool | UUID):
            raise InvalidInput(
                f"{name} holds a value of type {type(node).__name__}, which is not JSON"
            )


def describe(error: ValidationError) -> str:
    """A pydantic error in one line: where and what, without its documentation links."""
    first = error.errors(include_url=False)[0]
    where = ".".join(str(part) for part in first["loc"]) or "input"
    more = f" (and {error.error_count() - 1} more)" if error.error_count() > 1 else ""
    return f"{where}: {first['msg']}{more}"
