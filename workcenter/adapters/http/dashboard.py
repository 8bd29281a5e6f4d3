"""The dashboard: one static page at ``/`` with its script and style, no build step.

The page holds no data: it reads the API with the same requests any client makes
(with the bearer token, when the server has one, kept in the tab's session storage)
and follows the change stream. Its Content-Security-Policy lets it load only its own
files and talk only to its own origin, and every value it shows is set as text.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import APIRouter, FastAPI
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles
from starlette.responses import Response

STATIC = Path(__file__).parent / "static"
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}

router = APIRouter(include_in_schema=False)


@router.get("/")
def page() -> FileResponse:
    return FileResponse(STATIC / "index.html", headers=SECURITY_HEADERS)


class _Files(StaticFiles):
    """The page's files with the page's headers: ``/static/index.html`` is the page too,
    and served without them another site could frame it (found by acceptance testing,
    ADR-0137)."""

    async def get_response(self, path: str, scope: Any) -> Response:
        response = await super().get_response(path, scope)
        response.headers.update(SECURITY_HEADERS)
        return response


def mount(app: FastAPI) -> None:
    app.include_router(router)
    app.mount("/static", _Files(directory=STATIC), name="static")
