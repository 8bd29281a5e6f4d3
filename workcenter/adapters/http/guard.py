"""Safe by default: which hosts the server may bind, the bearer token, the body limit.

A server bound to a loopback address serves its own machine only; it answers only
requests that name a loopback host (so a web page that rebinds its own name to
127.0.0.1 cannot read it) and needs no token unless one is set. Bound to any other
address it refuses to start without ``WORKCENTER_API_TOKEN`` (at least 16
characters), and then every request but the dashboard's static files needs
``Authorization: Bearer <token>``, compared in constant time. A request body is
read whole, up to ``max_body_bytes`` and within ``BODY_SECONDS``, before the
application sees it: a longer one is answered 413 once the rest is read and dropped
(within bounds), a slower one 408; a request no token vouches for carries none.

Scoped tokens (ADR-0064) narrow what a token may do: a worker's only runs Actions
(``/api/worker/``), a user's steers and reads items, an operator's does what a
user's does and reads raw audit. They come from ``WORKCENTER_WORKER_TOKEN``,
``WORKCENTER_USER_TOKEN``, ``WORKCENTER_OPERATOR_TOKEN`` and the file named by
``WORKCENTER_TOKEN_FILE`` (one ``SCOPE TOKEN [holder=NAME]`` per line); ``WORKCENTER_API_TOKEN``
keeps every scope. A file's token may name its holder (ADR-0143): the person a user's or
operator's commands are recorded as, the only worker name a worker's may claim under. A
token is never logged nor shown in a policy's repr.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import ipaddress
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from workcenter.adapters.http.fields import WORKER_NAME
from workcenter.domain.errors import WorkcenterError

TOKEN_ENV = "WORKCENTER_API_TOKEN"
TOKEN_FILE_ENV = "WORKCENTER_TOKEN_FILE"
SCOPE_ENVS = {
    "worker": "WORKCENTER_WORKER_TOKEN",
    "user": "WORKCENTER_USER_TOKEN",
    "operator": "WORKCENTER_OPERATOR_TOKEN",
}
# What a token of each kind may do; the API token (ADR-0031) may do everything.
GRANTS: Mapping[str, frozenset[str]] = {
    "worker": frozenset({"worker"}),
    "user": frozenset({"user"}),
    "operator": frozenset({"user", "operator"}),
    "api": frozenset({"worker", "user", "operator"}),
}
WORKER_PATH = "/api/worker"
DOCUMENT_PATHS = frozenset({"/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc"})
MIN_TOKEN_CHARS = 16
MAX_BODY_BYTES = 1024 * 1024
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
# The dashboard's page, and the readiness probe a load balancer sends without a token.
PUBLIC_PATHS = frozenset({"/", "/favicon.ico", "/api/health"})
PUBLIC_PREFIX = "/static/"
AUTHENTICATED = "workcenter.authenticated"
# The named holder of the token a request presented, as a ``Holder``, or None.
HOLDER = "workcenter.holder"
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


class ScopedToken(NamedTuple):
    scope: str
    token: str
    # Who holds it, when the token file names them (ADR-0143).
    holder: str | None = None


class Holder(NamedTuple):
    """The named holder of a request's token: ``scope`` is ``user``, ``operator`` or
    ``worker``, ``name`` a user's or operator's actor id, or a worker's name."""

    scope: str
    name: str


