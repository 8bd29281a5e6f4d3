"""HTTP's conventions for reads and bodies: HEAD, If-None-Match, one value per JSON key.

Every read answers ``HEAD`` with the headers its ``GET`` would send (``ETag`` and
``Content-Length`` included) and no body, and answers ``If-None-Match`` naming its
current ETag with ``304 Not Modified`` and no body (RFC 9110 13.1.2, weak comparison).
Change streams are not reads: ``HEAD`` on one stays 405. A command's JSON body that
names a key twice is refused (422): JSON parsers disagree on which value wins, so the
server would be guessing what the caller meant (ADR-0057).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from workcenter.domain.errors import InvalidInput

# What a 304 keeps of the 200 it stands for (RFC 9110 15.4.5).
_KEPT_ON_304 = frozenset({b"etag", b"cache-control", b"vary", b"content-location", b"date"})


def _header(headers: Iterable[tuple[bytes, bytes]], name: bytes) -> bytes | None:
    return next((value for key, value in headers if key.lower() == name), None)


def _opaque(tag: str) -> str:
    tag = tag.strip()
    return tag[2:] if tag.startswith("W/") else tag


def matches(if_none_match: str, etag: str) -> bool:
    """Whether ``If-None-Match`` names ``etag`` (weakly), or is ``*``."""
    wanted = [part.strip() for part in if_none_match.split(",")]
    return "*" in wanted or _opaque(etag) in {_opaque(tag) for tag in wanted if tag}


class Conventions:
    """ASGI middleware: a HEAD is served as its GET without the body; a GET whose ETag
    the client already holds is answered 304."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        method = scope.get("method")
        if (
            scope["type"] != "http"
            or method not in ("GET", "HEAD")
            or str(scope.get("path", "")).endswith("/stream")
        ):
            await self.app(scope, receive, send)
            return
        head = method == "HEAD"
        if head:
            scope = dict(scope, method="GET")
        raw = _header(scope.get("headers", ()), b"if-none-match")
        wanted = raw.decode("latin-1") if raw is not None else None
        done = False

        async def answer(message: Message) -> None:
            nonlocal done
            if done:
                return
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", ()))
                etag = _header(headers, b"etag")
                if (
                    wanted is not None
                    and message["status"] == 200
                    and etag is not None
                    and matches(wanted, etag.decode("latin-1"))
                ):
                    kept = [(k, v) for k, v in headers if k.lower() in _KEPT_ON_304]
                    await send({"type": "http.response.start", "status": 304, "headers": kept})
                    await send({"type": "http.response.body", "body": b""})
                    done = True
                    return
                await send(message)
                return
            if head:
                if not message.get("more_body", False):
                    await send({"type": "http.response.body", "body": b""})
                    done = True
                return
            await send(message)

        await self.app(scope, receive, answer)


def _no_repeated_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise InvalidInput(f"the body names {key!r} twice: give each field once")
        seen[key] = value
    return seen


def _no_such_number(token: str) -> None:
    raise InvalidInput(f"the body holds {token}, which is not a JSON number")


def refuse_what_json_has_not(body: bytes) -> None:
    """``InvalidInput`` if a JSON object in ``body`` names a key twice, or the body holds
    ``NaN`` or ``Infinity`` (which Python's parser takes; a body that is not JSON is left
    to the request's own validation, which says so). A body in UTF-16 or UTF-32, which
    Python's parser reads too, is refused as any other that is not UTF-8 (400; found by
    acceptance testing, ADR-0144)."""
    if json.detect_encoding(body) not in ("utf-8", "utf-8-sig"):
        raise HTTPException(400, "the body is not UTF-8 text")
    try:
        json.loads(body, object_pairs_hook=_no_repeated_keys, parse_constant=_no_such_number)
    except InvalidInput:
        raise
    except ValueError:
        return
