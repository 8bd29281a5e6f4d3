"""A Coordinator provider for any OpenAI-compatible chat-completions server.

A hosted API, a local inference server or a proxy: anything that serves
``POST {base_url}/chat/completions``. It uses the official ``openai`` package
(the ``llm`` extra) and asks for a structured reply with the turn's JSON schema.

The client retries rate limits, timeouts and server errors itself
(``max_retries``); each of those HTTP attempts is charged, because an httpx
request hook calls the turn's ``before_request`` right before the bytes go
out, retries and redirects included. An exception from ``before_request``
(a budget denial, a lost claim) stops the request before it is sent and
leaves ``answer`` unchanged; every other error becomes ``ProviderFailed``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import urlsplit

from workcenter.adapters.providers import reply_bounds
from workcenter.domain.errors import InvalidInput, ProviderFailed, WorkcenterError
from workcenter.projections.sanitize import MASK
from workcenter.service_layer.ports import ProviderRequest, ProviderTurnReply

if TYPE_CHECKING:
    import openai

INSTALL_HINT = "pip install 'workcenter[llm]'"
SCHEMA_NAME = "coordinator_reply"
MAX_RETRIES = 10
ERROR_EXCERPT = 300  # characters of a server's error message kept in ProviderFailed
# A reply's body, read whole: a Coordinator's reply is a few KiB (its output tokens are
# bounded); past this, something other than a reply is being sent (ADR-0142).
MAX_REPLY_BYTES = 8 * 1024 * 1024

# Status codes a later identical request may get past (coordinator.md 3.4:
# rate limits and server errors; a 408 is the server's own timeout).
TRANSIENT_STATUS = frozenset({408, 429})

BASE_URL_ENV = "WORKCENTER_LLM_BASE_URL"
MODEL_ENV = "WORKCENTER_LLM_MODEL"
API_KEY_ENV = "WORKCENTER_LLM_API_KEY"
TIMEOUT_ENV = "WORKCENTER_LLM_TIMEOUT"
MAX_RETRIES_ENV = "WORKCENTER_LLM_MAX_RETRIES"
MAX_OUTPUT_TOKENS_ENV = "WORKCENTER_LLM_MAX_OUTPUT_TOKENS"
# Local servers take any key, the client needs one (vLLM's docs use "EMPTY").
NO_KEY = "EMPTY"
MASKED_KEY_LENGTH = 8  # the shortest key masked in what a server says


def _openai() -> Any:
    try:
        import openai
    except ImportError:
        raise WorkcenterError(
            f"the OpenAI-compatible provider needs the openai package: {INSTALL_HINT}"
        ) from None
    return openai


class OpenAICompatibleProvider:
    """A ``CoordinatorProvider`` over one chat-completions endpoint and model.

    Safe to share between threads: the request hook finds the ``before_request``
    of the ``answer`` it serves in a context variable (the client runs hooks in the
    caller's thread)."""

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str | None = None,
        timeout: float = 120.0,
        max_retries: int = 2,
        max_output_tokens: int | None = None,
    ) -> None:
        self.base_url = _checked_url(base_url)
        self.model = _checked_text("model", model)
        self.timeout = _checked_timeout(timeout)
        self.max_retries = _checked_retries(max_retries)
        # Declared to the Coordinator, which puts it in every request: the server's
        # max_tokens, and what the budget reserves for a reply instead of 16,384 tokens.
        self.max_output_tokens = _checked_bound(max_output_tokens)
        module = _openai()
        self._openai = module
        self._before: ContextVar[Callable[[], None]] = ContextVar("before_request")
        self._api_key = api_key or os.environ.get("OPENAI_API_KEY") or NO_KEY
        self._client: openai.OpenAI = module.OpenAI(
            base_url=self.base_url,
            api_key=self._api_key,
            timeout=self.timeout,
            max_retries=self.max_retries,
            http_client=module.DefaultHttpxClient(
                event_hooks={
                    "request": [self._on_request, reply_bounds.as_they_are],
                    "response": [reply_bounds.within(self.timeout, MAX_REPLY_BYTES)],
                }
            ),
        )

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> OpenAICompatibleProvider:
        """Configured by ``WORKCENTER_LLM_BASE_URL``, ``_MODEL``, ``_API_KEY`` (else
        ``OPENAI_API_KEY``), ``_TIMEOUT`` (seconds), ``_MAX_RETRIES`` and
        ``_MAX_OUTPUT_TOKENS``."""
        env = os.environ if environ is None else environ
        missing = [name for name in (BASE_URL_ENV, MODEL_ENV) if not env.get(name)]
        if missing:
            raise InvalidInput(f"set {' and '.join(missing)} to use an OpenAI-compatible server")
        return cls(
            base_url=env[BASE_URL_ENV],
            model=env[MODEL_ENV],
            api_key=env.get(API_KEY_ENV) or env.get("OPENAI_API_KEY"),
            timeout=_number(env, TIMEOUT_ENV, float, 120.0),
            max_retries=_number(env, MAX_RETRIES_ENV, int, 2),
            max_output_tokens=_number(env, MAX_OUTPUT_TOKENS_ENV, int, None),
        )

    def answer(
        self, request: ProviderRequest, before_request: Callable[[], None]
    ) -> ProviderTurnReply:
        token = self._before.set(before_request)
        # The request's bound, as reserved; without one the server's own applies.
        bound = request.max_output_tokens
        options: dict[str, Any] = {} if bound is None else {"max_tokens": bound}
        try:
            completion = self._client.chat.completions.create(
                model=self.model,
                messages=cast(Any, list(request.messages)),
                response_format={
                    "type": "json_schema",
                    "json_schema": {
                        "name": SCHEMA_NAME,
                        "schema": request.reply_schema,
                        "strict": False,
                    },
                },
                **options,
            )
            return _reply(completion)
        except _Stopped as stopped:
            refusal = stopped.refusal
        except ProviderFailed as failed:
            raise self._masked(failed) from None
        except Exception as error:
            raise self._masked(_failure(self._openai, error)) from None
        finally:
            self._before.reset(token)
        raise refusal  # outside the handler: its cause and context stay its own

    def _masked(self, failed: ProviderFailed) -> ProviderFailed:
        """``failed`` without this provider's key: a server may name the key it was sent
        ("Incorrect API key provided: ..."), and a turn's failure is stored in events no
        one can edit and shown by every read (found by acceptance testing, ADR-0137)."""
        key, message = self._api_key, str(failed)
        # A key too short to be a secret would mask words of the message.
        if len(key) < MASKED_KEY_LENGTH:
            return failed
        masked = message.replace(key, MASK)
        if masked.endswith("…"):
            # The excerpt's cut may fall inside the key: its first part is masked too
            # (found by review, ADR-0137).
            kept = masked[:-1]
            for length in range(min(len(key) - 1, len(kept)), MASKED_KEY_LENGTH - 1, -1):
                if kept.endswith(key[:length]):
                    masked = kept[:-length] + MASK + "…"
                    break
        if masked == message:
            return failed
        return ProviderFailed(masked, transient=failed.transient)

    def close(self) -> None:
        """Close the connection pool (the provider is unusable after)."""
        self._client.close()

    def _on_request(self, _request: object) -> None:
        try:
            self._before.get()()
        except BaseException as refusal:
            raise _Stopped(refusal) from None


