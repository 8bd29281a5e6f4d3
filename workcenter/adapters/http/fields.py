"""The fields of request bodies, with the service's bounds (``domain.bounds``) in the
document, so that a request the document allows is one the service accepts
(ADR-0066).

Texts are measured by the service once stripped; the document bounds the text as
sent, which is never shorter, and says that a required one holds a character that
is not white space. A JSON number with no fraction (``5.0``) is the integer it
names, as JSON Schema's ``integer`` has it.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator, Field

from workcenter.domain import bounds

# Holds a character that is not white space (searched, not anchored).
NOT_BLANK = r"\S"
# A linear stage's name as the service takes it (lowercase, not padded), in ASCII.
STAGE_NAME = r"^[!-@\[-~](?:[ -@\[-~]{0," + str(bounds.STAGE - 2) + r"}[!-@\[-~])?$"


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
        return Field(min_length=1, max_length=limit, pattern=NOT_BLANK)
    return Field(default, max_length=limit)


StageName = Annotated[str, Field(pattern=STAGE_NAME)]