@dataclass(frozen=True)
class Policy:
    host: str
    token: str | None = field(repr=False)
    max_body_bytes: int = MAX_BODY_BYTES
    # The tokens besides the API token: (scope, token) or (scope, token, holder).
    scoped: tuple[ScopedToken, ...] = field(default=(), repr=False)

    @classmethod
    def for_host(
        cls,
        host: str,
        token: str | None = None,
        max_body_bytes: int = MAX_BODY_BYTES,
        scoped: Iterable[tuple[str, str] | tuple[str, str, str | None]] | None = None,
    ) -> Policy:
        """The policy of a server bound to ``host``; the tokens default to the
        environment's. ``UnsafeServer`` when another host has no usable token."""
        token = token if token is not None else os.environ.get(TOKEN_ENV) or None
        if token is not None:
            _check_token(token, TOKEN_ENV)
        pairs = tuple(
            ScopedToken(*given)
            for given in (scoped if scoped is not None else scoped_tokens(os.environ))
        )
        # One token, one scope: a token given two would silently hold both (a worker's
        # able to steer, say), the API token's every scope. Named by its scopes, never
        # by its value (found by acceptance testing).
        scopes_of: dict[str, str] = {} if token is None else {token: "API"}
        holders_of: dict[str, str | None] = {}
        for scope, value, holder in pairs:
            if scope not in SCOPE_ENVS:
                # Not named: a line with its columns swapped has its token there (ADR-0137).
                raise UnsafeServer("unknown token scope: worker, user or operator")
            _check_token(value, f"a {scope} token")
            if holder is not None and (problem := holder_problem(holder)) is not None:
                raise UnsafeServer(f"a {scope} token's holder {problem}")
            if scopes_of.setdefault(value, scope) != scope:
                raise UnsafeServer(
                    f"one token is given both the {scopes_of[value]} and the {scope} scope:"
                    " give each scope its own token"
                )
            if holders_of.setdefault(value, holder) != holder:
                raise UnsafeServer(
                    f"one {scope} token is given two holders: give each holder its own token"
                )
        # A holder is recorded on every command its token sends, in the audit anyone
        # who reads items may read and no one may edit: a token there (two lines run
        # together) was written out in clear (found by the re-test of ADR-0143).
        tokens = set(scopes_of)
        if any(holder in tokens for _, _, holder in pairs):
            raise UnsafeServer(_HOLDER_IS_A_TOKEN)
        if not is_loopback(host) and token is None and not pairs:
            raise UnsafeServer(
                f"serving on {host} (not a loopback address) needs {TOKEN_ENV} (or scoped "
                "tokens) set: every request must then carry one as a bearer token"
            )
        return cls(host=host, token=token, max_body_bytes=max_body_bytes, scoped=pairs)

    @property
    def loopback(self) -> bool:
        return is_loopback(self.host)


def _check_token(value: str, named: str) -> None:
    """``UnsafeServer`` for a token too short, or with white space around it: a header
    cannot carry that, so it started a server nobody could use (a stray space in an
    environment file; found by acceptance testing)."""
    if value != value.strip():
        raise UnsafeServer(f"{named} has white space around it: remove it")
    if len(value) < MIN_TOKEN_CHARS:
        raise UnsafeServer(f"{named} must have at least {MIN_TOKEN_CHARS} characters")


def holder_problem(holder: str) -> str | None:
    """Why ``holder`` cannot name a token's holder, or None. One rule for every scope,
    a worker name's over HTTP (printable ASCII), so that a name a worker token is bound
    to can be claimed under; never says the name (a line's columns swapped put the
    token there)."""
    if not holder.isascii() or not holder.isprintable() or holder != holder.strip():
        return "must be printable ASCII"
    if not holder or len(holder) > WORKER_NAME:
        return f"must be 1 to {WORKER_NAME} characters"
    return None


def scoped_tokens(environ: Mapping[str, str]) -> list[ScopedToken]:
    """The scoped tokens the operator configured: one per scope from the environment,
    any number from the token file (``SCOPE TOKEN [holder=NAME]`` lines; blank and ``#``
    lines are skipped). A file that cannot be read or parsed is ``UnsafeServer``,
    naming the line but never its token."""
    pairs = [
        ScopedToken(scope, environ[name]) for scope, name in SCOPE_ENVS.items() if environ.get(name)
    ]
    path = environ.get(TOKEN_FILE_ENV)
    if not path:
        return pairs
    try:
        with open(path, encoding="utf-8") as file:
            # The file read is the file checked (not its path's, which could change).
            private = not os.fstat(file.fileno()).st_mode & 0o027
            lines = file.read().splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise UnsafeServer(
            f"{TOKEN_FILE_ENV}: cannot read {path}: {type(error).__name__}"
        ) from None
    if not private:
        # As ssh and PostgreSQL refuse keys others may read, or the group change (a
        # member could add a token of their own; ADR-0137).
        raise UnsafeServer(
            f"{path}: others may read or write it, or its group write it: chmod 600 (or 640) it"
        )
    for number, line in enumerate(lines, 1):
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        try:
            pairs.append(_line_token(words, pairs))
        except UnsafeServer as refused:
            # Named by its line, never by its token.
            raise UnsafeServer(f"{path} line {number}: {refused}") from None
    return pairs


