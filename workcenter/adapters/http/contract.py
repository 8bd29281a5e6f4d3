"""What the OpenAPI document declares beyond what FastAPI infers from a route (ADR-0066).

Each route names its answers here: the problem documents it may send (always
``application/problem+json`` with the ``ProblemDocument`` schema, never FastAPI's
default 422), the ``ETag`` its reads send and the ``304`` an ``If-None-Match`` earns.
Reads serve bytes serialised once (``responses.JSONBytes``); their ``response_model``
only declares the schema, since FastAPI returns a ``Response`` as it is.

``If-Match`` is declared required on the commands that need it although the route
accepts a request without it: such a request is answered ``428 Precondition
Required`` (RFC 6585) after its body has been checked, not a 422 among the body's
errors, so the document says what a client must send and the server says why it
refused (``document``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import FastAPI, Header
from fastapi.openapi.utils import get_openapi

from workcenter.adapters.http.guard import PUBLIC_PATHS
from workcenter.adapters.http.preconditions import ITEM_TAG
from workcenter.adapters.http.problems import PROBLEM_JSON, ProblemDocument
from workcenter.adapters.http.schemas import ChangeRecord

Responses = dict[int | str, dict[str, Any]]

WHY: dict[int, str] = {
    400: "The body could not be read as text",
    401: "No bearer token, or an unknown one (a server with tokens configured)",
    403: "The token's scope does not allow this (or raw audit without the operator's)",
    404: "No such item, Action or route",
    409: "The command is refused in the item's or Run's current state (CommandRefused, "
    "StaleRun, ClaimIdUsed, RequestIdUsed, ResourceStopError)",
    412: "If-Match is not the item's current ETag (the answer carries the current one), or "
    "a VersionConflict",
    408: "The body did not arrive within the server's time for it (30 s)",
    413: "The body is larger than the server's limit",
    415: "The body is not application/json",
    421: "A loopback server was addressed by a name that is not a loopback host",
    422: "A field is missing, unknown, of the wrong type or out of its bounds (InvalidInput)",
    428: "The command came without If-Match",
    503: "The store is unavailable or too contended just now: try again",
}
# What the guard may answer on any route of the API.
GUARDED = (401, 403, 421, 503)
ETAG_HEADER = {
    "description": "An item's: the versions a command echoes back in If-Match and a digest of"
    ' the body, "<item version>.<control version>.<digest>" (a list\'s: the position it was'
    " read at)",
    "schema": {"type": "string"},
}


# A 412's ETag: the item's current versions, to send again in If-Match.
CURRENT_ETAG = {
    "description": 'The item\'s current versions, "<item version>.<control version>": send'
    " them in If-Match once you have read what changed",
    "schema": {"type": "string"},
}
# A 503's: when to ask again (ADR-0145).
RETRY_AFTER = {
    "description": "Seconds to wait before sending the request again",
    "schema": {"type": "string"},
}


def problems(*statuses: int) -> Responses:
    """The problem documents a route may answer, each with its reason (a 412 with the
    item's current versions, found missing from the document by acceptance testing,
    ADR-0140)."""
    schema = {"$ref": "#/components/schemas/ProblemDocument"}
    return {
        status: {
            "description": WHY[status],
            "content": {PROBLEM_JSON: {"schema": schema}},
        }
        | ({"headers": {"ETag": CURRENT_ETAG}} if status == 412 else {})
        | ({"headers": {"Retry-After": RETRY_AFTER}} if status == 503 else {})
        # A route that takes a body may be timed out reading it, as it may be refused for
        # its size (the guard's, ADR-0140).
        for status in sorted({*GUARDED, *statuses, *((408,) if 413 in statuses else ())})
    }


def read(*statuses: int) -> Responses:
    """A GET's answers: the 200 with its ETag, 304 for a client that holds it, problems."""
    answers: Responses = {
        200: {"headers": {"ETag": ETAG_HEADER}},
        304: {
            "description": "Not Modified: If-None-Match named the current ETag",
            "headers": {"ETag": ETAG_HEADER},
        },
    }
    return answers | problems(422, *statuses)


def command(status: int = 200, *statuses: int) -> Responses:
    """A command's answers: its success with the new ETag, and its problems."""
    answers: Responses = {status: {"headers": {"ETag": ETAG_HEADER}}}
    return answers | problems(400, 404, 409, 412, 413, 415, 422, 428, *statuses)


def revalidation(
    if_none_match: Annotated[
        str | None,
        Header(
            description="An ETag this client holds: 304 Not Modified while it is current "
            "(answered by the server's conventions, before the route)"
        ),
    ] = None,
) -> None:
    """Declares ``If-None-Match`` on every read; ``conventions.Conventions`` answers it."""


