"""A reply read whole within the provider's timeout (ADR-0140).

The HTTP client's timeout bounds each read of a reply, not the reply: a server that sent
its body a few bytes at a time, each within the timeout, held a Coordinator turn (and
the process's every other step behind it) for as long as it went on, its mailbox lease
renewed meanwhile (found by acceptance testing: 59 s on a 2 s timeout). The response
hook gives each reply's body a deadline, counted from its headers: past it the next
read fails as the client's own read timeout does, which it retries or reports.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from functools import cache
from typing import Any


def within(seconds: float) -> Callable[[Any], None]:
    """A response hook of the ``openai`` client's HTTP client (httpx, or the httpx2 of
    newer releases): the body of each response read within ``seconds``."""

    def hook(response: Any) -> None:
        until = _stream_type(type(response).__module__.partition(".")[0])
        response.stream = until(response.stream, response.request, seconds)

    return hook


@cache
def _stream_type(package: str) -> type:
    """The deadline's stream, of the HTTP package the response is of."""
    http = sys.modules[package]

    class Until(http.SyncByteStream):  # type: ignore[misc, name-defined]
        def __init__(self, stream: Any, request: Any, seconds: float) -> None:
            self.stream, self.request, self.seconds = stream, request, seconds
            self.deadline = time.monotonic() + seconds

        def __iter__(self) -> Iterator[bytes]:
            for chunk in self.stream:
                if time.monotonic() > self.deadline:
                    raise http.ReadTimeout(
                        f"the reply was not read whole within {self.seconds:g} s",
                        request=self.request,
                    )
                yield chunk

        def close(self) -> None:
            self.stream.close()

    return Until