HOLDER_PREFIX = "holder="


def _line_token(words: list[str], earlier: list[ScopedToken]) -> ScopedToken:
    """One line's token: ``SCOPE TOKEN [holder=NAME]``. The holder is marked, so that
    columns swapped (``user alice@example.com TOKEN``) cannot pass: unmarked, a name of
    16 characters was taken as the token and the token recorded in the audit as the
    holder (found by the re-test of ADR-0143)."""
    if len(words) not in (2, 3):
        raise UnsafeServer("expected SCOPE TOKEN [holder=NAME]")
    if words[0] not in SCOPE_ENVS:
        raise UnsafeServer(
            "unknown token scope (expected SCOPE TOKEN [holder=NAME], the scope worker,"
            " user or operator)"
        )
    if words[1].startswith(HOLDER_PREFIX):
        raise UnsafeServer("the holder is where the token goes: SCOPE TOKEN [holder=NAME]")
    _check_token(words[1], "its token")
    holder = None
    if len(words) == 3:
        if not words[2].startswith(HOLDER_PREFIX):
            raise UnsafeServer("the third column is holder=NAME (SCOPE TOKEN [holder=NAME])")
        holder = words[2].removeprefix(HOLDER_PREFIX)
        if (problem := holder_problem(holder)) is not None:
            raise UnsafeServer(f"the holder {problem}")
    given = ScopedToken(words[0], words[1], holder)
    if any(p.token == given.token and p.holder != holder for p in earlier):
        raise UnsafeServer(
            "its token is given another holder on an earlier line: give each holder its own token"
        )
    if any(holder == p.token for p in earlier) or any(given.token == p.holder for p in earlier):
        raise UnsafeServer(_HOLDER_IS_A_TOKEN)
    return given


