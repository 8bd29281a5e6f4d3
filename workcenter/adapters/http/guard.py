"""Safe by default: which hosts the server may bind, the bearer token, the body limit.

A server bound to a loopback address serves its own machine only; it answers only
requests that name a loopback host (so a web page that rebinds its own name to
127.0.0.1 cannot read it) and needs no token unless one is set. Bound to any other
address it refuses to start without ``WORKCENTER_API_TOKEN`` (at least 16
characters), and then every request but the dashboard's static files needs
``Authorization: Bearer <token>``, compared in constant time. A request body is
read whole, up to ``max_body_bytes``, before the application sees it: a longer one
is answered 413 without being read further.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import os
from collections.abc import Iterable
from dataclasses import dataclass

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from workcenter.domain.errors import WorkcenterError

TOKEN_ENV = "WORKCENTER_API_TOKEN"
MIN_TOKEN_CHARS = 16
MAX_BODY_BYTES = 1024 * 1024
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
PUBLIC_PATHS = frozenset({"/", "/favicon.ico"})
PUBLIC_PREFIX = "/static/"
AUTHENTICATED = "workcenter.authenticated"
PROBLEM_TYPE = "urn:workcenter:problem:"


class UnsafeServer(WorkcenterError):
    """The server would be reachable from other machines without a token."""

    code = "unsafe_server"


def is_loopback(host: str) -> bool:
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class Policy:
    host: str
    token: str | None
    max_body_bytes: int = MAX_BODY_BYTES

    @classmethod
    def for_host(
        cls, host: str, token: str | None = None, max_body_bytes: int = MAX_BODY_BYTES
    ) -> Policy:
        """The policy of a server bound to ``host``; the token defaults to the
        environment's. ``UnsafeServer`` when another host has no usable token."""
        token = token if token is not None else os.environ.get(TOKEN_ENV) or None
        if token is not None and len(token.strip()) < MIN_TOKEN_CHARS:
            raise UnsafeServer(f"{TOKEN_ENV} must have at least {MIN_TOKEN_CHARS} characters")
        if not is_loopback(host) and token is None:
            raise UnsafeServer(
                f"serving on {host} (not a loopback address) needs {TOKEN_ENV} set: every "
                "request must then carry it as a bearer token"
            )
        return cls(host=host, token=token, max_body_bytes=max_body_bytes)

    @property
    def loopback(self) -> bool:
        return is_loopback(self.host)


def _digest(value: str | bytes) -> bytes:
    return hashlib.sha256(value.encode() if isinstance(value, str) else value).digest()


def _header(scope: Scope, name: bytes) -> bytes | None:
    headers: Iterable[tuple[bytes, bytes]] = scope.get("headers", ())
    for key, value in headers:
        if key.lower() == name:
            return value
    return None


def _host_name(host: bytes) -> str:
    text = host.decode("latin-1").strip()
    if text.startswith("["):  # [::1]:8765
        return text[1 : text.find("]")] if "]" in text else text
    return text.rsplit(":", 1)[0] if text.count(":") == 1 else text


async def _refuse(
    send: Send, status: int, name: str, code: str, detail: str, **headers: str
) -> None:
    """A problem document (as ``problems`` writes them) sent before the application runs."""
    body = orjson.dumps(
        {"type": PROBLEM_TYPE + code, "title": name, "status": status, "detail": detail}
    )
    raw = [
        (b"content-type", b"application/problem+json"),
        (b"content-length", str(len(body)).encode()),
        *((k.lower().replace("_", "-").encode(), v.encode()) for k, v in headers.items()),
    ]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


class Guard:
    """ASGI middleware applying a ``Policy`` before anything else runs."""

    def __init__(self, app: ASGIApp, policy: Policy) -> None:
        self.app = app
        self.policy = policy
        self._token_digest = _digest(policy.token) if policy.token is not None else None

    def _authenticated(self, scope: Scope) -> bool:
        if self._token_digest is None:
            return False
        given = _header(scope, b"authorization") or b""
        scheme, _, credential = given.partition(b" ")
        if scheme.lower() != b"bearer":
            credential = b""
        # Digests have one length, so the comparison time says nothing of the token's.
        return hmac.compare_digest(_digest(credential.strip()), self._token_digest)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.policy.loopback:
            host = _host_name(_header(scope, b"host") or b"")
            if not is_loopback(host):
                await _refuse(
                    send,
                    421,
                    "MisdirectedRequest",
                    "misdirected_request",
                    "this server answers requests to loopback hosts only",
                )
                return
        path: str = scope.get("path", "")
        public = path in PUBLIC_PATHS or path.startswith(PUBLIC_PREFIX)
        authenticated = self._authenticated(scope)
        scope.setdefault("state", {})[AUTHENTICATED] = authenticated
        if self._token_digest is not None and not public and not authenticated:
            await _refuse(
                send,
                401,
                "Unauthorized",
                "unauthorized",
                "a bearer token is required (Authorization: Bearer <WORKCENTER_API_TOKEN>)",
                WWW_Authenticate='Bearer realm="workcenter"',
            )
            return
        declared = _header(scope, b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_body):
            await self._too_large(send)
            return
        body = b""
        more = scope.get("method") not in ("GET", "HEAD", "OPTIONS")
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            if len(body) > self.max_body:
                await self._too_large(send)
                return
            more = message.get("more_body", False)
        await self.app(scope, _replay(body, receive), send)

    @property
    def max_body(self) -> int:
        return self.policy.max_body_bytes

    async def _too_large(self, send: Send) -> None:
        await _refuse(
            send,
            413,
            "PayloadTooLarge",
            "payload_too_large",
            f"request bodies are limited to {self.max_body} bytes",
            Connection="close",
        )


def _replay(body: bytes, receive: Receive) -> Receive:
    """The body read by the guard, then whatever the connection says next (a disconnect)."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay
