"""The JSON responses of the API."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.responses import JSONResponse


class JSONBytes(JSONResponse):
    """JSON serialised once with orjson: the DTOs are plain JSON values already, so
    FastAPI's encoder (which walks every value of a DTO of up to 512 KiB) is skipped.
    A ``JSONResponse`` to FastAPI, so the document shows the route's ``response_model``;
    a route returns it built, so that model never validates or serialises it."""

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)
