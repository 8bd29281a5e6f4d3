"""Errors as ``application/problem+json`` (RFC 9457), titled with the typed error's name.

A refusal of the service keeps its class name (``InvalidInput``, ``NotFound``,
``VersionConflict``...) as the problem's ``title`` and its ``code`` as the end of the
``type`` URI; the status says what HTTP makes of it. Messages are in the API's
words (fields as the API spells them; no validation library's class names, codes,
links or echoed input: ADR-0057) and pass the diagnostic sanitiser, since they may
quote the input. Anything unexpected is a bare 500 with no traceback: the server's
log has it.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel
from starlette.exceptions import HTTPException
from starlette.routing import Match

from workcenter.adapters.http import fields
from workcenter.adapters.http.schemas import omitted
from workcenter.adapters.persistence import StoreUnavailable
from workcenter.adapters.wording import field_message, plain
from workcenter.domain.errors import (
    CommandRefused,
    InvalidInput,
    NotFound,
    ResourceStopError,
    UndecodableEvent,
    VersionConflict,
    WorkcenterError,
)
from workcenter.projections.execution import LIMIT_KEYS
from workcenter.projections.sanitize import sanitize_diagnostic
from workcenter.service_layer.repository import WriteContention

PROBLEM_JSON = "application/problem+json"
TYPE_PREFIX = "urn:workcenter:problem:"
DETAIL_LIMIT = 2000
MAX_FIELD_ERRORS = 20
log = logging.getLogger("workcenter.http")


class FieldError(BaseModel):
    """Where a request was refused and why, in the API's words."""

    loc: list[str | int] = Field(description="The field's place: body, query, header or path first")
    msg: str


class ProblemDocument(BaseModel):
    """An RFC 9457 problem document: ``title`` is the typed error's name, ``type`` ends
    with its code. ``errors`` lists a refused request's fields (422); ``expected`` and
    ``actual`` are a VersionConflict's versions; ``stopCode`` names a budget's stop."""

    model_config = ConfigDict(
        extra="forbid", alias_generator=to_camel, validate_by_name=True, serialize_by_alias=True
    )

    type: str = Field(pattern="^" + TYPE_PREFIX)
    title: str
    status: int = Field(ge=400, le=599)
    detail: str
    errors: list[FieldError] = omitted("The refused fields (422)")
    expected: int = omitted("A VersionConflict's expected version")
    actual: int = omitted("A VersionConflict's actual version")
    stop_code: str = omitted("A budget stop's code")


class PreconditionRequired(WorkcenterError):
    """A command on an existing item came without If-Match."""

    code = "precondition_required"


class PreconditionFailed(WorkcenterError):
    """If-Match is not the item's current ETag."""

    code = "precondition_failed"

    def __init__(self, message: str, current_etag: str | None = None) -> None:
        super().__init__(message)
        self.current_etag = current_etag


class Forbidden(WorkcenterError):
    code = "forbidden"


class UnsupportedMediaType(WorkcenterError):
    code = "unsupported_media_type"


# Most specific first: StaleRun is a CommandRefused.
STATUS: tuple[tuple[type[WorkcenterError], int], ...] = (
    (InvalidInput, 422),
    (NotFound, 404),
    (VersionConflict, 412),
    (PreconditionFailed, 412),
    (PreconditionRequired, 428),
    (CommandRefused, 409),
    (ResourceStopError, 409),
    (Forbidden, 403),
    (UnsupportedMediaType, 415),
    (WriteContention, 503),
    (StoreUnavailable, 503),
    # Not the caller's fault and no retry helps: the store's bytes are damaged (ADR-0099).
    (UndecodableEvent, 500),
)
# The service names fields as its Python API does; a caller of this API sent them so.
API_NAMES = LIMIT_KEYS | {
    "acceptance_criteria": "acceptanceCriteria",
    "delivery_target": "deliveryTarget",
    "expected_generation": "expectedGeneration",
    "client_message_id": "clientMessageId",
    "request_id": "requestId",
}
_PYTHON_NAME = re.compile(r"\b(" + "|".join(API_NAMES) + r")\b")
_TYPE_TAGS = frozenset({"str", "int", "float", "bool", "list", "dict", "none"})
HTTP_TITLES = {
    400: ("BadRequest", "bad_request"),
    404: ("NotFound", "not_found"),
    405: ("MethodNotAllowed", "method_not_allowed"),
    406: ("NotAcceptable", "not_acceptable"),
    415: ("UnsupportedMediaType", "unsupported_media_type"),
}