class _Stopped(BaseException):
    """Carries what ``before_request`` raised out of the client.

    Not an ``Exception``: older clients catch every ``Exception`` from sending,
    retry it and wrap it as a connection error, which would turn a budget denial
    into a transient failure and ask the ledger again on each retry."""

    def __init__(self, refusal: BaseException) -> None:
        super().__init__(refusal)
        self.refusal = refusal


def _failure(module: Any, error: Exception) -> ProviderFailed:
    if isinstance(error, module.APIStatusError):
        status = error.status_code
        message = _excerpt(getattr(error, "message", "") or str(error))
        transient = status in TRANSIENT_STATUS or status >= 500
        return ProviderFailed(f"the provider answered {status}: {message}", transient=transient)
    if isinstance(error, module.APITimeoutError):
        return ProviderFailed("the provider timed out", transient=True)
    if isinstance(error, module.APIConnectionError):
        # The client's own words are "Connection error."; what broke is its cause (a reply
        # past its size, a compressed one, a refused connection).
        said = str(error.__cause__ or error)
        return ProviderFailed(f"cannot reach the provider: {_excerpt(said)}", transient=True)
    # a body that is not a completion (a proxy's HTML page, say): asking again won't help
    return ProviderFailed(f"the provider call failed: {_excerpt(str(error))}", transient=False)


