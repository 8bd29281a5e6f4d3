"""The fields of request bodies, with the service's bounds (``domain.bounds``) in the
document, so that a request the document allows is one the service accepts
(ADR-0066).

Texts are measured by the service once stripped; the document bounds the text as
sent, which is never shorter, and says that a required one holds a character that
shows something (not only spaces and zero-width characters). A JSON number with no
fraction (``5.0``) is the integer it names, as JSON Schema's ``integer`` has it.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator, Field
from typing_extensions import TypeAliasType

from workcenter.domain import bounds, inputs
from workcenter.domain.actor import ACTOR_ID_LIMIT
from workcenter.service_layer.handlers.worker_protocol import BOOT_ID
from workcenter.service_layer.queries.browser import CURSOR


def _visible() -> str:
    """A character class of every character that shows something
    (``inputs.INVISIBLE_RANGES``'s complement), spelled out: regex dialects (the
    document's, Python's, the validator's) disagree on ``\\s``."""
    ranges = "".join(
        f"\\u{a:04x}" if a == b else f"\\u{a:04x}-\\u{b:04x}" for a, b in inputs.INVISIBLE_RANGES
    )
    return f"[^{ranges}]"


# Holds a character that shows something (searched, not anchored).
NOT_BLANK = _visible()
# An event's position as a change stream sends it for its id (``Last-Event-ID``).
POSITION = r"^[0-9]{1,18}$"
# A linear stage's name as the service takes it (lowercase, not padded), in ASCII.
STAGE_NAME = r"^[!-@\[-~](?:[ -@\[-~]{0," + str(bounds.STAGE - 2) + r"}[!-@\[-~])?$"


# A worker's name over HTTP: printable ASCII, not blank, short enough that with "@" and
# the longest bootId it is an actor id (``domain.actor``).
PRINTABLE = r"^[ -~]*[!-~][ -~]*$"
WORKER_NAME = ACTOR_ID_LIMIT - 1 - 64


def _integral(value: Any) -> Any:
    if type(value) is float and value.is_integer():
        return int(value)
    return value


# The validator comes last, so that the bounds stay in the integer's own schema.
Integral = BeforeValidator(_integral)
Count = Annotated[int, Field(gt=0, le=bounds.INTEGER), Integral]
Version = Annotated[int, Field(ge=0, le=bounds.INTEGER), Integral]
Epoch = Annotated[int, Field(ge=1, le=bounds.INTEGER), Integral]
StageAttempts = Annotated[int, Field(ge=1, le=5), Integral]


def text(limit: int, *, required: bool = False, default: str | None = "") -> Any:
    """A text of at most ``limit`` characters: not blank when ``required``, else
    ``default`` when not given."""
    if required:
        return Field(max_length=limit, pattern=NOT_BLANK)  # the pattern needs a character
    return Field(default, max_length=limit)


StageName = Annotated[str, Field(pattern=STAGE_NAME)]

# Free-form JSON (a Run's evidence, a model request, its usage) whose numbers stay
# within what every JSON reader keeps exact: a larger one is refused here (422), not
# left to fail where the service serialises it. Objects nest to any depth; an array
# holds values and objects but no array directly, since client generators cannot
# follow an array's items back to the array (ADR-0068).
JsonInteger = Annotated[int, Field(ge=-bounds.INTEGER, le=bounds.INTEGER)]
JsonNumber = Annotated[float, Field(ge=-bounds.INTEGER, le=bounds.INTEGER)]
JsonScalar = str | bool | JsonInteger | JsonNumber | None
JsonObject = TypeAliasType(
    "JsonObject", "dict[str, JsonScalar | JsonObject | list[JsonScalar | JsonObject]]"
)


# What a text that does not match a pattern lacks, in the API's words.
PATTERN_WORDS: dict[str, str] = {
    NOT_BLANK: "is required (it is blank)",
    STAGE_NAME: "must be a lowercase name of printable ASCII, not padded",
    PRINTABLE: "must be printable ASCII, not blank",
    BOOT_ID.pattern: "must be 1 to 64 letters, digits, '.', '-' or '_'",
    CURSOR.pattern: "must be the next cursor a page of this list returned",
    POSITION: "must be a position this stream sent",
}


def pattern_words(pattern: object) -> str:
    return PATTERN_WORDS.get(str(pattern), "does not have the form the API's document gives")
