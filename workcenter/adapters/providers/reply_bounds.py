"""A reply read whole within the provider's timeout (ADR-0140) and a size (ADR-0142).

The HTTP client's timeout bounds each read of a reply, not the reply: a server that sent
its body a few bytes at a time, each within the timeout, held a Coordinator turn (and
the process's every other step behind it) for as long as it went on, its mailbox lease
renewed meanwhile (found by acceptance testing: 59 s on a 2 s timeout). The response
hook gives each reply's body a deadline, counted from its headers: past it the next
read fails as the client's own read timeout does, which it retries or reports.

Nor did anything bound a reply's size: a body of gigabytes, or a small one unpacking to
gigabytes, was read into memory whole. Requests ask for replies as they are
(``Accept-Encoding: identity``), a compressed reply is refused, and a body past
``max_bytes`` fails at the read that passes it, as a cut connection does.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from functools import cache
from typing import Any


def as_they_are(request: Any) -> None:
    """A request hook: the reply asked for uncompressed, so its size on the wire is its
    size in memory."""
    request.headers["Accept-Encoding"] = "identity"


def within(seconds: float, max_bytes: int) -> Callable[[Any], None]:
    """A response hook of the ``openai`` client's HTTP client (httpx, or the httpx2 of
    newer releases): the body of each response read within ``seconds`` and ``max_bytes``,
    a compressed one refused."""

    def hook(response: Any) -> None:
        package = type(response).__module__.partition(".")[0]
        encoding = response.headers.get("content-encoding", "identity").strip().lower()
        if encoding not in ("", "identity"):
            response.close()
            raise sys.modules[package].RemoteProtocolError(
                f"the reply came compressed ({encoding}) though asked for as it is: a"
                " compressed reply's size is unknown until it is unpacked",
                request=response.request,
            )
        bounded = _stream_type(package)
        response.stream = bounded(response.stream, response.request, seconds, max_bytes)

    return hook


@cache
def _stream_type(package: str) -> type:
    """The bounded stream, of the HTTP package the response is of."""
    http = sys.modules[package]

    class Bounded(http.SyncByteStream):  # type: ignore[misc, name-defined]
        def __init__(self, stream: Any, request: Any, seconds: float, max_bytes: int) -> None:
            self.stream, self.request, self.seconds = stream, request, seconds
            self.deadline = time.monotonic() + seconds
            self.max_bytes = max_bytes

        def __iter__(self) -> Iterator[bytes]:
            read = 0
            for chunk in self.stream:
                if time.monotonic() > self.deadline:
                    raise http.ReadTimeout(
                        f"the reply was not read whole within {self.seconds:g} s",
                        request=self.request,
                    )
                read += len(chunk)
                if read > self.max_bytes:
                    raise http.RemoteProtocolError(
                        f"the reply is larger than {self.max_bytes} bytes",
                        request=self.request,
                    )
                yield chunk

        def close(self) -> None:
            self.stream.close()

    return Bounded
