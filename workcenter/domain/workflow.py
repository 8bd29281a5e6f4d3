"""The workflow snapshot of a linear WorkItem (lifecycle.md 1.1): its stages, in
order, each with the attempt limit its Action is planned with.

Stages are given as names (``"implement"``) or as objects
(``{"type": "implement", "maxAttempts": 3}``); the snapshot is frozen when the
item is created.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from workcenter.domain import bounds
from workcenter.domain.action import DEFAULT_MAX_ATTEMPTS
from workcenter.domain.errors import InvalidInput
from workcenter.domain.inputs import encodable, visible
from workcenter.domain.model import Immutable

# The range the original clamps planned Actions to; a user's stage outside it is refused.
MIN_STAGE_ATTEMPTS = 1
MAX_STAGE_ATTEMPTS = 5
MAX_STAGES = bounds.STAGES
_STAGE_KEYS = frozenset({"type", "id", "maxAttempts", "max_attempts"})


class Stage(Immutable):
    type: str
    max_attempts: int = DEFAULT_MAX_ATTEMPTS


def _slug(value: object) -> str:
    # Printable and showing something, as over HTTP (found by acceptance testing: the
    # Python API took control and zero-width characters, a NUL among them).
    if isinstance(value, str):
        encodable(value, "a stage name")  # a lone surrogate, named as such
    if (
        not isinstance(value, str)
        or value != value.strip().lower()
        or not value.isprintable()
        or not visible(value)
    ):
        raise InvalidInput(
            "linear stages must be lowercase names of printable characters, not padded"
        )
    if len(value) > bounds.STAGE:
        raise InvalidInput(f"a stage name has at most {bounds.STAGE} characters")
    return value


def _stage(raw: object) -> Stage:
    if isinstance(raw, Stage):
        return raw
    if isinstance(raw, str):
        return Stage(type=_slug(raw))
    if not isinstance(raw, Mapping):
        raise InvalidInput("a stage is a name or an object {type, maxAttempts}")
    unknown = sorted(str(k) for k in raw if k not in _STAGE_KEYS)
    if unknown:
        raise InvalidInput(f"a stage has unknown fields: {', '.join(unknown)}")
    names = {raw[k] for k in ("type", "id") if k in raw}
    if len(names) != 1:
        raise InvalidInput("a stage object needs its type (or id; both must agree)")
    attempts = raw.get("maxAttempts", raw.get("max_attempts", DEFAULT_MAX_ATTEMPTS))
    if (
        isinstance(attempts, bool)
        or not isinstance(attempts, int)
        or not MIN_STAGE_ATTEMPTS <= attempts <= MAX_STAGE_ATTEMPTS
    ):
        raise InvalidInput(
            f"a stage's maxAttempts must be an integer {MIN_STAGE_ATTEMPTS}..{MAX_STAGE_ATTEMPTS}"
        )
    return Stage(type=_slug(names.pop()), max_attempts=attempts)


def parse_stages(raw: object) -> tuple[Stage, ...]:
    """The stages as given, validated; refused (never repaired) when malformed."""
    if isinstance(raw, str | bytes | Mapping) or not isinstance(raw, Sequence):
        raise InvalidInput("stages must be a list of stage names or objects")
    if not raw:
        raise InvalidInput(
            "a linear workflow has at least one stage: give stages or leave them out for"
            " the default ones"
        )
    if len(raw) > MAX_STAGES:
        raise InvalidInput(f"a linear workflow has at most {MAX_STAGES} stages")
    stages = tuple(_stage(s) for s in raw)
    names = [s.type for s in stages]
    # The next stage is found by the finished one's name: a name given twice would send
    # the item back to its first place for ever (found by acceptance testing, ADR-0104).
    repeated = next((name for i, name in enumerate(names) if name in names[:i]), None)
    if repeated is not None:
        raise InvalidInput(f"a linear workflow's stages are distinct: {repeated!r} is given twice")
    for index, name in enumerate(names):
        if name == "review" and all(s in ("review", "deliver") for s in names[:index]):
            raise InvalidInput("a review stage needs an earlier stage to return to")
    return stages