def api_words(message: str) -> str:
    """A refusal's message in the API's words: fields named as the API spells them, and
    nothing of a validation library (``wording.plain``)."""
    return _PYTHON_NAME.sub(lambda m: API_NAMES[m.group(0)], plain(message))


RETRY_AFTER_SECONDS = "1"


def problem(status: int, title: str, detail: str, code: str, **extra: Any) -> JSONResponse:
    body = {
        "type": TYPE_PREFIX + code,
        "title": title,
        "status": status,
        "detail": sanitize_diagnostic(plain(detail), DETAIL_LIMIT),
        **extra,
    }
    return JSONResponse(body, status_code=status, media_type=PROBLEM_JSON)


def status_of(error: WorkcenterError) -> int:
    return next((status for kind, status in STATUS if isinstance(error, kind)), 400)


def from_error(error: WorkcenterError) -> JSONResponse:
    extra: dict[str, Any] = {}
    if isinstance(error, VersionConflict):
        extra = {"expected": error.expected, "actual": error.actual}
    elif isinstance(error, ResourceStopError):
        extra = {"stopCode": error.code}  # the instance's code is the denial's
    kind = type(error)
    # The id is the caller's own path segment, whatever it holds: never echoed (ADR-0057).
    detail = f"{error.kind} not found" if isinstance(error, NotFound) else str(error)
    if isinstance(error, StoreUnavailable) and error.public is not None:
        detail = error.public
    response = problem(status_of(error), kind.__name__, api_words(detail), kind.code, **extra)
    if isinstance(error, PreconditionFailed) and error.current_etag is not None:
        response.headers["ETag"] = error.current_etag
    if response.status_code == 503:
        # A store held up or away passes: when to ask again (found by acceptance testing,
        # ADR-0145; the problem said nothing of it).
        response.headers["Retry-After"] = RETRY_AFTER_SECONDS
    return response


async def _workcenter_error(_: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, WorkcenterError)
    return from_error(error)


def _where(loc: tuple[Any, ...]) -> list[str]:
    """A field's place as the API spells it: a union's member names (``str``,
    ``Stage``) are the models' business, not the caller's."""
    return [str(part) for part in loc if isinstance(part, int) or _is_field(str(part))]


def _is_field(part: str) -> bool:
    return (
        part not in _TYPE_TAGS
        and not part[:1].isupper()
        and "[" not in part
        and not part.startswith("constrained-")  # a union's bounded member: constrained-str
    )


def _field_error(error: Mapping[str, Any]) -> dict[str, Any]:
    kind = str(error.get("type", ""))
    where = _where(tuple(error.get("loc", ())))
    if kind == "string_pattern_mismatch":
        return {"loc": where, "msg": fields.pattern_words((error.get("ctx") or {}).get("pattern"))}
    if kind == "json_invalid":
        at = where[1] if len(where) > 1 else "?"
        return {"loc": ["body"], "msg": f"the body is not valid JSON (at character {at})"}
    return {"loc": where, "msg": field_message(kind, str(error.get("msg", "")), error.get("ctx"))}


def _said(loc: list[str], message: str) -> str:
    path = loc[1:] if loc[:1] in (["body"], ["query"], ["header"], ["path"]) else loc
    if not path and loc[:1] == ["body"] and not message.startswith("the body"):
        return f"the body {message}"  # the whole body: a request without one
    return f"{'.'.join(path)} {message}" if path else message


# The failures that say only "the input is not this member's type".
_NOT_THIS_TYPE = frozenset(
    {
        "int_type", "int_parsing", "int_from_float", "float_type", "float_parsing",
        "string_type", "bool_type", "bool_parsing", "list_type", "dict_type", "model_type",
        "model_attributes_type",
    }
)  # fmt: skip