# Links (OpenAPI 3.1, 4.8.20): where a request's ids and preconditions come from, so a
# client (and Schemathesis' stateful phase) can chain a create, its reads and commands,
# and a claim and the verbs of its Run.
ITEM_READS = ("detail", "progress", "budget", "timeline", "audit", "conversation", "decisions")
ITEM_COMMANDS = ("start", "cancel", "resume", "extend_budget", "post_message")
ACTION_COMMANDS = ("retry", "guide")
RUN_VERBS = (
    "renew", "finish", "interrupt", "defer", "pending_input", "consume_input", "reserve", "settle",
)  # fmt: skip


def _item_links() -> dict[str, Any]:
    item = {"path.item_id": "$response.body#/id"}
    precondition = item | {"header.If-Match": "$response.header.ETag"}
    action = precondition | {"path.action_id": "$response.body#/actions/0/id"}
    # A started linear item has a ready Action: a worker's claim can take it.
    claim = {"claim": {"operationId": "claim", "description": "Claim a Run of its Actions"}}
    return (
        claim
        | {name: {"operationId": name, "parameters": item} for name in ITEM_READS}
        | {name: {"operationId": name, "parameters": precondition} for name in ITEM_COMMANDS}
        | {name: {"operationId": name, "parameters": action} for name in ACTION_COMMANDS}
    )


def _run_links() -> dict[str, Any]:
    fence = {"fence": "$response.body#/fence"}
    return {name: {"operationId": name, "requestBody": fence} for name in RUN_VERBS}


SETTLE_LINK = {
    "settle": {
        "operationId": "settle",
        "requestBody": {"fence": "$request.body#/fence", "requestId": "$response.body#/requestId"},
    }
}
CONSUME_LINK = {
    "consume_input": {
        "operationId": "consume_input",
        "requestBody": {
            "fence": "$request.body#/fence",
            "inputIds": ["$response.body#/inputs/0/id"],
        },
    }
}
LINKS: dict[tuple[str, str], dict[str, Any]] = {
    ("create_work_item", "201"): _item_links(),
    **{(name, "200"): _item_links() for name in (*ITEM_COMMANDS[:-1], *ACTION_COMMANDS)},
    ("claim", "200"): _run_links(),
    ("reserve", "200"): SETTLE_LINK,
    ("pending_input", "200"): CONSUME_LINK,
}
BEARER = {
    "type": "http",
    "scheme": "bearer",
    "description": "WORKCENTER_API_TOKEN or a scoped token (worker, user, operator). A server "
    "on a loopback address with no token configured asks for none.",
}


def _absent_not_null(schema: dict[str, Any]) -> None:
    """A parameter is sent or not: FastAPI's ``null`` arm for an optional one would have
    clients send the text ``null``."""
    arms = schema.get("anyOf")
    if arms is None:
        return
    kept = [arm for arm in arms if arm.get("type") != "null"]
    if len(kept) == 1:
        del schema["anyOf"]
        schema.update(kept[0])
    else:
        schema["anyOf"] = kept


def document(app: FastAPI) -> Callable[[], dict[str, Any]]:
    """The app's ``openapi`` function: FastAPI's document with ``ProblemDocument`` in its
    components, ``If-Match`` required where a route declares it, the links between
    operations, and the bearer token."""

    def build() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        spec = get_openapi(
            title=app.title,
            version=app.version,
            summary=app.summary,
            description=app.description,
            routes=app.routes,
        )
        schemas = spec.setdefault("components", {}).setdefault("schemas", {})
        problem = ProblemDocument.model_json_schema(
            by_alias=True, ref_template="#/components/schemas/{model}"
        )
        schemas.update(problem.pop("$defs", {}))
        schemas["ProblemDocument"] = problem
        schemas["ChangeRecord"] = ChangeRecord.model_json_schema(by_alias=True)
        spec["components"]["securitySchemes"] = {"bearer": BEARER}
        for where, path in spec.get("paths", {}).items():
            for operation in path.values():
                # A probe's path needs no token (the guard's public paths).
                operation["security"] = [] if where in PUBLIC_PATHS else [{"bearer": []}]
                for parameter in operation.get("parameters", ()):
                    _absent_not_null(parameter["schema"])
                    if parameter["in"] == "header" and parameter["name"].lower() == "if-match":
                        parameter["required"] = True
                        parameter["schema"] = {"type": "string", "pattern": ITEM_TAG.pattern}
                for status, answer in operation["responses"].items():
                    links = LINKS.get((operation["operationId"], status))
                    if links is not None:
                        answer["links"] = links
        app.openapi_schema = spec
        return spec

    return build