_HOLDER_IS_A_TOKEN = (
    "a token's holder is a token (two lines run together?): holders are written in the"
    " audit, so a holder may not be a token"
)


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
        grants = [
            (_digest(value), GRANTS[kind], Holder(kind, holder) if holder else None)
            for kind, value, holder in policy.scoped
        ]
        if policy.token is not None:
            grants.append((_digest(policy.token), GRANTS["api"], None))
        self._grants = tuple(grants)

    def _scopes(self, scope: Scope) -> tuple[frozenset[str], Holder | None]:
        """The scopes of the presented token (none for none or an unknown one), and its
        named holder."""
        given = _header(scope, b"authorization") or b""
        scheme, _, credential = given.partition(b" ")
        if scheme.lower() != b"bearer":
            credential = b""
        presented = _digest(credential.strip())
        granted: frozenset[str] = frozenset()
        holder: Holder | None = None
        # Digests have one length, so the comparison time says nothing of a token's; every
        # token is compared, so neither does which one matched. One token, one scope, so
        # at most one matches.
        for digest, scopes, named in self._grants:
            if hmac.compare_digest(presented, digest):
                granted, holder = scopes, named
        return granted, holder

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
        granted, holder = self._scopes(scope) if self._grants else (frozenset(), None)
        # Raw audit is the operator's (a token presented); a loopback server without
        # tokens serves one user with every other scope.
        state = scope.setdefault("state", {})
        state[AUTHENTICATED] = "operator" in granted
        state[HOLDER] = holder
        if self._grants and not public:
            if not granted:
                presented = bool((_header(scope, b"authorization") or b"").strip())
                await _refuse(
                    send,
                    401,
                    "Unauthorized",
                    "unauthorized",
                    "the bearer token is not one this server takes"
                    if presented
                    else "a bearer token is required (Authorization: Bearer <token>)",
                    WWW_Authenticate='Bearer realm="workcenter"',
                )
                return
            needed = _scope_of(path)
            if needed is not None and needed not in granted:
                await _refuse(send, 403, "Forbidden", "forbidden", _FORBIDDEN[needed])
                return
        # A request no token vouches for (a public path on a server with tokens) may carry
        # no body, and one past the limit is not read on: a peer without a token made the
        # server read 64 MiB or wait 5 s a request (found by acceptance testing, ADR-0140).
        trusted = not self._grants or bool(granted)
        limit = self.max_body if trusted else 0
        declared = _header(scope, b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > limit):
            if trusted:
                await _drained(receive)
            await self._too_large(send, limit)
            return
        body = b""
        more = scope.get("method") not in ("GET", "HEAD", "OPTIONS")
        try:
            async with asyncio.timeout(BODY_SECONDS):
                while more:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        return
                    body += message.get("body", b"")
                    more = message.get("more_body", False)
                    if len(body) > limit:
                        break
        except TimeoutError:
            await _refuse(
                send,
                408,
                "RequestTimeout",
                "request_timeout",
                f"the request's body did not arrive within {BODY_SECONDS:g} s",
                Connection="close",
            )
            return
        if len(body) > limit:
            if more and trusted:
                await _drained(receive)
            await self._too_large(send, limit)
            return
        await self.app(scope, _replay(body, receive), _unframed(send))

    @property
    def max_body(self) -> int:
        return self.policy.max_body_bytes

    async def _too_large(self, send: Send, limit: int) -> None:
        await _refuse(
            send,
            413,
            "PayloadTooLarge",
            "payload_too_large",
            f"request bodies are limited to {limit} bytes"
            if limit
            else "a request without a token carries no body",
            Connection="close",
        )


# A body past the limit is read to its end, unkept, before the 413, up to these bounds:
# answered while the client still sent, the connection was closed on unread data, and a
# client on a reused connection saw it reset, not the 413 (found by acceptance testing,
# ADR-0140). Past them it is answered at once, as before.
DRAIN_BYTES = 64 * 1024 * 1024
DRAIN_SECONDS = 5.0
# A body sent a byte at a time held its connection (and a file) for as long as the
# client went on (found by acceptance testing, ADR-0140): it has this long in all.
BODY_SECONDS = 30.0


async def _drained(receive: Receive) -> None:
    """Read what is left of the request's body, keeping none of it, within the bounds."""
    read = 0
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(DRAIN_SECONDS):
            while read <= DRAIN_BYTES:
                message = await receive()
                if message["type"] == "http.disconnect" or not message.get("more_body"):
                    return
                read += len(message.get("body", b""))


_FORBIDDEN = {
    "worker": "the worker protocol needs a worker token",
    "user": "a worker token may only run Actions (the worker protocol under /api/worker/)",
}


def _scope_of(path: str) -> str | None:
    """The scope a path needs; None for the API's document, which any token may read."""
    if path == WORKER_PATH or path.startswith(WORKER_PATH + "/"):
        return "worker"
    return None if path in DOCUMENT_PATHS else "user"


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


# Every answer refuses to be framed by another site and to have its type guessed: the
# dashboard's page said so, but `/docs`, whose Swagger UI sends requests for its user
# on a click, could be framed and clicked through (found by acceptance testing, ADR-0137).
_UNFRAMED = ((b"x-frame-options", b"DENY"), (b"x-content-type-options", b"nosniff"))


def _unframed(send: Send) -> Send:
    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = list(message.get("headers", ()))
            named = {name.lower() for name, _ in headers}
            headers.extend(pair for pair in _UNFRAMED if pair[0] not in named)
            message = {**message, "headers": headers}
        await send(message)

    return sending
