"""A scripted Coordinator provider: replies, failures and hidden retries on cue.

Each ``answer`` takes the next step of the script, or asks ``respond`` for one
when the script is empty. A step simulates ``attempts`` HTTP attempts: before
each one it calls ``before_request`` (so a hidden retry reserves budget like a
real one) and records the request as sent; then it returns the reply or raises
the failure. An exception from ``before_request`` propagates unchanged and the
attempt is not recorded, as a real provider would not send it; when it stops
the first attempt, the step stays at the head of the script for the next call.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from workcenter.domain.errors import InvalidInput, ProviderFailed
from workcenter.service_layer.ports import ProviderRequest, ProviderTurnReply


@dataclass(frozen=True)
class Reply:
    """The model answers ``text`` (a mapping is sent as its JSON) after ``attempts``
    HTTP attempts, the earlier ones being retries the caller never sees."""

    text: str | Mapping[str, Any]
    usage: Mapping[str, Any] | None = None
    attempts: int = 1


@dataclass(frozen=True)
class Failure:
    """The call raises ``error`` after ``attempts`` HTTP attempts.

    ``ProviderFailed`` is what a real provider raises; any other exception stands
    for the process dying mid-call (a crash test's cue)."""

    error: BaseException
    attempts: int = 1


Step = Reply | Failure | str
"""A bare string is ``Reply(text)``."""


def transient(message: str = "rate limited (429)", *, attempts: int = 1) -> Failure:
    return Failure(ProviderFailed(message, transient=True), attempts)


def permanent(message: str = "bad request (400)", *, attempts: int = 1) -> Failure:
    return Failure(ProviderFailed(message, transient=False), attempts)


class ScriptedProvider:
    """A ``CoordinatorProvider`` that plays a script; safe to share between threads.

    ``requests`` lists every simulated HTTP attempt that was sent, in order (a
    step of three attempts appears three times); ``calls`` counts ``answer`` calls.
    ``max_output_tokens`` is declared to the Coordinator as a real provider's is.
    """

    def __init__(
        self,
        script: Iterable[Step] = (),
        *,
        respond: Callable[[ProviderRequest], Step] | None = None,
        max_output_tokens: int | None = None,
    ) -> None:
        self.max_output_tokens = max_output_tokens
        self._script: deque[Reply | Failure] = deque()
        self._respond = respond
        self._lock = threading.Lock()
        self.requests: list[ProviderRequest] = []
        self.calls = 0
        self.then(*script)

    def then(self, *steps: Step) -> ScriptedProvider:
        """Append steps to the script."""
        checked = [_checked(step) for step in steps]
        with self._lock:
            self._script.extend(checked)
        return self

    @property
    def remaining(self) -> int:
        """Steps left in the script (``respond`` answers past them)."""
        return len(self._script)

    def answer(
        self, request: ProviderRequest, before_request: Callable[[], None]
    ) -> ProviderTurnReply:
        step, scripted = self._next(request)
        for attempt in range(step.attempts):
            try:
                before_request()
            except BaseException:
                if attempt == 0 and scripted:  # nothing was sent: the model never answered
                    with self._lock:
                        self._script.appendleft(step)
                raise
            with self._lock:
                self.requests.append(request)
        if isinstance(step, Failure):
            raise step.error
        return ProviderTurnReply(text=_text(step.text), usage=_usage(step.usage))

    def _next(self, request: ProviderRequest) -> tuple[Reply | Failure, bool]:
        """The step to play, and whether it came from the script."""
        with self._lock:
            self.calls += 1
            if self._script:
                return self._script.popleft(), True
        if self._respond is None:
            raise ProviderFailed("the scripted provider has no step left", transient=False)
        return _checked(self._respond(request)), False


def _checked(step: Step) -> Reply | Failure:
    if isinstance(step, str):
        return Reply(step)
    if not isinstance(step, Reply | Failure):
        raise InvalidInput(f"a script step is a Reply, a Failure or a text, not {step!r}")
    if isinstance(step.attempts, bool) or not isinstance(step.attempts, int) or step.attempts < 1:
        raise InvalidInput(f"a step takes at least one HTTP attempt, not {step.attempts!r}")
    return step


def _text(text: str | Mapping[str, Any]) -> str:
    return text if isinstance(text, str) else json.dumps(text)


def _usage(usage: Mapping[str, Any] | None) -> dict[str, Any] | None:
    return None if usage is None else dict(usage)