def _reasons(fields: list[dict[str, Any]], kinds: list[str]) -> list[dict[str, Any]]:
    """One reason a place failed, where a union's members each said what they wanted
    (free-form JSON: a text, a boolean, a number, an object or a list): a member that
    only says the input is not its type is left out when the member of the input's type
    says more, at that place (a bound) or inside it (an object's or a list's contents);
    what is left at one place is said once ("must be a string, true or false or ...")."""
    places = [tuple(f["loc"]) for f in fields]
    # The places something says more about: each failure's enclosing places, and its own
    # where it is more than a type mismatch (one pass: a body may fail thousands of times).
    told: set[tuple[str, ...]] = set()
    for place, kind in zip(places, kinds, strict=True):
        told.update(place[:n] for n in range(len(place)))
        if kind not in _NOT_THIS_TYPE:
            told.add(place)

    kept: dict[tuple[str, ...], list[str]] = {}
    for place, field, kind in zip(places, fields, kinds, strict=True):
        if kind in _NOT_THIS_TYPE and place in told:
            continue
        messages = kept.setdefault(place, [])
        if field["msg"] not in messages:
            messages.append(field["msg"])
    return [{"loc": list(place), "msg": _either(messages)} for place, messages in kept.items()]


def _either(messages: list[str]) -> str:
    """``must be a string``, ``must be true or false``: ``must be a string or true or
    false``; anything else is said in turn."""
    if len(messages) == 1 or not all(m.startswith("must be ") for m in messages):
        return "; ".join(messages)
    needs = [m.removeprefix("must be ") for m in messages]
    return f"must be {', '.join(needs[:-1])} or {needs[-1]}"


async def _validation_error(_: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, RequestValidationError)
    # Where and why only, in the API's words: the offending input is not echoed back.
    errors = error.errors()
    kinds = [str(e.get("type", "")) for e in errors]
    fields = _reasons([_field_error(e) for e in errors], kinds)[:MAX_FIELD_ERRORS]
    detail = "; ".join(_said(f["loc"], f["msg"]) for f in fields)
    return problem(422, InvalidInput.__name__, detail, InvalidInput.code, errors=fields)


def _allowed(request: Request) -> str:
    """Every method some route of this path takes (HEAD wherever GET is: the
    conventions serve it), where the router names only the first route's."""
    methods = [
        method
        for method in ("GET", "POST", "PUT", "PATCH", "DELETE")
        if any(
            route.matches(dict(request.scope, method=method))[0] is Match.FULL
            for route in request.app.router.routes
        )
    ]
    return ", ".join(sorted([*methods, "HEAD"] if "GET" in methods else methods))


def _unreadable_body(error: HTTPException) -> str | None:
    """The framework's words for a body its JSON reader gave up on ("There was an
    error parsing the body"), said in ours by what made it give up."""
    cause = error.__cause__
    if error.status_code != 400 or cause is None:
        return None
    if isinstance(cause, UnicodeDecodeError):
        return "the body is not UTF-8 text"
    if isinstance(cause, RecursionError):
        return "the body's JSON nests too deeply"
    return "the body cannot be read as JSON"


async def _http_error(request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, HTTPException)
    status = error.status_code
    title, code = HTTP_TITLES.get(status, (f"HTTP{status}", f"http_{status}"))
    response = problem(status, title, _unreadable_body(error) or str(error.detail), code)
    for name, value in (error.headers or {}).items():
        response.headers[name] = value
    if status == 405:
        response.headers["Allow"] = _allowed(request)
    return response


async def _unexpected(request: Request, error: Exception) -> JSONResponse:
    log.exception("unexpected error serving %s %s", request.method, request.url.path)
    answer = problem(500, "InternalError", "the server failed; its log has why", "internal_error")
    # The framework raises the error again once this is sent, and the server then drops
    # the connection: said, so that a client does not send its next request on it and
    # meet a reset (found by acceptance testing, ADR-0145).
    answer.headers["Connection"] = "close"
    return answer


def install(app: FastAPI) -> None:
    app.add_exception_handler(WorkcenterError, _workcenter_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected)