def _reply(completion: Any) -> ProviderTurnReply:
    if not hasattr(completion, "choices") or not hasattr(completion, "usage"):
        # A body the client could not read as a completion (a proxy's page, a JSON
        # array) comes back as it was: say what came, not which attribute it lacked.
        raise ProviderFailed(
            f"the provider's answer is not a chat completion: {_excerpt(str(completion))}",
            transient=False,
        )
    usage = _usage(completion.usage)
    if not completion.choices:
        raise ProviderFailed("the provider answered no choice", transient=False)
    message = completion.choices[0].message
    refusal = getattr(message, "refusal", None)
    if refusal:
        raise ProviderFailed(f"the model refused: {_excerpt(str(refusal))}", transient=False)
    return ProviderTurnReply(text=message.content or "", usage=usage)


def _usage(usage: Any) -> dict[str, Any] | None:
    """The server's usage in the ledger's keys; prompt tokens include cached ones. A
    usage of another shape (a server's ``"usage": "n/a"``) is none reported: the reply
    stands, charged at its estimate (its AttributeError failed the turn and lost the
    decision; found by acceptance testing)."""
    counts = {
        key: getattr(usage, field, None)
        for key, field in (
            ("input_tokens", "prompt_tokens"),
            ("output_tokens", "completion_tokens"),
            ("total_tokens", "total_tokens"),
        )
    }
    if all(count is None for count in counts.values()):
        return None
    reported: dict[str, Any] = {**counts, "cacheTokensAreIncludedInInput": True}
    # older clients have no field for the details and keep them as a plain dict
    details = getattr(usage, "prompt_tokens_details", None)
    if isinstance(details, Mapping):
        cached = details.get("cached_tokens")
    else:
        cached = getattr(details, "cached_tokens", None)
    if cached:
        reported["cache_read_tokens"] = cached
    return reported


def _excerpt(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= ERROR_EXCERPT else text[: ERROR_EXCERPT - 1] + "…"


def _checked_url(url: object) -> str:
    if not isinstance(url, str) or urlsplit(url).scheme not in ("http", "https"):
        raise InvalidInput(f"base_url must be an http(s) URL, not {url!r}")
    if not urlsplit(url).netloc:
        raise InvalidInput(f"base_url has no host: {url!r}")
    return url


def _checked_text(name: str, value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InvalidInput(f"{name} must be a non-empty text")
    return value.strip()


def _checked_timeout(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInput(f"timeout must be a number of seconds, not {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise InvalidInput(f"timeout must be a finite number of seconds above zero, not {value!r}")
    return float(value)


def _checked_retries(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_RETRIES:
        raise InvalidInput(f"max_retries must be an integer from 0 to {MAX_RETRIES}, not {value!r}")
    return value


def _checked_bound(value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidInput(f"max_output_tokens must be a whole number of at least 1, not {value!r}")
    return value


def _number(env: Mapping[str, str], name: str, kind: type[float] | type[int], default: Any) -> Any:
    text = env.get(name)
    if not text:
        return default
    try:
        return kind(text)
    except ValueError:
        raise InvalidInput(f"{name} must be a number, not {text!r}") from None
