"""What an LLM request costs in tokens: the estimate a reservation is charged before
the request is sent, and a provider's usage payload as the ledger records it."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from workcenter.domain import bounds
from workcenter.domain.errors import InvalidInput
from workcenter.domain.model import Immutable

# The output budget charged for a request that names none.
UNKNOWN_REQUEST_TOKENS = 16_384


class Usage(Immutable):
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    total_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            **{
                name: bounds.saturated(getattr(self, name) + getattr(other, name))
                for name in Usage.model_fields
            }
        )


def estimate_tokens(request: Mapping[str, Any]) -> int:
    """ceil(utf8 bytes of the compact JSON of system, messages, tools / 3) + max output.

    ``{}`` is 16,385: an unknown output budget is charged at 16,384 tokens.
    """
    body = {key: request[key] for key in ("system", "messages", "tools") if key in request}
    try:
        size = len(orjson.dumps(body))
    except orjson.JSONEncodeError as error:
        raise InvalidInput(f"the request is not JSON: {error}") from None
    out = request.get("max_tokens", request.get("maxTokens"))
    if isinstance(out, float) and out.is_integer():
        out = int(out)  # 5.0 is the integer 5, as JSON and the original's numbers have it
    if isinstance(out, bool) or not isinstance(out, int) or out <= 0:
        out = UNKNOWN_REQUEST_TOKENS
    if out > bounds.INTEGER:
        # Stored and shown as JSON numbers: past 2^53 - 1 no reader can take it.
        raise InvalidInput(f"the request's max_tokens must be at most {bounds.INTEGER}")
    return bounds.saturated(math.ceil(size / 3) + out)


def _count(value: Any) -> int:
    """Only numbers above zero count; booleans, strings and NaN do not. A count past
    2^53 - 1, infinity included, is refused: no provider reports one, and no JSON reader
    could take it (an integer too large for a float is compared as it is)."""
    if _past_bound(value):
        raise InvalidInput(f"a usage count must be at most {bounds.INTEGER}")
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0
    if math.isnan(value) or value <= 0:
        return 0
    return int(value)


def reported_usage(usage: object) -> dict[str, Any] | None:
    """A provider's usage as reported, whatever it came as: a mapping, or a provider
    SDK's object (a pydantic model, dumped); None when it is neither, or when it holds a
    count past 2^53 - 1. No server spends that many: such a figure is a fault (an
    unsigned -1, say), so none of the reply's figures are taken and the request stays
    charged at its estimate, its usage unknown. A caller's count past the bound is refused
    (``normalize_usage``). Charged as 2^53 - 1, as it was, it stopped the item past any
    extension of its budget (found by acceptance testing, ADR-0140)."""
    if usage is not None and not isinstance(usage, Mapping):
        dump = getattr(usage, "model_dump", None)
        usage = dump() if callable(dump) else None
    if not isinstance(usage, Mapping) or any(_past_bound(v) for v in usage.values()):
        return None
    return dict(usage)


def _past_bound(value: Any) -> bool:
    """A count past 2^53 - 1, infinity included (a server's JSON may say ``Infinity``),
    compared as it is: an integer too large for a float is still a number."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return not (isinstance(value, float) and math.isnan(value)) and value > bounds.INTEGER


def _first(payload: Mapping[str, Any], *keys: str) -> Any:
    for key in keys:
        if payload.get(key) is not None:
            return payload[key]
    return None


def normalize_usage(payload: Mapping[str, Any] | None) -> Usage | None:
    """A provider's usage payload in the five keys; None stays None (no usage is not zero)."""
    if payload is None:
        return None
    # OpenAI's names last: a worker may settle with its provider's usage as reported
    # (its prompt tokens include the cached ones, which it reports only in details).
    input_tokens = _count(_first(payload, "inputTokens", "input_tokens", "prompt_tokens"))
    output_tokens = _count(_first(payload, "outputTokens", "output_tokens", "completion_tokens"))
    cache_read = _count(
        _first(payload, "cacheReadTokens", "cache_read_tokens", "cache_read_input_tokens")
    )
    cache_write = _count(
        _first(payload, "cacheWriteTokens", "cache_write_tokens", "cache_creation_input_tokens")
    )
    total = _count(_first(payload, "totalTokens", "total_tokens"))
    if not total:
        total = input_tokens + output_tokens
        if payload.get("cacheTokensAreIncludedInInput") is not True:
            total += cache_read + cache_write
    return Usage(
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cache_read_tokens=cache_read,
        cache_write_tokens=cache_write,
        total_tokens=bounds.saturated(total),
    )


def sum_usage(events: Iterable[Mapping[str, Any] | None]) -> Usage | None:
    """A stream's usage: the normalised events summed per key; None if none had usage."""
    total: Usage | None = None
    for payload in events:
        usage = normalize_usage(payload)
        if usage is not None:
            total = usage if total is None else total + usage
    return total
